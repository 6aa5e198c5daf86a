//! Users, roles and permission checks.
//!
//! Users and roles live in the `system` database (`hdb_user`, `hdb_role`, as in
//! Harper). Passwords are stored as argon2id hashes; verified logins are cached
//! briefly (Harper's `authentication.cacheTTL`) because argon2 is deliberately slow.

mod check;
mod user;
mod users;

pub use check::{Action, check_table, require_super_user};
pub use user::{Role, User};
pub use users::{AdminBootstrap, Users};
