//! add_component, deploy_component, package_component, drop_component,
//! get_components, get_component_file, set_component_file.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::Context;
use lyre_core::access::require_super_user;

use crate::app::AppState;
use crate::components::ops;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};

pub async fn dispatch(
    state: &Arc<AppState>,
    ctx: &Context,
    operation: &str,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    require_super_user(ctx)?;
    let components = &state.components;
    let value = match operation {
        "get_components" => ops::list(components).await?,
        "add_component" => ops::add(components, &params.required_string(&["project"])?).await?,
        "deploy_component" => {
            let project = params.required_string(&["project"])?;
            let payload = params.string(&["payload"])?;
            let package = params.string(&["package"])?;
            ops::deploy(components, &project, payload, package).await?
        }
        "package_component" => {
            let project = params.required_string(&["project"])?;
            ops::package(components, &project, params.bool(&["skip_node_modules"])?.unwrap_or(false)).await?
        }
        "drop_component" => {
            let project = params.required_string(&["project"])?;
            ops::drop(components, &project, params.string(&["file"])?).await?
        }
        "get_component_file" => {
            let project = params.required_string(&["project"])?;
            let file = params.required_string(&["file"])?;
            let encoding = ops::Encoding::parse(params.string(&["encoding"])?.as_deref())?;
            ops::get_file(components, &project, &file, encoding).await?
        }
        "set_component_file" => {
            let project = params.required_string(&["project"])?;
            let file = params.required_string(&["file"])?;
            let payload = params.required_string(&["payload"])?;
            let encoding = ops::Encoding::parse(params.string(&["encoding"])?.as_deref())?;
            ops::set_file(components, &project, &file, &payload, encoding).await?
        }
        other => return Err(ApiError::bad_request(format!("Operation '{other}' not found"))),
    };
    reply(format, &value)
}
