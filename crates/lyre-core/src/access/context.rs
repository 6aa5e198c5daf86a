//! Who is asking: the resolved user every core operation takes.

use std::sync::Arc;

use crate::access::User;

/// The context of a request: the authenticated user. Required by every operation
/// that touches data, so no protocol can skip the permission check.
#[derive(Debug, Clone)]
pub struct Context {
    /// The authenticated user.
    pub user: Arc<User>,
    /// The server's own work (bootstrap, the user and role operations' writes, the
    /// services): the only context that may change the `system` database.
    internal: bool,
    /// The client connection asking, when it names itself (see [`Context::origin`]).
    origin: Option<Arc<str>>,
}

impl Context {
    /// A context for `user`, a client.
    pub fn new(user: Arc<User>) -> Self {
        Self { user, internal: false, origin: None }
    }

    /// The server itself (bootstrap, maintenance): a super user named `lyre`.
    pub fn system() -> Self {
        Self { user: Arc::new(User::system()), internal: true, origin: None }
    }

    /// Whether this is the server's own work rather than a client's request.
    pub fn is_internal(&self) -> bool {
        self.internal
    }

    /// The same context, its writes logged as made by the connection `origin`.
    pub fn with_origin(mut self, origin: impl Into<Arc<str>>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// The client connection asking, as its writes are logged (an MQTT client is
    /// `mqtt:<client id>`), so a subscriber can leave out its own changes.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// The name recorded in the transaction log.
    pub fn username(&self) -> &str {
        &self.user.username
    }
}
