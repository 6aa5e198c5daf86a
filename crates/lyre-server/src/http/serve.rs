//! The accept loop both HTTP ports share, with the bounds that keep slow or abusive
//! clients from holding the server: a connection cap across both ports and one per
//! client address (a new connection over either is closed at once, so it never
//! waits in the kernel's queue), a small reserve above the cap for loopback clients
//! (health checks and an operator's `curl` get through a flood), and a deadline for
//! each request's headers that also closes connections left idle between requests
//! (a slowloris client, or thousands of idle sockets, are gone after it). The
//! deadline is kept per connection, not per request: each connection counts its
//! requests in flight ([`Activity`]) and is shut down gracefully once none has run
//! for that long (an HTTP/2 client's pings do not count), and dropped if that
//! shutdown waits on headers that never finish. A per-request header timer (hyper's
//! own) would cost every request a timer entry.
//!
//! On shutdown the loop stops accepting and waits for the connections it serves to
//! finish their requests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::http::conn::Connection;
use crate::tls::{ClientCertificate, OverTls, Secure};

/// The connection bounds (`http.maxConnections`, `http.maxConnectionsPerAddress`,
/// `http.headersTimeout`, `http.keepAliveTimeout`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once across both ports.
    pub total: usize,
    /// Connections open at once from one address.
    pub per_address: usize,
    /// Connections loopback clients may open beyond `total`.
    pub reserve: usize,
    /// How long a request's headers may take to arrive, and how long a connection
    /// may sit idle waiting for its next request.
    pub header_timeout: Duration,
}

impl ConnectionLimits {
    /// The cap a file-descriptor limit of `nofile` allows: every connection is a
    /// descriptor, and the databases, logs and the reserve need some of their own.
    pub fn total_for(nofile: u64) -> usize {
        usize::try_from(nofile.saturating_sub(256).max(64)).unwrap_or(usize::MAX)
    }
}

/// How long a stopping server waits for a request still in flight on a connection
/// (a response its client has stopped reading) before dropping the connection.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// Counts open connections, overall and per address; shared by both ports.
pub struct Gate {
    limits: ConnectionLimits,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// One admitted connection; dropping it frees its place.
pub struct Ticket {
    gate: Arc<Gate>,
    peer: IpAddr,
}

/// A connection's place (its [`Ticket`]) and its part in the shutdown's wait, shared
/// by the connection and what outlives its HTTP exchange: every request carries one,
/// so an upgraded WebSocket keeps its connection counted (against the limits, and
/// by a shutdown waiting for connections to close) until the socket ends.
#[derive(Clone)]
pub struct ConnectionGuard(#[allow(dead_code)] Arc<(Ticket, mpsc::Sender<()>)>);

impl Gate {
    /// A gate enforcing `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self { limits, open: Mutex::new((0, HashMap::new())) })
    }

    /// A place for a connection from `peer`, if the bounds leave one.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let mut open = self.open.lock();
        let cap = self.limits.total + if peer.is_loopback() { self.limits.reserve } else { 0 };
        let from_peer = open.1.get(&peer).copied().unwrap_or(0);
        if open.0 >= cap || from_peer >= self.limits.per_address {
            return None;
        }
        open.0 += 1;
        *open.1.entry(peer).or_default() += 1;
        Some(Ticket { gate: self.clone(), peer })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(count) = open.1.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.1.remove(&self.peer);
            }
        }
    }
}

