//! Scripts' HTTP middleware (`server.http`) in the REST port's handling, as
//! Harper orders it: a `runFirst` listener sees every request before anything of
//! Lyre's (static files, REST, authentication, the scripts' content types), and its
//! `next` is all of that; any
//! other listener sees what Lyre's own handling found nothing for, after
//! authentication, and its `next` answers 404. When both kinds are registered, a
//! request that passes through the first kind to nothing is handed to the second
//! kind by the same script call (so one JavaScript worker never waits on itself).
//!
//! The request's body is read whole (within `http.maxBodySize`) before the script
//! sees it, and what `next` answers is read whole (within [`MAX_NEXT_BODY`]) before
//! the script gets it: WebSocket and event-stream requests bypass middleware.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use lyre_core::access::User;

use super::script::{carries_body, refusal, respond};
use crate::app::AppState;
use crate::http::body::read_body;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::negotiate::response_format;
use crate::script::{HttpCall, HttpNext, NextRequest, NextResponse, Phase};

/// The largest answer a middleware's `next` reads for its script.
pub const MAX_NEXT_BODY: usize = 32 << 20;

/// Marks a request a first-phase middleware passed on with `next`: what nothing
/// answers there is reported back (see [`Unmatched`]), not handed to the
/// last-phase middleware by another script call.
#[derive(Debug, Clone, Copy)]
pub(super) struct PassedOn;

/// Marks a response to a request nothing of Lyre's answered, with the user it was
/// authenticated as (the last-phase middleware's `request.user`).
#[derive(Debug, Clone)]
pub(super) struct Unmatched(pub Option<Arc<User>>);

/// Runs the middleware of `phase` on a request; `user` is the authenticated user
/// (the last phase runs after authentication).
pub(super) async fn run(
    state: &AppState,
    phase: Phase,
    peer: SocketAddr,
    parts: axum::http::request::Parts,
    body: &mut Option<Body>,
    user: Option<Arc<User>>,
) -> Response {
    let format = response_format(&parts.headers).unwrap_or(Format::Json);
    let answered = async {
        let bytes = if carries_body(&parts.headers) {
            Some(read_body(state, &parts.headers, body, state.rest_body_limit).await?.bytes.to_vec())
        } else {
            None
        };
        let call = HttpCall {
            phase,
            method: parts.method.as_str().to_string(),
            url: parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_string(), |pq| pq.as_str().to_string()),
            headers: parts.headers.clone(),
            body: bytes,
            ip: peer.ip().to_string(),
            user,
            extensions: parts.extensions.clone(),
        };
        let reply = state.components.scripts().http(call).await.map_err(refusal)?;
        respond(reply, format)
    };
    match answered.await {
        Ok(response) => response,
        Err(err) => err.render_rest(format),
    }
}

/// The server's own handling past a middleware: the REST port's routing (for the
/// first phase), or 404 (for the last).
pub struct RestNext {
    state: Weak<AppState>,
    /// The request threads' runtime (a middleware's `next` comes from a worker's).
    runtime: tokio::runtime::Handle,
}

impl RestNext {
    /// `next` for `state`'s REST port, run on the calling runtime.
    pub fn new(state: &Arc<AppState>) -> Self {
        Self { state: Arc::downgrade(state), runtime: tokio::runtime::Handle::current() }
    }
}

impl HttpNext for RestNext {
    fn next(&self, phase: Phase, request: NextRequest) -> BoxFuture<'static, NextResponse> {
        let (state, runtime) = (self.state.clone(), self.runtime.clone());
        Box::pin(async move {
            // The scripts it needs are answered by the worker waiting for this `next`.
            let handled = runtime.spawn(crate::passed_on::mark(async move {
                let response = match (phase, state.upgrade()) {
                    (_, None) => (StatusCode::SERVICE_UNAVAILABLE, "the server is stopping").into_response(),
                    (Phase::Last, Some(_)) => super::not_found(),
                    (Phase::First, Some(state)) => match rebuilt(request) {
                        Ok((peer, parts, body)) => super::answer(&state, peer, parts, &mut Some(body)).await,
                        Err(err) => err.render_rest(Format::Json),
                    },
                };
                whole(response).await
            }));
            handled.await.unwrap_or_else(|_| NextResponse {
                status: 500,
                headers: Vec::new(),
                body: b"the server's handling of next() failed".to_vec(),
                unmatched: false,
                user: None,
            })
        })
    }
}

/// A request a script passes on, as the router takes it.
fn rebuilt(request: NextRequest) -> Result<(SocketAddr, axum::http::request::Parts, Body), ApiError> {
    let invalid = |what: &str| ApiError::new(lyre_core::Code::BadRequest, format!("next() was given {what}"));
    let method = Method::from_bytes(request.method.as_bytes()).map_err(|_| invalid("a method that is not HTTP's"))?;
    let uri: axum::http::Uri = request.url.parse().map_err(|_| invalid("a URL that is not a path and query"))?;
    let mut builder = axum::http::Request::builder().method(method).uri(uri);
    for (name, value) in &request.headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) else {
            return Err(invalid("a header that is not HTTP's"));
        };
        builder = builder.header(name, value);
    }
    let body = request.body.map(Body::from).unwrap_or_default();
    let (mut parts, body) = builder.body(body).map_err(|_| invalid("a request that is not HTTP's"))?.into_parts();
    parts.extensions = request.extensions;
    parts.extensions.insert(PassedOn);
    let peer = parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>().map_or(super::UNKNOWN_PEER, |c| c.0);
    Ok((peer, parts, body))
}

/// A response read whole for a script (a body past [`MAX_NEXT_BODY`] is refused).
async fn whole(response: Response) -> NextResponse {
    let (parts, body) = response.into_parts();
    let (unmatched, user) = match parts.extensions.get::<Unmatched>() {
        Some(Unmatched(user)) => (true, user.clone()),
        None => (false, None),
    };
    let headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
        .collect();
    match axum::body::to_bytes(body, MAX_NEXT_BODY).await {
        Ok(bytes) => NextResponse { status: parts.status.as_u16(), headers, body: bytes.to_vec(), unmatched, user },
        Err(_) => NextResponse {
            status: 502,
            headers: Vec::new(),
            body: format!("the answer to next() is larger than middleware may hold ({MAX_NEXT_BODY} bytes)")
                .into_bytes(),
            unmatched: false,
            user: None,
        },
    }
}
