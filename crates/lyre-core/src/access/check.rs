//! The one place a permission is decided: whether a request's user may run a kind
//! of operation, and what it may do to one table ([`TableAccess`]: which actions,
//! which attributes it may read and write). Refusals are Harper's 403s
//! ([`Denial`]).

use crate::access::Context;
use crate::access::permission::{AttributeGrant, TableGrant};
use crate::catalog::SYSTEM_DATABASE;
use crate::error::{Denial, Error, Result};
use crate::value::{Object, Value};

/// What a request wants to do to a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read records.
    Read,
    /// Create records.
    Insert,
    /// Change records.
    Update,
    /// Remove records.
    Delete,
}

impl Action {
    /// The action's name in a role document and in a refusal.
    pub fn key(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }

    fn granted(self, grant: &TableGrant) -> bool {
        match self {
            Action::Read => grant.read,
            Action::Insert => grant.insert,
            Action::Update => grant.update,
            Action::Delete => grant.delete,
        }
    }

    fn granted_on(self, grant: AttributeGrant) -> bool {
        match self {
            Action::Read => grant.read,
            Action::Insert => grant.insert,
            Action::Update => grant.update,
            Action::Delete => true,
        }
    }
}

fn refuse(denial: Denial) -> Error {
    Error::Forbidden(Box::new(denial))
}

/// Fails unless the user is a super user (users and roles, configuration, logs,
/// components, jobs of others, database lifecycle).
pub fn require_super_user(ctx: &Context) -> Result<()> {
    if ctx.user.is_super_user() {
        Ok(())
    } else {
        Err(refuse(Denial::because("This operation is restricted to 'super_user' roles")))
    }
}

/// [`require_super_user`], the refusal naming `operation`.
pub fn require_super_user_for(ctx: &Context, operation: &str) -> Result<()> {
    if ctx.user.is_super_user() {
        Ok(())
    } else {
        Err(Error::refused(format!("Operation '{operation}' is restricted to 'super_user' roles")))
    }
}

/// Fails unless the user may change the structure of `database` (create and drop
/// its tables and attributes): a super user, or a structure user of it. `operation`
/// names the request in the refusal.
/// (The `system` database's own refusals are the DDL's: its tables are fixed.)
pub fn require_structure(ctx: &Context, database: &str, operation: &str) -> Result<()> {
    let permissions = &ctx.user.role.permissions;
    if permissions.super_user || permissions.structure.covers(database) {
        return Ok(());
    }
    Err(refuse(Denial::because(format!(
        "User does not have access to perform '{operation}' against schema '{database}'"
    ))))
}

/// What one request may do to one table, once [`check_table`] let it in.
#[derive(Debug, Clone)]
pub struct TableAccess {
    database: String,
    table: String,
    /// `None`: every attribute; else the role's grant, attribute list included.
    grant: Option<TableGrant>,
}

impl TableAccess {
    /// Access with no restriction (the server's own work).
    pub(crate) fn unrestricted(database: &str, table: &str) -> Self {
        Self { database: database.to_string(), table: table.to_string(), grant: None }
    }

    /// Whether some attributes are hidden from or closed to this role.
    pub fn restricts_attributes(&self) -> bool {
        self.grant.as_ref().is_some_and(|g| g.attributes.is_some())
    }

    /// Whether the role may read attribute `name` (tables keyed by `primary_key`).
    pub fn may_read(&self, name: &str, primary_key: &str) -> bool {
        match &self.grant {
            Some(grant) if grant.attributes.is_some() => grant.attribute(name, primary_key).read,
            _ => true,
        }
    }

    /// Whether the role may change attribute `name` of existing records.
    pub fn may_update(&self, name: &str, primary_key: &str) -> bool {
        match &self.grant {
            Some(grant) if grant.attributes.is_some() => grant.attribute(name, primary_key).update,
            _ => true,
        }
    }