/// What a port serves: a tower service from requests to responses (the Operations
/// API's router, the REST service), cloned for every request.
pub trait Service:
    tower::Service<axum::extract::Request, Response = hyper::Response<Self::Body>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + Sync
    + 'static
{
    /// The responses' body.
    type Body: hyper::body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> Service for S
where
    S: tower::Service<axum::extract::Request, Response = hyper::Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    B: hyper::body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static,
{
    type Body = B;
}

/// Any error a body may end with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves `router` on `listener` (over TLS when `tls` is given) until `stop` turns
/// true, then waits for the open connections' requests to finish.
pub async fn serve<R: Service>(
    listener: TcpListener,
    router: R,
    gate: Arc<Gate>,
    tls: Option<Secure>,
    mut stop: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No per-request header timer for HTTP/1: a connection whose headers never
    // finish has no request in flight, so the idle deadline below closes it, and a
    // timer armed and cancelled around every request cost each one a timer-wheel
    // entry and an allocation.
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(gate.limits.header_timeout)
        .keep_alive_timeout(gate.limits.header_timeout);
    let builder = Arc::new(builder);
    // Every connection holds a sender: once all are dropped, every connection is done.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let connection_stop = stop.clone();
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    tokio::pin!(stopped);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, most likely: let some close first.
                    tracing::debug!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        let Some(ticket) = gate.admit(peer.ip()) else {
            tracing::debug!(%peer, "connection refused: over the connection limit");
            drop(stream);
            continue;
        };
        let served = Served {
            router: router.clone(),
            builder: builder.clone(),
            stop: connection_stop.clone(),
            idle: gate.limits.header_timeout,
            peer,
            guard: ConnectionGuard(Arc::new((ticket, open.clone()))),
        };
        let (first_byte, tls) = (gate.limits.header_timeout, tls.clone());
        tokio::spawn(async move {
            // hyper's header deadline starts once it reads, and telling HTTP/1 from
            // HTTP/2 (or a TLS handshake) waits for the first bytes without one: a
            // connection that sends nothing is closed here.
            if tokio::time::timeout(first_byte, stream.peek(&mut [0u8; 1])).await.is_err() {
                return;
            }
            let Some(secure) = tls else {
                let mut io = Connection::new(stream);
                io.disable_nagle();
                return served.run(io, false, None).await;
            };
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(error = %err, "could not set TCP_NODELAY");
            }
            let Ok(Ok(secured)) = tokio::time::timeout(first_byte, secure.acceptor.accept(stream)).await else {
                tracing::debug!(%peer, "TLS handshake failed or took too long");
                return;
            };
            let client = secure.login.user(secured.get_ref().1.peer_certificates().and_then(|c| c.first()));
            served.run(Connection::new(secured), true, client).await;
        });
    }
    drop(listener);
    drop(open);
    let _ = all_closed.recv().await;
}

/// What serving one connection needs.
struct Served<R> {
    router: R,
    builder: Arc<auto::Builder<TokioExecutor>>,
    /// Turns true when the server shuts down.
    stop: watch::Receiver<bool>,
    /// How long the connection may go without a request in flight.
    idle: Duration,
    peer: SocketAddr,
    /// Held while the connection (or a socket upgraded from it) is open: its place
    /// under the limits, and [`serve`]'s wait for open connections.
    guard: ConnectionGuard,
}

/// Gives an HTTP/2 request the `Host` header HTTP/1.1 requests carry: over h2 the
/// host travels as the `:authority` pseudo-header (hyper puts it in the URI), and
/// what reads the host (the session cookie's name, redirects) reads the header.
fn host_from_authority<B>(request: &mut hyper::Request<B>) {
    if request.headers().contains_key(hyper::header::HOST) {
        return;
    }
    let host = request.uri().authority().and_then(|a| hyper::header::HeaderValue::from_str(a.as_str()).ok());
    if let Some(host) = host {
        request.headers_mut().insert(hyper::header::HOST, host);
    }
}

