//! Who is asking: the resolved user every core operation takes.

use std::sync::Arc;

use crate::access::User;

/// The context of a request: the authenticated user. Required by every operation
/// that touches data, so no protocol can skip the permission check.
#[derive(Debug, Clone)]
pub struct Context {
    /// The authenticated user.
    pub user: Arc<User>,
}

impl Context {
    /// A context for `user`.
    pub fn new(user: Arc<User>) -> Self {
        Self { user }
    }

    /// The server itself (bootstrap, maintenance): a super user named `lyre`.
    pub fn system() -> Self {
        Self { user: Arc::new(User::system()) }
    }

    /// The name recorded in the transaction log.
    pub fn username(&self) -> &str {
        &self.user.username
    }
}
