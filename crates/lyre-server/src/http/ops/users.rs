//! add_user, alter_user, drop_user, list_users, user_info, add_role, alter_role,
//! drop_role, list_roles: Harper's bodies in, Harper's answers out; the rules live
//! in core (`lyre_core::users`).

use std::sync::Arc;

use axum::response::Response;
use lyre_core::users::{NewRole, NewUser, RoleChange, UserChange};
use lyre_core::{Context, Value};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::crud::written;
use crate::http::ops::{Params, message, reply};

/// `add_user`: `{"message": "<username> successfully added"}`.
pub async fn add_user(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let user = NewUser {
        username: params.required_string(&["username"])?,
        password: params.required_string(&["password"])?,
        role: params.required_string(&["role"])?,
        active: params.bool(&["active"])?.unwrap_or(true),
    };
    let username = user.username.clone();
    state.engine.users().add_user(ctx, user).await?;
    message(format, format!("{username} successfully added"))
}

/// `alter_user`: the update's summary, as Harper answers it.
pub async fn alter_user(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let change = UserChange {
        username: params.required_string(&["username"])?,
        password: params.string(&["password"])?,
        role: params.string(&["role"])?,
        active: params.bool(&["active"])?,
    };
    let summary = state.engine.users().alter_user(ctx, change).await?;
    let text = format!("updated {} of 1 records", summary.written.len());
    reply(format, &written(text, summary, "update_hashes", true))
}

/// `drop_user`: `{"message": "<username> successfully deleted"}`.
pub async fn drop_user(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let username = params.required_string(&["username"])?;
    state.engine.users().drop_user(ctx, &username).await?;
    message(format, format!("{username} successfully deleted"))
}

/// `list_users`: every user with its role, without secrets.
pub async fn list_users(state: &Arc<AppState>, ctx: &Context, format: Format) -> Result<Response, ApiError> {
    let users = state.engine.users().list_users(ctx)?;
    reply(format, &Value::Array(users.into_iter().map(Value::Object).collect()))
}

/// `user_info`: the caller, with its role.
pub async fn user_info(state: &Arc<AppState>, ctx: &Context, format: Format) -> Result<Response, ApiError> {
    reply(format, &Value::Object(state.engine.users().user_info(ctx)?))
}

/// `add_role`: the role as stored.
pub async fn add_role(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let role = NewRole {
        role: params.required_string(&["role"])?,
        id: params.string(&["id"])?,
        permission: params.required_value(&["permission"])?,
    };
    let stored = state.engine.users().add_role(ctx, state.engine.as_ref(), role).await?;
    reply(format, &Value::Object(stored))
}

/// `alter_role`: the role as stored.
pub async fn alter_role(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let change = RoleChange {
        id: params.required_string(&["id"])?,
        role: params.string(&["role"])?,
        permission: params.required_value(&["permission"])?,
    };
    let stored = state.engine.users().alter_role(ctx, state.engine.as_ref(), change).await?;
    reply(format, &Value::Object(stored))
}

/// `drop_role`: `{"message": "<role> successfully deleted"}`.
pub async fn drop_role(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let id = params.required_string(&["id"])?;
    let name = state.engine.users().drop_role(ctx, &id).await?;
    message(format, format!("{name} successfully deleted"))
}

/// `list_roles`: every role record.
pub async fn list_roles(state: &Arc<AppState>, ctx: &Context, format: Format) -> Result<Response, ApiError> {
    let roles = state.engine.users().list_roles(ctx)?;
    reply(format, &Value::Array(roles.into_iter().map(Value::Object).collect()))
}