impl<R: Service> Served<R> {
    /// Serves HTTP on `io`; every request carries the peer's address, whether it came
    /// over TLS, and the client certificate's user, if any.
    async fn run<S>(self, io: Connection<S>, secure: bool, client: Option<ClientCertificate>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Served { router, builder, mut stop, idle, peer, guard } = self;
        let activity = Arc::new(Activity::new());
        let requests = activity.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            request.extensions_mut().insert(guard.clone());
            if secure {
                request.extensions_mut().insert(OverTls);
            }
            if let Some(client) = &client {
                request.extensions_mut().insert(client.clone());
            }
            host_from_authority(&mut request);
            let in_flight = InFlight::start(&requests);
            let response = router.clone().oneshot(request.map(axum::body::Body::new));
            async move {
                let response = response.await?;
                // The request stays in flight until its response body is sent (or dropped).
                Ok::<_, Infallible>(response.map(|body| TrackedBody { body, _in_flight: in_flight }))
            }
        });
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(connection);
        let mut closing = false;
        // Once shut down (idle, or the server stopping), when the connection is
        // dropped if it has not ended and no request is in flight: a graceful
        // shutdown waits for a request whose headers are still arriving, and one that
        // never finishes them must hold neither the connection nor the server's exit.
        let mut cut_off: Option<Instant> = None;
        // When the server began stopping: past SHUTDOWN_LIMIT even a request in
        // flight (a stream whose client stopped reading) no longer holds the exit.
        let mut stopping_since: Option<Instant> = None;
        loop {
            let wake = activity.idle_deadline(idle);
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(err) = ended {
                        tracing::debug!(error = %err, %peer, "connection ended with an error");
                    }
                    return;
                }
                _ = stop.wait_for(|stop| *stop), if stopping_since.is_none() => {
                    if !closing {
                        connection.as_mut().graceful_shutdown();
                    }
                    closing = true;
                    stopping_since = Some(Instant::now());
                    cut_off = Some(Instant::now() + idle);
                }
                () = tokio::time::sleep_until(wake), if !closing => {
                    if activity.idle_for(idle) {
                        tracing::debug!(%peer, "closing a connection idle for {} ms", idle.as_millis());
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                        cut_off = Some(Instant::now() + idle);
                    }
                }
                () = tokio::time::sleep_until(cut_off.unwrap_or(wake)), if cut_off.is_some() => {
                    // A request that started meanwhile finishes first, unless the
                    // server has been stopping for too long.
                    if activity.busy() && stopping_since.is_none_or(|since| since.elapsed() < SHUTDOWN_LIMIT) {
                        cut_off = Some(Instant::now() + idle);
                        continue;
                    }
                    tracing::debug!(%peer, "dropping a connection whose request headers never finished");
                    return;
                }
            }
        }
    }
}

/// The requests in flight on one connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last_end: Mutex<Instant>,
}

impl Activity {
    fn new() -> Activity {
        Activity { in_flight: AtomicUsize::new(0), last_end: Mutex::new(Instant::now()) }
    }

    /// When the connection will have been idle for `idle` if nothing starts: with a
    /// request in flight, look again after `idle`.
    fn idle_deadline(&self, idle: Duration) -> Instant {
        match self.in_flight.load(Ordering::Acquire) {
            0 => *self.last_end.lock() + idle,
            _ => Instant::now() + idle,
        }
    }

    /// Whether a request is in flight.
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Whether no request has been in flight for `idle`.
    fn idle_for(&self, idle: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && self.last_end.lock().elapsed() >= idle
    }
}

/// One request in flight; ends when dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_end.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request in flight until it is sent or dropped.
    struct TrackedBody<B> {
        #[pin]
        body: B,
        _in_flight: InFlight,
    }
}

impl<B: hyper::body::Body> hyper::body::Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_bounds_addresses_and_the_total_with_a_loopback_reserve() {
        let gate = Gate::new(ConnectionLimits {
            total: 3,
            per_address: 2,
            reserve: 1,
            header_timeout: Duration::from_secs(1),
        });
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap());
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert!(gate.admit(a).is_none(), "per address");
        let _b1 = gate.admit(b).unwrap();
        assert!(gate.admit(b).is_none(), "the total");
        let c1 = gate.admit(c).expect("the loopback reserve");
        assert!(gate.admit(c).is_none(), "the reserve is bounded too");
        drop((a1, c1));
        assert!(gate.admit(b).is_some(), "a closed connection frees its place");
    }

    #[test]
    fn an_http2_request_gets_its_authority_as_host_and_a_host_header_is_kept() {
        let mut h2 = hyper::Request::get("https://db.example:9925/console/data/x").body(()).unwrap();
        host_from_authority(&mut h2);
        assert_eq!(h2.headers()[hyper::header::HOST], "db.example:9925");
        let mut h1 = hyper::Request::get("/x").header(hyper::header::HOST, "other:1").body(()).unwrap();
        host_from_authority(&mut h1);
        assert_eq!(h1.headers()[hyper::header::HOST], "other:1");
        let mut bare = hyper::Request::get("/x").body(()).unwrap();
        host_from_authority(&mut bare);
        assert!(!bare.headers().contains_key(hyper::header::HOST));
    }
}
