//! Content types scripts register (`contentTypes.set(type, {serialize,
//! deserialize})`), offered by the REST port as Harper's: a request body of such a
//! `Content-Type` is deserialized by the script and reaches Lyre as JSON; a
//! successful JSON answer the client's `Accept` prefers in such a type (before any
//! of Lyre's own) is serialized by the script. Requests that use none of them never
//! come here (`mod.rs` checks the registered types first), so Lyre's own formats
//! keep their path (past any `runFirst` middleware, whose `next` comes here too).
//! An answer is serialized whole, within the size middleware's `next` may hold.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use lyre_core::Value;

use super::middleware::MAX_NEXT_BODY;
use super::script::refusal;
use crate::app::AppState;
use crate::http::body::read_body;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::negotiate::accepted;
use crate::script::{Conversion, Converted, ScriptContentType, ScriptError};

/// Answers a request through Lyre's routing, converting its body and its answer
/// with the scripts' `types` where they apply.
pub(super) async fn adapt(
    state: &Arc<AppState>,
    types: &[ScriptContentType],
    peer: SocketAddr,
    mut parts: axum::http::request::Parts,
    body: &mut Option<Body>,
) -> Response {
    if let Err(err) = deserialize_body(state, types, &mut parts, body).await {
        return err.render_rest(Format::Json);
    }
    let wanted = preferred(&parts.headers, types);
    if wanted.is_some() {
        parts.headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    }
    let response = super::route(state, peer, parts, body).await;
    match wanted {
        Some(media) if response.status().is_success() && is_json(&response) => {
            serialize(state, &media, response).await.unwrap_or_else(|err| err.render_rest(Format::Json))
        }
        _ => response,
    }
}

/// Replaces a body of a type a script deserializes by its value, as JSON.
async fn deserialize_body(
    state: &AppState,
    types: &[ScriptContentType],
    parts: &mut axum::http::request::Parts,
    body: &mut Option<Body>,
) -> Result<(), ApiError> {
    let media = match parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        Some(value) => value.split(';').next().unwrap_or("").trim().to_ascii_lowercase(),
        None => return Ok(()),
    };
    if !types.iter().any(|t| t.deserialize && t.media == media) {
        return Ok(());
    }
    // Only for a path something serves: a client may not make the scripts parse
    // bodies for paths nothing answers.
    let exports = state.components.exports();
    let scripted = super::script::find(&exports, parts.uri.path()).is_some();
    if !super::names_export(&exports, parts, scripted) {
        return Ok(());
    }
    let arrived = read_body(state, &parts.headers, body, state.rest_body_limit).await?;
    let value = match state.components.scripts().convert(&media, Conversion::Deserialize(arrived.bytes.to_vec())).await
    {
        Ok(Converted::Value(value)) => value,
        Ok(Converted::Bytes(_)) => Value::Null,
        // The script's deserializer refused the body: the client's to mend.
        Err(ScriptError::Engine(message)) => {
            return Err(ApiError::new(
                lyre_core::Code::BadRequest,
                format!("the body is not valid {media}: {message}"),
            ));
        }
        Err(err) => return Err(refusal(err)),
    };
    let json = Format::Json.encode(&value)?;
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(json.len()));
    parts.headers.remove(header::TRANSFER_ENCODING);
    *body = Some(Body::from(json));
    Ok(())
}

/// The script's type the client prefers to every format of Lyre's, if any.
fn preferred(headers: &axum::http::HeaderMap, types: &[ScriptContentType]) -> Option<String> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for media in accepted(accept) {
        if types.iter().any(|t| t.serialize && t.media == media) {
            return Some(media);
        }
        if Format::from_media_type(&media).is_some() {
            return None;
        }
    }
    None
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// A JSON answer serialized in `media` by the script's type.
async fn serialize(state: &AppState, media: &str, response: Response) -> Result<Response, ApiError> {
    let (mut head, body) = response.into_parts();
    let too_large = || {
        ApiError::new(
            lyre_core::Code::PayloadTooLarge,
            format!("the answer is larger than a script's content type may serialize ({MAX_NEXT_BODY} bytes)"),
        )
    };
    let bytes = axum::body::to_bytes(body, MAX_NEXT_BODY).await.map_err(|_| too_large())?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|err| ApiError::new(lyre_core::Code::Internal, format!("the answer is not JSON: {err}")))?;
    let bytes = match state.components.scripts().convert(media, Conversion::Serialize(value)).await {
        Ok(Converted::Bytes(bytes)) => bytes,
        Ok(Converted::Value(_)) => Vec::new(),
        Err(err) => return Err(refusal(err)),
    };
    let content_type = HeaderValue::from_str(media).map_err(|_| {
        ApiError::new(lyre_core::Code::Internal, format!("'{media}' is not a media type a header can carry"))
    })?;
    head.headers.insert(header::CONTENT_TYPE, content_type);
    head.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(head, Body::from(bytes)))
}