    /// Whether the role has any grant on attribute `name` (it appears in
    /// descriptions).
    pub fn sees(&self, name: &str, primary_key: &str) -> bool {
        match &self.grant {
            Some(grant) if grant.attributes.is_some() => {
                grant.attribute(name, primary_key) != AttributeGrant::default()
            }
            _ => true,
        }
    }

    /// Removes the properties of `record` the role may not read.
    pub fn strip(&self, record: &mut Object, primary_key: &str) {
        if self.restricts_attributes() {
            record.retain(|name, _| self.may_read(name, primary_key));
        }
    }

    /// [`TableAccess::strip`] on a result that is an object (a projection's bare
    /// values and arrays name only attributes the role was found to read).
    pub fn strip_value(&self, mut value: Value, primary_key: &str) -> Value {
        if let Value::Object(record) = &mut value {
            self.strip(record, primary_key);
        }
        value
    }

    /// Fails unless the role may `action` every attribute in `names`: the whole
    /// request is refused, naming each attribute and what it lacks. An attribute the
    /// role has no grant on at all is reported as not existing.
    pub fn require_attributes<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        actions: &[Action],
        primary_key: &str,
    ) -> Result<()> {
        let Some(grant) = self.grant.as_ref().filter(|g| g.attributes.is_some()) else { return Ok(()) };
        let mut lacking: Vec<(String, Vec<&str>)> = Vec::new();
        let mut hidden = Vec::new();
        for name in names {
            let granted = grant.attribute(name, primary_key);
            if granted == AttributeGrant::default() {
                let item = format!("Attribute '{name}' does not exist on '{}.{}'", self.database, self.table);
                if !hidden.contains(&item) {
                    hidden.push(item);
                }
                continue;
            }
            let needed: Vec<&str> = actions.iter().filter(|a| !a.granted_on(granted)).map(|a| a.key()).collect();
            if !needed.is_empty() && !lacking.iter().any(|(n, _)| n == name) {
                lacking.push((name.to_string(), needed));
            }
        }
        if !lacking.is_empty() {
            return Err(refuse(Denial::table(&self.database, &self.table, Vec::new(), lacking)));
        }
        if !hidden.is_empty() {
            return Err(refuse(Denial { unauthorized_access: Vec::new(), invalid_schema_items: hidden }));
        }
        Ok(())
    }
}

