//! The one renderer of errors: status, headers and Harper's `{"error": ...}` body.

use std::any::Any;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::{Class, Code};

use crate::http::format::{EncodeError, Format};

/// An error on its way to a client: a code from the core table, a message, and the
/// properties some errors carry beside it (a permission refusal's
/// `unauthorized_access` and `invalid_schema_items`, a role's validation errors).
#[derive(Debug)]
pub struct ApiError {
    code: Code,
    message: String,
    details: lyre_core::Object,
    /// Set for "database / table does not exist": to a user who is not a super user
    /// this is answered as the 403 a forbidden one gets, so names cannot be probed.
    missing_item: bool,
    /// Set for an operation that does not exist (metrics do not keep its name).
    unknown_operation: bool,
    /// The status a script stated with its error, answered in place of `code`'s
    /// (which still classes it: `ClientError` or `ServerError`).
    stated: Option<StatusCode>,
}

impl ApiError {
    /// An error with `code` and a client-facing `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: lyre_core::Object::default(),
            missing_item: false,
            unknown_operation: false,
            stated: None,
        }
    }

    /// The same error, answered with `status` (400 to 599) where its code's would
    /// be: the status a script's source stated with its error.
    pub fn with_stated_status(mut self, status: u16) -> Self {
        self.stated = StatusCode::from_u16(status).ok().filter(|s| s.is_client_error() || s.is_server_error());
        self
    }

    /// The HTTP status it is answered with.
    fn status(&self) -> StatusCode {
        self.stated
            .or_else(|| StatusCode::from_u16(self.code.status()).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Harper's 400 for an operation that does not exist.
    pub fn unknown_operation(operation: &str) -> Self {
        Self { unknown_operation: true, ..Self::bad_request(format!("Operation '{operation}' not found")) }
    }

    /// Whether this answers an operation that does not exist.
    pub fn is_unknown_operation(&self) -> bool {
        self.unknown_operation
    }

    /// The code it renders with.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The client-facing message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For a user who is not a super user, a missing database or table answers as a
    /// forbidden one does (Harper's hidden-item 403), so existence tells nothing.
    pub fn hidden_from(self, ctx: &lyre_core::Context) -> Self {
        if !self.missing_item || ctx.user.is_super_user() {
            return self;
        }
        lyre_core::Error::hidden(self.message).into()
    }

    /// The same error, its body carrying `details` beside the message.
    pub fn with_details(mut self, details: lyre_core::Object) -> Self {
        self.details = details;
        self
    }

    /// A 400 naming what is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::BadRequest, message)
    }

    /// Renders the error in `format` (JSON, CBOR or MessagePack, as the client asked).
    pub fn render(&self, format: Format) -> Response {
        let format = format.for_errors();
        let status = self.status();
        let mut body = lyre_core::Object::default();
        body.insert("error".into(), self.message.clone().into());
        body.extend(self.details.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut response = match format.encode(&lyre_core::Value::Object(body)) {
            Ok(bytes) => (status, [(header::CONTENT_TYPE, format.content_type())], bytes).into_response(),
            Err(_) => (status, self.message.clone()).into_response(),
        };
        let headers = response.headers_mut();
        match self.code {
            Code::MustLogin | Code::LoginFailed => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"lyre\""));
            }
            code if code.retryable() => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        close_if_unread(self.code, &mut response);
        response
    }
}

/// A 413 (or 408) is answered before the rest of the body is read, so the connection
/// cannot carry another request: say so, or a client reuses it and loses its next
/// request (reqwest: "IncompleteMessage").
fn close_if_unread(code: Code, response: &mut Response) {
    if matches!(code, Code::PayloadTooLarge | Code::RequestTimeout) {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

impl ApiError {
    /// Renders the error as Harper's REST interface does: a JSON string
    /// `"ClientError: <message>"` (`ServerError` for 5xx); a failed login is
    /// `{"error": "Login failed"}` and a missing one `"AccessViolation: Must login"`.
    pub fn render_rest(&self, format: Format) -> Response {
        // A failed login, and a lagging index (whose `code` and `retryable` a
        // client acts on), keep the object shape.
        if matches!(self.code, Code::LoginFailed | Code::DerivedIndexLagging) {
            return self.render(format);
        }
        let status = self.status();
        let body = lyre_core::Value::String(self.rest_text());
        let format = format.for_errors();
        let mut response = match format.encode(&body) {
            Ok(bytes) => (status, [(header::CONTENT_TYPE, format.content_type())], bytes).into_response(),
            Err(_) => (status, self.message.clone()).into_response(),
        };
        match self.code {
            Code::MustLogin => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
            }
            code if code.retryable() => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        close_if_unread(self.code, &mut response);
        response
    }
}

impl ApiError {
    /// The error as REST states it: `<kind>: <message>` (`AccessViolation: Must
    /// login`), also the reason a WebSocket subscription is closed with.
    pub fn rest_text(&self) -> String {
        let kind = match self.code {
            Code::MustLogin | Code::Forbidden => "AccessViolation",
            Code::NotFound => "HdbError",
            code if code.status() >= 500 => "ServerError",
            _ => "ClientError",
        };
        format!("{kind}: {}", self.message)
    }
}

impl From<EncodeError> for ApiError {
    fn from(err: EncodeError) -> Self {
        ApiError::new(Code::Internal, err.to_string())
    }
}

impl From<crate::cache::CacheError> for ApiError {
    fn from(err: crate::cache::CacheError) -> Self {
        match err {
            crate::cache::CacheError::Core(err) => ApiError::from(err),
            crate::cache::CacheError::Origin { ref error, .. } if let Some(status) = error.stated_status() => {
                ApiError::new(err.code(), err.to_string()).with_stated_status(status)
            }
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<lyre_core::Error> for ApiError {
    fn from(err: lyre_core::Error) -> Self {
        let code = err.code();
        if code.class() == Class::Internal {
            let id = uuid_like();
            tracing::error!(error = %err, request = %id, "internal error");
            return ApiError::new(code, format!("internal error, see the server log (request {id})"));
        }
        let message = err.to_string();
        match err {
            lyre_core::Error::DatabaseNotFound(_) | lyre_core::Error::TableNotFound { .. } => {
                ApiError { missing_item: true, ..ApiError::new(code, message) }
            }
            lyre_core::Error::Forbidden(denial) => ApiError::new(code, message).with_details(denial.into_body()),
            lyre_core::Error::InvalidPermissions(errors) => {
                ApiError::new(code, message).with_details(errors.into_body())
            }
            lyre_core::Error::DerivedIndexLagging(_) => {
                let mut details = lyre_core::Object::default();
                details.insert("code".into(), "DERIVED_INDEX_LAGGING".into());
                details.insert("retryable".into(), true.into());
                ApiError::new(code, message).with_details(details)
            }
            _ => ApiError::new(code, message),
        }
    }
}

/// A short random id tying a generic client message to the full log entry.
fn uuid_like() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The response when a handler panics: a 500 in Harper's shape; the process lives on.
pub fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into());
    tracing::error!(panic = %detail, "a request handler panicked");
    ApiError::new(Code::Internal, "internal error, see the server log").render(Format::Json)
}
