//! The one error type of lyre-core and the table of codes every protocol renders.

use lyre_store::Error as StoreError;

use crate::value::{Object, Value};

/// Result alias for core operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an error is; decides logging and retry advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The request was wrong; the client can fix it.
    User,
    /// Authentication or authorization failed.
    Auth,
    /// The server cannot take the request now; retrying later may succeed.
    Unavailable,
    /// A bug or an environment failure; logged in full.
    Internal,
}

/// Stable error codes. Each row gives the HTTP status, the class and whether a retry
/// may succeed; protocols map these, never the error variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The request is malformed or names something invalid.
    BadRequest,
    /// No credentials were given.
    MustLogin,
    /// The credentials are wrong.
    LoginFailed,
    /// The user may not do this.
    Forbidden,
    /// A database, table, attribute or record does not exist.
    NotFound,
    /// The thing to create already exists.
    AlreadyExists,
    /// A record to create exists (REST `POST`), or a conditional write lost its race.
    Conflict,
    /// A conditional write's precondition (`If-Match`) did not hold at commit.
    PreconditionFailed,
    /// The resource does not implement the method.
    MethodNotAllowed,
    /// The method is not one the server knows.
    NotImplemented,
    /// A `BREW` (RFC 2324): Harper answers 418, being short and stout.
    Teapot,
    /// The request body exceeds the configured limit.
    PayloadTooLarge,
    /// The body's media type is not one we read.
    UnsupportedMediaType,
    /// No acceptable response media type.
    NotAcceptable,
    /// Too many attempts lately (failed logins); retry later.
    TooManyRequests,
    /// The request (its body) did not arrive in time.
    RequestTimeout,
    /// The write queue is full or the database is closing.
    Overloaded,
    /// The database has reached its configured maximum size.
    StorageFull,
    /// A caching table's source failed or answered what cannot be a record.
    BadGateway,
    /// A caching table's source did not answer in time, or the record is not
    /// cached and the request forbade a fetch (`only-if-cached`).
    GatewayTimeout,
    /// A derived index (a vector index) is further behind than allowed: writes to
    /// its table, and queries that need it current, wait until it catches up.
    DerivedIndexLagging,
    /// Anything else.
    Internal,
}

impl Code {
    /// Every code, for exhaustive table tests.
    pub const ALL: [Code; 22] = [
        Code::BadRequest,
        Code::Conflict,
        Code::PreconditionFailed,
        Code::MethodNotAllowed,
        Code::NotImplemented,
        Code::Teapot,
        Code::MustLogin,
        Code::LoginFailed,
        Code::Forbidden,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PayloadTooLarge,
        Code::UnsupportedMediaType,
        Code::NotAcceptable,
        Code::TooManyRequests,
        Code::RequestTimeout,
        Code::Overloaded,
        Code::StorageFull,
        Code::BadGateway,
        Code::GatewayTimeout,
        Code::DerivedIndexLagging,
        Code::Internal,
    ];

    /// `(HTTP status, class, retryable)`: the table.
    pub const fn row(self) -> (u16, Class, bool) {
        match self {
            Code::BadRequest => (400, Class::User, false),
            Code::MustLogin => (401, Class::Auth, false),
            Code::LoginFailed => (401, Class::Auth, false),
            Code::Forbidden => (403, Class::Auth, false),
            Code::NotFound => (404, Class::User, false),
            // Harper answers "already exists" with 400.
            Code::AlreadyExists => (400, Class::User, false),
            Code::Conflict => (409, Class::User, false),
            Code::PreconditionFailed => (412, Class::User, false),
            Code::MethodNotAllowed => (405, Class::User, false),
            Code::NotImplemented => (501, Class::User, false),
            Code::Teapot => (418, Class::User, false),
            Code::PayloadTooLarge => (413, Class::User, false),
            Code::UnsupportedMediaType => (415, Class::User, false),
            Code::NotAcceptable => (406, Class::User, false),
            Code::TooManyRequests => (429, Class::User, true),
            Code::RequestTimeout => (408, Class::User, false),
            Code::Overloaded => (503, Class::Unavailable, true),
            Code::StorageFull => (507, Class::Unavailable, false),
            Code::BadGateway => (502, Class::Unavailable, true),
            Code::GatewayTimeout => (504, Class::Unavailable, true),
            Code::DerivedIndexLagging => (503, Class::Unavailable, true),
            Code::Internal => (500, Class::Internal, false),
        }
    }

