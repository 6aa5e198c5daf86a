//! add_component, deploy_component, package_component, drop_component,
//! get_components, get_component_file, set_component_file; and Harper's legacy
//! custom-function operations over the same components.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::Context;
use lyre_core::access::require_super_user;

use crate::app::AppState;
use crate::components::ops;
use crate::components::ops::custom_functions;
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
        "custom_functions_status" => custom_functions::status(components, state.control.config.http.port),
        "get_custom_functions" => custom_functions::list(components).await?,
        "get_custom_function" | "drop_custom_function" => {
            let (project, kind, file) = function_params(&mut params)?;
            if operation == "get_custom_function" {
                custom_functions::get(components, &project, &kind, &file).await?
            } else {
                custom_functions::drop(components, &project, &kind, &file).await?
            }
        }
        "set_custom_function" => {
            let (project, kind, file) = function_params(&mut params)?;
            let content = params.required_string(&["function_content"])?;
            custom_functions::set(components, &project, &kind, &file, content).await?
        }
        "add_custom_function_project" => ops::add(components, &project_param(&mut params)?).await?,
        "drop_custom_function_project" => {
            custom_functions::drop_project(components, &project_param(&mut params)?).await?
        }
        "package_custom_function_project" => {
            let project = project_param(&mut params)?;
            ops::package(components, &project, params.bool(&["skip_node_modules"])?.unwrap_or(false)).await?
        }
        "deploy_custom_function_project" => {
            let project = project_param(&mut params)?;
            let payload = params.string(&["payload"])?;
            let package = params.string(&["package"])?;
            ops::deploy(components, &project, payload, package).await?
        }
        other => return Err(ApiError::bad_request(format!("Operation '{other}' not found"))),
    };
    reply(format, &value)
}

/// The legacy operations' `project`, read as Harper reads it (`dogs.js` is `dogs`).
fn project_param(params: &mut Params) -> Result<String, ApiError> {
    Ok(custom_functions::plain_name(&params.required_string(&["project"])?))
}

/// A custom function's `project`, `type` and `file`.
fn function_params(params: &mut Params) -> Result<(String, String, String), ApiError> {
    let project = project_param(params)?;
    let kind = custom_functions::kind(&params.required_string(&["type"])?)?.to_string();
    let file = custom_functions::plain_name(&params.required_string(&["file"])?);
    Ok((project, kind, file))
}
