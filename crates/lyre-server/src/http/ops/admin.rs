//! Running the server: `get_configuration`, `set_configuration`, `restart`,
//! `restart_service`, and the status values (`get_status`, `set_status`,
//! `clear_status`).

use std::sync::Arc;

use axum::response::Response;
use lyre_core::{Code, Context, Object, SYSTEM_DATABASE, Value};

use crate::app::AppState;
use crate::config::{Config, UpdateError, set_configuration as update_file};
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, message, reply};

/// The system table holding status values (Harper's).
const STATUS_TABLE: &str = "hdb_status";
/// The status ids Harper knows.
const STATUS_IDS: [&str; 3] = ["primary", "maintenance", "availability"];
/// Longest status value.
const STATUS_CHARS: usize = 512;
/// Parameters of the envelope that are not configuration keys.
const NOT_KEYS: [&str; 3] = ["hdb_user", "hdbAuthHeader", "replicated"];

/// `get_configuration`: the configuration as the next start would read it (the
/// file with defaults filled in and environment overrides applied), nested with
/// Harper's camelCase keys.
pub async fn get_configuration(state: &Arc<AppState>, format: Format) -> Result<Response, ApiError> {
    let root = state.control.root().to_path_buf();
    let config = crate::http::blocking::blocking("reading the configuration", move || {
        Config::load(Some(root), &|name| std::env::var(name).ok())
            .map_err(|err| ApiError::new(Code::Internal, format!("reading the configuration failed: {err}")))
    })
    .await?;
    reply(format, &config)
}

/// `set_configuration`: Harper's flattened keys (`logging_level`, `http_port`)
/// written to the config file, which is backed up first; applies at the next
/// start. An unknown key or a wrong value is refused naming it, and the file is
/// left as it was.
pub async fn set_configuration(state: &Arc<AppState>, params: Params, format: Format) -> Result<Response, ApiError> {
    let changes: Vec<(String, serde_json::Value)> = params
        .into_entries()
        .filter(|(key, _)| !NOT_KEYS.contains(&key.as_str()))
        .map(|(key, value)| Ok((key, serde_json::to_value(&value).map_err(|e| ApiError::bad_request(e.to_string()))?)))
        .collect::<Result<_, ApiError>>()?;
    if changes.is_empty() {
        return Err(ApiError::bad_request(
            "set_configuration needs at least one configuration key, e.g. logging_level",
        ));
    }
    let root = state.control.root().to_path_buf();
    let updated = crate::http::blocking::blocking("writing the configuration", move || {
        update_file(&root, changes).map_err(|err| match err {
            UpdateError::File(err) => {
                ApiError::new(Code::Internal, format!("the configuration was not changed: {err}"))
            }
            refused => ApiError::bad_request(refused.to_string()),
        })
    })
    .await?;
    if !updated.changed.is_empty() {
        state.control.config_changed();
        tracing::info!(changed = ?updated.changed, backup = ?updated.backup, "the configuration file changed");
    }
    let mut out = Object::default();
    out.insert(
        "message".into(),
        "Configuration successfully set. You must restart Lyre for new config settings to take effect.".into(),
    );
    out.insert("restart_required".into(), Value::Array(updated.changed.into_iter().map(Value::from).collect()));
    reply(format, &Value::Object(out))
}

/// `restart`: the server stops gracefully once this answer is sent (in-flight
/// requests finish, every queued write commits) and starts again, reading its
/// configuration afresh.
pub async fn restart(state: &Arc<AppState>, format: Format) -> Result<Response, ApiError> {
    state.control.request_restart();
    message(format, "Restarting Lyre. This may take up to 60 seconds.")
}