    /// The HTTP status.
    pub const fn status(self) -> u16 {
        self.row().0
    }

    /// The class.
    pub const fn class(self) -> Class {
        self.row().1
    }

    /// Whether retrying the same request later may succeed.
    pub const fn retryable(self) -> bool {
        self.row().2
    }
}

/// Everything a core operation can fail with. Messages use Harper's wording where
/// Harper's clients may match on it.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid input, with a message naming the field.
    #[error("{0}")]
    Invalid(String),
    /// A derived index is behind further than allowed (Harper's
    /// `DerivedIndexLagError`): the message names the index and how far.
    #[error("{0}")]
    DerivedIndexLagging(String),
    /// `database 'x' does not exist`.
    #[error("database '{0}' does not exist")]
    DatabaseNotFound(String),
    /// `Table 'db.t' does not exist`.
    #[error("Table '{database}.{table}' does not exist")]
    TableNotFound {
        /// The database named.
        database: String,
        /// The table named.
        table: String,
    },
    /// `database 'x' already exists`.
    #[error("database '{0}' already exists")]
    DatabaseExists(String),
    /// `Table 't' already exists in 'db'`.
    #[error("Table '{table}' already exists in '{database}'")]
    TableExists {
        /// The database.
        database: String,
        /// The table.
        table: String,
    },
    /// `attribute 'a' already exists in db.t`.
    #[error("attribute '{attribute}' already exists in {database}.{table}")]
    AttributeExists {
        /// The database.
        database: String,
        /// The table.
        table: String,
        /// The attribute.
        attribute: String,
    },
    /// An attribute named in a projection or condition is not in the table.
    #[error("unknown attribute '{0}'")]
    UnknownAttribute(String),
    /// A sort names an attribute the table does not have.
    #[error("{0} is not a defined attribute")]
    NotDefinedAttribute(String),
    /// An attribute to drop does not exist.
    #[error("attribute '{0}' does not exist")]
    AttributeNotFound(String),
    /// A record to create already exists.
    #[error("{0}")]
    Conflict(String),
    /// A named thing (a user, a role) does not exist; the message says which.
    #[error("{0}")]
    Missing(String),
    /// A role's permission document is malformed or names what does not exist.
    #[error("Errors in the role permissions JSON provided")]
    InvalidPermissions(Box<PermissionErrors>),
    /// The user's account is switched off (`active: false`).
    #[error("Cannot complete request: User is inactive")]
    Inactive,
    /// Too many failed logins for this user or from this address lately.
    #[error("Too many failed login attempts; try again in {0} seconds")]
    TooManyLogins(u64),
    /// A conditional write found the record changed (or gone) at commit.
    #[error("{0}")]
    PreconditionFailed(String),
    /// A database's lifecycle prevents the request, or a step of it failed.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// A test asked this step to fail (`LYRE_FAILPOINT`).
    #[error("failpoint: {0} failed")]
    Failpoint(String),
    /// No credentials.
    #[error("Must login")]
    MustLogin,
    /// Wrong credentials.
    #[error("Login failed")]
    LoginFailed,
    /// The user may not run this; the denial says why, in Harper's 403 body.
    #[error("This operation is not authorized due to role restrictions and/or invalid database items")]
    Forbidden(Box<Denial>),
    /// A client asked to change the `system` database directly (users and roles
    /// change only through their operations).
    #[error(
        "The 'system' database, tables and records are used internally by HarperDB and cannot be updated or removed."
    )]
    SystemReadOnly,
    /// A failure in the storage engine.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored value failed to decode.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A value larger than its configured limit (a blob past `storage.maxBlobSize`).
    #[error("{0}")]
    TooLarge(String),

    /// The code computing a `@computed` attribute failed.
    #[error("Computing {table}.{attribute} failed: {message}")]
    Computed {
        /// The table.
        table: String,
        /// The computed attribute.
        attribute: String,
        /// What the code said.
        message: String,
    },
    /// Work on the blocking pool ended without an answer (it panicked).
    #[error("a background step stopped unexpectedly: {0}")]
    Stopped(String),
}