/// Fails unless the user may do every one of `actions` on `database.table`, and
/// says what it may do there. The `system` database is read-only to everyone but
/// the server itself (users and roles change through their operations); other
/// users see none of it. A table the role has no grant on is reported as not
/// existing.
pub fn check_table(ctx: &Context, database: &str, table: &str, actions: &[Action]) -> Result<TableAccess> {
    let permissions = &ctx.user.role.permissions;
    if database == SYSTEM_DATABASE {
        if ctx.is_internal() {
            return Ok(TableAccess::unrestricted(database, table));
        }
        if permissions.super_user {
            if actions.iter().any(|a| *a != Action::Read) {
                return Err(Error::SystemReadOnly);
            }
            return Ok(TableAccess::unrestricted(database, table));
        }
        let needed = actions.iter().map(|a| a.key()).collect();
        return Err(refuse(Denial::table(database, table, needed, Vec::new())));
    }
    if permissions.super_user {
        return Ok(TableAccess::unrestricted(database, table));
    }
    let Some(grant) = permissions.table(database, table).filter(TableGrant::describes) else {
        return Err(refuse(if permissions.describes_database(database) {
            Denial::hidden(format!("Table '{database}.{table}' does not exist"))
        } else {
            Denial::hidden(format!("database '{database}' does not exist"))
        }));
    };
    let needed: Vec<&str> = actions.iter().filter(|a| !a.granted(&grant)).map(|a| a.key()).collect();
    if !needed.is_empty() {
        return Err(refuse(Denial::table(database, table, needed, Vec::new())));
    }
    Ok(TableAccess { database: database.to_string(), table: table.to_string(), grant: Some(grant) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Role, User};
    use crate::value::Value;
    use std::sync::Arc;

    fn ctx(permission: &str) -> Context {
        let permission: Value = serde_json::from_str(permission).unwrap();
        Context::new(Arc::new(User {
            username: "u".into(),
            role: Role::new("r", permission),
            active: true,
            login_epoch: 0,
        }))
    }

    fn denial(result: Result<impl std::fmt::Debug>) -> Denial {
        match result {
            Err(Error::Forbidden(denial)) => *denial,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn role_documents_grant_per_table_actions() {
        let c = ctx(r#"{"dev":{"tables":{"dog":{"read":true,"insert":false}}}}"#);
        assert!(check_table(&c, "dev", "dog", &[Action::Read]).is_ok());
        let refused = denial(check_table(&c, "dev", "dog", &[Action::Insert]));
        assert_eq!(
            serde_json::to_value(&refused.unauthorized_access).unwrap(),
            serde_json::json!([{"schema": "dev", "table": "dog", "required_table_permissions": ["insert"],
                "required_attribute_permissions": []}])
        );
        assert_eq!(
            denial(check_table(&c, "dev", "cat", &[Action::Read])).invalid_schema_items,
            ["Table 'dev.cat' does not exist"]
        );
        assert_eq!(
            denial(check_table(&c, "prod", "cat", &[Action::Read])).invalid_schema_items,
            ["database 'prod' does not exist"]
        );
        assert!(require_super_user(&c).is_err());
        assert!(require_super_user(&Context::system()).is_ok());
    }

    #[test]
    fn the_system_database_is_read_only_but_to_the_server() {
        let admin = Context::new(Arc::new(User::system()));
        assert!(check_table(&admin, "system", "hdb_user", &[Action::Read]).is_ok());
        assert!(matches!(check_table(&admin, "system", "hdb_user", &[Action::Update]), Err(Error::SystemReadOnly)));
        assert!(check_table(&Context::system(), "system", "hdb_user", &[Action::Update]).is_ok());
        let reader = ctx(r#"{"system":{"tables":{"hdb_user":{"read":true}}}}"#);
        assert!(check_table(&reader, "system", "hdb_user", &[Action::Read]).is_err(), "a role cannot grant it");
    }

    #[test]
    fn attribute_lists_narrow_reads_and_refuse_writes_whole() {
        let c = ctx(r#"{"dev":{"tables":{"dog":{"read":true,"insert":true,"update":true,"delete":false,
                "attribute_permissions":[{"attribute_name":"name","read":true,"insert":true,"update":false},
                                         {"attribute_name":"secret","read":false,"insert":true,"update":true}]}}}}"#);
        let access = check_table(&c, "dev", "dog", &[Action::Read]).unwrap();
        let mut record: Object = serde_json::from_str(r#"{"id":1,"name":"a","secret":"s","age":3}"#).unwrap();
        access.strip(&mut record, "id");
        assert_eq!(record.keys().collect::<Vec<_>>(), ["id", "name"]);
        assert!(access.require_attributes(["id", "name"], &[Action::Insert], "id").is_ok());
        let refused = denial(access.require_attributes(["name", "secret"], &[Action::Update], "id"));
        assert_eq!(
            serde_json::to_value(&refused.unauthorized_access).unwrap()[0]["required_attribute_permissions"],
            serde_json::json!([{"attribute_name": "name", "required_permissions": ["update"]}])
        );
        assert_eq!(
            denial(access.require_attributes(["age"], &[Action::Insert], "id")).invalid_schema_items,
            ["Attribute 'age' does not exist on 'dev.dog'"]
        );
    }

    #[test]
    fn structure_users_change_only_their_databases() {
        let c = ctx(r#"{"structure_user":["dev"]}"#);
        assert!(require_structure(&c, "dev", "create_table").is_ok());
        assert_eq!(
            denial(require_structure(&c, "prod", "create_table")).unauthorized_access,
            [Value::from("User does not have access to perform 'create_table' against schema 'prod'")]
        );
        assert!(check_table(&c, "dev", "any", &[Action::Delete]).is_ok());
    }
}