/// `restart_service`: `http_workers`, `http` and `harperdb` restart the server (its
/// listeners and request threads are one process); `custom_functions` reloads the
/// components before answering.
pub async fn restart_service(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let service = params.string(&["service"])?.unwrap_or_default();
    match service.as_str() {
        "http_workers" | "http" | "harperdb" => state.control.request_restart(),
        "custom_functions" | "custom functions" => state.components.load_all().await,
        _ => return Err(ApiError::bad_request("Invalid service")),
    }
    message(format, format!("Restarting {service}"))
}

/// `set_status`: stores `status` under `id` (`primary` by default).
pub async fn set_status(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let id = status_id(&mut params)?.unwrap_or_else(|| "primary".into());
    let status = match params.string(&["status"])? {
        None => return Err(ApiError::bad_request("'status' is required")),
        Some(status) if status.is_empty() => return Err(ApiError::bad_request("'status' is not allowed to be empty")),
        Some(status) if status.chars().count() > STATUS_CHARS => {
            return Err(ApiError::bad_request(format!(
                "'status' length must be less than or equal to {STATUS_CHARS} characters long"
            )));
        }
        Some(status) => status,
    };
    if id == "availability" && !["Available", "Unavailable"].contains(&status.as_str()) {
        return Err(ApiError::bad_request("Status \"availability\" only accepts these values: Available, Unavailable"));
    }
    let mut record = Object::default();
    record.insert("id".into(), id.into());
    record.insert("status".into(), status.into());
    status_table(state).await?.upsert(&Context::system(), vec![record]).await?;
    reply(format, &Value::Object(Object::default()))
}

/// `get_status`: one status record by `id` (`{}` when unset); without an `id`,
/// every status value, each component's state, and whether a configuration change
/// waits for a restart.
pub async fn get_status(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let table = status_table(state).await?;
    let ctx = Context::system();
    if let Some(id) = status_id(&mut params)? {
        let found = table.get_many(&ctx, &[Value::from(id)], &lyre_core::query::Select::Raw)?;
        return reply(format, &found.into_iter().next().map_or(Value::Object(Object::default()), Value::Object));
    }
    let ids: Vec<Value> = STATUS_IDS.iter().map(|id| Value::from(*id)).collect();
    let system = table.get_many(&ctx, &ids, &lyre_core::query::Select::Raw)?;
    let components = state.components.status().into_iter().map(|(name, status)| {
        let mut entry = Object::default();
        entry.insert("name".into(), name.into());
        match status.failure() {
            None => entry.insert("status".into(), "healthy".into()),
            Some(reason) => {
                entry.insert("status".into(), "error".into());
                entry.insert("error".into(), reason.into())
            }
        };
        Value::Object(entry)
    });
    let mut out = Object::default();
    out.insert("systemStatus".into(), Value::Array(system.into_iter().map(Value::Object).collect()));
    out.insert("componentStatus".into(), Value::Array(components.collect()));
    out.insert("restartRequired".into(), state.control.restart_required().into());
    reply(format, &Value::Object(out))
}

/// `clear_status`: removes the status value `id`.
pub async fn clear_status(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let id = status_id(&mut params)?.ok_or_else(|| ApiError::bad_request("'id' is required"))?;
    status_table(state).await?.delete(&Context::system(), vec![Value::from(id)]).await?;
    reply(format, &serde_json::json!({"message": true}))
}

/// The optional `id` of a status value, one of [`STATUS_IDS`].
fn status_id(params: &mut Params) -> Result<Option<String>, ApiError> {
    match params.string(&["id"])? {
        Some(id) if !STATUS_IDS.contains(&id.as_str()) => {
            Err(ApiError::bad_request(format!("'id' must be one of [{}]", STATUS_IDS.join(", "))))
        }
        id => Ok(id),
    }
}

/// `system.hdb_status`, created on first use.
async fn status_table(state: &Arc<AppState>) -> Result<lyre_core::Table, ApiError> {
    let spec = lyre_core::catalog::TableSpec::dynamic(STATUS_TABLE, "id");
    Ok(state.engine.database(SYSTEM_DATABASE)?.table_or_create(&Context::system(), spec).await?)
}