impl Error {
    /// The code this error renders as.
    pub fn code(&self) -> Code {
        match self {
            Error::Invalid(_) | Error::UnknownAttribute(_) => Code::BadRequest,
            Error::DatabaseNotFound(_)
            | Error::TableNotFound { .. }
            | Error::NotDefinedAttribute(_)
            | Error::AttributeNotFound(_) => Code::NotFound,
            Error::DatabaseExists(_) | Error::TableExists { .. } | Error::AttributeExists { .. } => Code::AlreadyExists,
            Error::Conflict(_) => Code::Conflict,
            Error::Missing(_) => Code::NotFound,
            Error::InvalidPermissions(_) => Code::BadRequest,
            Error::Inactive => Code::LoginFailed,
            Error::TooManyLogins(_) => Code::TooManyRequests,
            Error::PreconditionFailed(_) => Code::PreconditionFailed,
            Error::Lifecycle(e) => e.code(),
            Error::Failpoint(_) => Code::Internal,
            Error::DerivedIndexLagging(_) => Code::DerivedIndexLagging,
            Error::MustLogin => Code::MustLogin,
            Error::LoginFailed => Code::LoginFailed,
            Error::Forbidden(_) | Error::SystemReadOnly => Code::Forbidden,
            Error::Store(e) => match e {
                StoreError::Overloaded | StoreError::Closed | StoreError::BatchAborted(_) => Code::Overloaded,
                StoreError::MapFull { .. } => Code::StorageFull,
                StoreError::KeyTooLong { .. } | StoreError::InvalidKey(_) | StoreError::TooManyTables { .. } => {
                    Code::BadRequest
                }
                _ => Code::Internal,
            },
            Error::Corrupt(_) | Error::Stopped(_) | Error::Computed { .. } => Code::Internal,
            Error::TooLarge(_) => Code::PayloadTooLarge,
        }
    }

    /// A 403 for one reason (a message in `unauthorized_access`).
    pub fn refused(message: impl Into<String>) -> Self {
        Error::Forbidden(Box::new(Denial::because(message)))
    }

    /// A 403 that hides an item the user may not see (`invalid_schema_items`).
    pub fn hidden(item: impl Into<String>) -> Self {
        Error::Forbidden(Box::new(Denial::hidden(item)))
    }

    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }
}

/// Why a database's drop, restore or backup could not go ahead, or failed. The
/// refusals answer 409 (the request may succeed once the database is settled), a file
/// that is not a backup 400, and failures of the protocol's own steps 500.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The database is being dropped or restored: new work is refused.
    #[error("database '{database}' is being dropped or restored")]
    Closing {
        /// The database.
        database: String,
    },
    /// An interrupted drop or restore of the database could not be settled safely;
    /// it is refused until a restart (or a retried drop) settles it.
    #[error("database '{database}' is blocked: {reason}")]
    Blocked {
        /// The database.
        database: String,
        /// What went wrong, and how to settle it.
        reason: String,
    },
    /// Users still held the database when the release timeout ran out: nothing changed.
    #[error("database '{database}' is in use and was not changed: held by {holders}")]
    InUse {
        /// The database.
        database: String,
        /// Who held it, comma separated.
        holders: String,
    },
    /// Another drop, restore or server holds what this one needs.
    #[error("{0}")]
    Busy(String),
    /// The protocol refuses to act (a symbolic link, an unreadable marker): nothing
    /// was changed.
    #[error("{0}")]
    Refused(String),
    /// The file offered to a restore is not a usable Lyre database.
    #[error("{path} is not a usable Lyre database backup: {reason}")]
    NotABackup {
        /// The file.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A step of the protocol failed (a file system error, storage that did not
    /// close, a malformed marker): an internal fault.
    #[error("{0}")]
    Failed(String),
}

impl LifecycleError {
    /// The code this error renders as.
    pub fn code(&self) -> Code {
        match self {
            LifecycleError::Closing { .. }
            | LifecycleError::Blocked { .. }
            | LifecycleError::InUse { .. }
            | LifecycleError::Busy(_)
            | LifecycleError::Refused(_) => Code::Conflict,
            LifecycleError::NotABackup { .. } => Code::BadRequest,
            LifecycleError::Failed(_) => Code::Internal,
        }
    }

    /// A failed step: `what` failed because of `err`.
    pub(crate) fn failed(what: impl std::fmt::Display, err: impl std::fmt::Display) -> Error {
        Error::Lifecycle(LifecycleError::Failed(format!("{what} failed: {err}")))
    }
}

impl From<rmp_serde::decode::Error> for Error {
    fn from(err: rmp_serde::decode::Error) -> Self {
        Error::Corrupt(err.to_string())
    }
}

/// Why a request was refused, in Harper's 403 body: what the role lacks
/// (`unauthorized_access`: messages, or per-table entries naming the permissions
/// required) and what it may not even see (`invalid_schema_items`, worded as if the
/// item did not exist, so a role learns nothing of what it cannot read).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Denial {
    /// Messages or `{schema, table, required_table_permissions, required_attribute_permissions}` entries.
    pub unauthorized_access: Vec<Value>,
    /// `database 'x' does not exist`, `Table 'x.y' does not exist`, `Attribute 'a' does not exist on 'x.y'`.
    pub invalid_schema_items: Vec<String>,
}

impl Denial {
    /// A refusal for one reason, as a message.
    pub fn because(message: impl Into<String>) -> Self {
        Self { unauthorized_access: vec![Value::String(message.into())], invalid_schema_items: Vec::new() }
    }

    /// The two lists, as the properties of Harper's 403 body beside `error`.
    pub fn into_body(self) -> Object {
        let mut body = Object::default();
        body.insert("unauthorized_access".into(), Value::Array(self.unauthorized_access));
        let items = self.invalid_schema_items.into_iter().map(Value::String).collect();
        body.insert("invalid_schema_items".into(), Value::Array(items));
        body
    }

    /// A refusal that hides an item the role cannot see.
    pub fn hidden(item: impl Into<String>) -> Self {
        Self { unauthorized_access: Vec::new(), invalid_schema_items: vec![item.into()] }
    }

    pub(crate) fn table(database: &str, table: &str, actions: Vec<&str>, attributes: Vec<(String, Vec<&str>)>) -> Self {
        let mut entry = Object::default();
        entry.insert("schema".into(), database.into());
        entry.insert("table".into(), table.into());
        entry.insert("required_table_permissions".into(), strings(actions));
        let attributes = attributes
            .into_iter()
            .map(|(name, needed)| {
                let mut a = Object::default();
                a.insert("attribute_name".into(), name.into());
                a.insert("required_permissions".into(), strings(needed));
                Value::Object(a)
            })
            .collect();
        entry.insert("required_attribute_permissions".into(), Value::Array(attributes));
        Self { unauthorized_access: vec![Value::Object(entry)], invalid_schema_items: Vec::new() }
    }
}

fn strings(items: Vec<&str>) -> Value {
    Value::Array(items.into_iter().map(Value::from).collect())
}

/// The problems found in a permission document (empty: it is valid).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PermissionErrors {
    /// About the document, its databases and tables.
    pub main: Vec<String>,
    /// Per `<database>_<table>`, about that table's grant.
    pub tables: std::collections::BTreeMap<String, Vec<String>>,
}

impl PermissionErrors {
    /// Whether nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty() && self.tables.is_empty()
    }

    /// Harper's 400 body properties beside `error`: `main_permissions` and
    /// `schema_permissions`.
    pub fn into_body(self) -> Object {
        let mut body = Object::default();
        body.insert("main_permissions".into(), Value::Array(self.main.into_iter().map(Value::String).collect()));
        let tables = self
            .tables
            .into_iter()
            .map(|(k, v)| (k, Value::Array(v.into_iter().map(Value::String).collect())))
            .collect();
        body.insert("schema_permissions".into(), Value::Object(tables));
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_consistent_row() {
        for code in Code::ALL {
            let (status, class, retryable) = code.row();
            assert!((400..600).contains(&status), "{code:?}");
            // Retry later: an overloaded server, a failing or slow origin, or a
            // client over a rate limit.
            let later = class == Class::Unavailable && matches!(status, 502..=504);
            assert_eq!(retryable, later || status == 429, "{code:?}");
            assert_eq!(class == Class::Internal, status == 500, "{code:?}");
            assert_eq!(class == Class::Auth, matches!(status, 401 | 403), "{code:?}");
        }
    }

    #[test]
    fn messages_use_harpers_wording() {
        let e = Error::TableNotFound { database: "dev".into(), table: "nope".into() };
        assert_eq!(e.to_string(), "Table 'dev.nope' does not exist");
        assert_eq!(e.code().status(), 404);
        assert_eq!(Error::DatabaseExists("dev".into()).to_string(), "database 'dev' already exists");
        assert_eq!(Error::Store(StoreError::Overloaded).code(), Code::Overloaded);
    }
}
