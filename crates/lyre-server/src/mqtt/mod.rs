//! The MQTT broker (3.1.1 and 5): on its own port (1883), and over WebSocket on
//! the REST port with the subprotocol `mqtt`.
//!
//! * `wire.rs`: packets on the wire (the `mqtt5-protocol` codec; the size limit).
//! * `connection.rs`: one client connection: CONNECT, the QoS flows, keep-alive,
//!   flow control, topic aliases, what is sent and acknowledged.
//! * `session.rs`: what a client id's session keeps across connections.
//! * `router.rs`: plain topics: subscriptions by topic level, retained messages.
//! * `records.rs`: topics bound to records of exported tables, through the change
//!   feed (a retained publish is a write, a subscription follows the feed).
//! * `shared.rs`: shared subscriptions to records (one set of feeds per group).
//! * `store.rs`: durable sessions and retained messages across restarts.
//! * `topic.rs`: topic names and filters.
//! * `message.rs`: a message, and its delivery to one session.
//!
//! This module holds the broker: the sessions by client id (with a new connection
//! taking over a live one), publishing, wills, and session expiry.

mod connection;
mod message;
mod records;
mod router;
mod session;
mod shared;
mod store;
mod topic;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lyre_core::Context;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedMutexGuard, oneshot, watch};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::tls::Secure;
use connection::serve_connection;
use message::{Delivery, Message};
use router::Router;
use session::Session;
use store::Store;

/// Bounds the broker holds clients to, and offers them.
#[derive(Debug, Clone, Copy)]
pub struct BrokerOptions {
    /// Largest packet accepted (announced to MQTT 5 clients).
    pub max_packet: usize,
    /// Most QoS 1 and 2 publishes a client may have unacknowledged at once.
    pub receive_maximum: u16,
    /// Most topic aliases a client may set.
    pub topic_alias_maximum: u16,
    /// Most messages queued for one session (more are dropped and counted).
    pub mailbox: usize,
    /// About the most bytes of messages queued for one session.
    pub mailbox_bytes: usize,
    /// Most QoS 1 and 2 messages sent to one client and not yet acknowledged,
    /// whatever receive maximum it announces (3.1.1 clients announce none).
    pub send_maximum: u16,
    /// How long a connection may take to send its CONNECT.
    pub connect_timeout: Duration,
    /// The longest keep-alive an MQTT 5 client may ask for (one asking for none
    /// or more is told this, as the server keep-alive), seconds.
    pub max_keep_alive: u16,
}

impl BrokerOptions {
    /// What one session's mailbox holds at most.
    fn mailbox_limit(&self) -> session::MailboxLimit {
        session::MailboxLimit { messages: self.mailbox, bytes: self.mailbox_bytes }
    }
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            max_packet: 1 << 20,
            receive_maximum: 1_024,
            topic_alias_maximum: 64,
            mailbox: 100_000,
            mailbox_bytes: 16 << 20,
            send_maximum: 1_024,
            connect_timeout: Duration::from_secs(10),
            max_keep_alive: 3_600,
        }
    }
}

/// What resolves once a publish is taken (or refused).
pub(crate) type Accepted = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Refusal>> + Send>>;

/// Why a publish was not taken.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// The MQTT 5 reason code.
    pub(crate) reason: mqtt5_protocol::ReasonCode,
    /// What went wrong, for the reason string and the log.
    pub(crate) text: String,
}

impl From<ApiError> for Refusal {
    fn from(err: ApiError) -> Self {
        use mqtt5_protocol::ReasonCode;
        let reason = match err.code() {
            lyre_core::Code::Forbidden | lyre_core::Code::MustLogin | lyre_core::Code::LoginFailed => {
                ReasonCode::NotAuthorized
            }
            lyre_core::Code::BadRequest => ReasonCode::PayloadFormatInvalid,
            lyre_core::Code::NotFound => ReasonCode::TopicNameInvalid,
            // 0x89 is no PUBACK code; quota exceeded is the one that says "later".
            lyre_core::Code::Overloaded | lyre_core::Code::TooManyRequests => ReasonCode::QuotaExceeded,
            _ => ReasonCode::UnspecifiedError,
        };
        Refusal { reason, text: err.message().to_string() }
    }
}

/// One client id's place in the broker.
pub(crate) struct Slot {
    /// The session, held by the connection using it (a second connection with
    /// the id waits for it after telling the first to go).
    session: Arc<tokio::sync::Mutex<Option<Session>>>,
    /// Tells the connection holding the session that another takes over.
    kick: Mutex<Option<oneshot::Sender<()>>>,
    /// Counts the connections made with the id: a will or expiry decided for one
    /// does not act once another has connected.
    generation: AtomicU64,
    /// When the session, no longer connected, expires (`None` while connected, or
    /// never).
    expires_at: Mutex<Option<Instant>>,
    /// A will waiting out its delay, cancelled when the client connects again.
    will: Mutex<Option<tokio::task::AbortHandle>>,
    /// The user whose session it is: another user may not take it over.
    owner: Mutex<Option<String>>,
}

/// The broker.
pub struct Broker {
    state: Arc<AppState>,
    router: Router,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
    store: Store,
    options: BrokerOptions,
    /// Connections open now.
    connections: AtomicU64,
    /// The next place in the stored queue of messages for sessions away.
    queue_seq: AtomicU64,
    /// Shared subscriptions to records.
    shared: shared::SharedRecords,
}

impl Broker {
    /// The broker, with the sessions and retained messages kept by the last run.
    pub async fn open(state: Arc<AppState>, options: BrokerOptions) -> lyre_core::Result<Arc<Broker>> {
        let store = Store::open(&state.engine).await?;
        let broker = Arc::new(Broker {
            state,
            router: Router::default(),
            slots: Mutex::new(HashMap::new()),
            store,
            options,
            connections: AtomicU64::new(0),
            queue_seq: AtomicU64::new(0),
            shared: shared::SharedRecords::default(),
        });
        for message in broker.store.retained()? {
            broker.router.retain(Arc::new(message));
        }
        let queued = broker.store.queued()?;
        let next = queued.last().map_or(0, |q| q.seq + 1).max(lyre_core::now_ms() as u64 * 1_000);
        broker.queue_seq.store(next, Ordering::Relaxed);
        let mut queued_by_client: HashMap<String, Vec<(u64, Delivery)>> = HashMap::new();
        for entry in queued {
            queued_by_client.entry(entry.client).or_default().push((entry.seq, entry.delivery));
        }
        for loaded in broker.store.sessions()? {
            let client: Arc<str> = Arc::from(loaded.client_id.as_str());
            let session = Session::restore(client.clone(), &loaded.stored, options.mailbox_limit());
            session.mailbox.park_and_hold(|_| 0);
            for (_, delivery) in queued_by_client.remove(&loaded.client_id).unwrap_or_default() {
                // Stored already: queued without storing again.
                if session.mailbox.push(delivery) == session::Pushed::Store {
                    session.mailbox.stored();
                }
            }
            for sub in session.subscriptions.values() {
                broker.router.subscribe(&client, &session.mailbox, &sub.filter, sub.options);
            }
            let owner = session.owner.clone();
            let slot = Slot::new(Some(session));
            *slot.expires_at.lock() = loaded.expires_at;
            *slot.owner.lock() = Some(owner);
            broker.slots.lock().insert(client, slot);
        }
        // Rows of sessions that ended (a crash between removing a session and its
        // queue) go.
        let orphans: Vec<u64> = queued_by_client.into_values().flatten().map(|(seq, _)| seq).collect();
        broker.store.forget_queued(orphans).await?;
        Ok(broker)
    }

    /// Connections open now.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Publishes `message` as `ctx`'s user and waits until it is taken.
    pub(crate) async fn publish(&self, ctx: &Context, message: Message) -> Result<(), Refusal> {
        self.publish_queued(ctx, message).await.await
    }

    /// Publishes `message` as `ctx`'s user: a record topic is written through its
    /// table (its subscribers hear of it from the change feed); a plain one is
    /// routed, and kept first when retained. Answers once the publish is under
    /// way, with what resolves when it is taken (a message to a record: once
    /// committed), so a connection's publishes are pipelined in order.
    pub(crate) async fn publish_queued(&self, ctx: &Context, message: Message) -> Accepted {
        match self.start_publish(ctx, message).await {
            Ok(accepted) => accepted,
            Err(refusal) => Box::pin(std::future::ready(Err(refusal))),
        }
    }

    async fn start_publish(&self, ctx: &Context, message: Message) -> Result<Accepted, Refusal> {
        if let Some(target) = records::record_topic(&self.state, &message.topic)? {
            let committed = records::publish(&self.state, ctx, target, &message.payload, message.retain).await?;
            return Ok(Box::pin(async move { Ok(committed.await?) }));
        }
        let message = Arc::new(message);
        if message.retain {
            self.store.save_retained(&message).await.map_err(ApiError::from)?;
            self.router.retain(message.clone());
        }
        // What sessions away are sent is stored before the publish is taken.
        let parked = self.router.route(&message);
        self.store_parked(parked).await.map_err(ApiError::from)?;
        Ok(Box::pin(std::future::ready(Ok(()))))
    }

    /// Stores what sessions away were just sent, then tells their mailboxes.
    async fn store_parked(&self, parked: Vec<router::Parked>) -> lyre_core::Result<()> {
        if parked.is_empty() {
            return Ok(());
        }
        let entries: Vec<(Arc<str>, Delivery)> =
            parked.iter().map(|p| (p.client.clone(), p.delivery.clone())).collect();
        let stored = self.keep_queued(&entries).await;
        for p in &parked {
            p.mailbox.stored();
        }
        stored
    }

    /// Reserves `n` consecutive places in the stored queue; answers the first.
    fn reserve_seqs(&self, n: usize) -> u64 {
        self.queue_seq.fetch_add(n as u64, Ordering::Relaxed)
    }

    /// Stores deliveries to sessions that are not connected, so they survive a
    /// restart.
    async fn keep_queued(&self, deliveries: &[(Arc<str>, Delivery)]) -> lyre_core::Result<()> {
        let first = self.reserve_seqs(deliveries.len());
        self.keep_queued_from(first, deliveries).await
    }

    /// [`Broker::keep_queued`] at places reserved from `first` on.
    async fn keep_queued_from(&self, first: u64, deliveries: &[(Arc<str>, Delivery)]) -> lyre_core::Result<()> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let entries: Vec<(u64, &str, &Delivery)> = deliveries
            .iter()
            .enumerate()
            .map(|(i, (client, delivery))| (first + i as u64, &**client, delivery))
            .collect();
        self.store.queue(&entries).await
    }

    /// Takes the session slot of `client` for `user`, telling a connection that
    /// holds it to go, and waits (up to 15 s) until it has. A session of another
    /// user is refused, before anything about it changes.
    async fn attach(
        &self,
        client: &Arc<str>,
        user: &str,
    ) -> Result<(Arc<Slot>, OwnedMutexGuard<Option<Session>>, oneshot::Receiver<()>), Refusal> {
        let slot = self.slots.lock().entry(client.clone()).or_insert_with(|| Slot::new(None)).clone();
        if slot.owner.lock().as_deref().is_some_and(|owner| owner != user) {
            return Err(Refusal {
                reason: mqtt5_protocol::ReasonCode::NotAuthorized,
                text: format!("client id '{client}' is another user's session"),
            });
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        let guard = loop {
            if let Some(kick) = slot.kick.lock().take() {
                let _ = kick.send(());
            }
            match tokio::time::timeout(Duration::from_millis(100), slot.session.clone().lock_owned()).await {
                Ok(guard) => break guard,
                Err(_) if Instant::now() < deadline => continue,
                Err(_) => {
                    return Err(Refusal {
                        reason: mqtt5_protocol::ReasonCode::ServerBusy,
                        text: "the session is held by a connection that does not let go".into(),
                    });
                }
            }
        };
        let (kick, kicked) = oneshot::channel();
        *slot.kick.lock() = Some(kick);
        slot.generation.fetch_add(1, Ordering::SeqCst);
        *slot.expires_at.lock() = None;
        *slot.owner.lock() = Some(user.to_string());
        if let Some(will) = slot.will.lock().take() {
            will.abort();
        }
        Ok((slot, guard, kicked))
    }

    /// Ends `session`: its subscriptions leave the router and its stored copy goes.
    async fn end_session(&self, session: Session) {
        for sub in session.subscriptions.values() {
            self.router.unsubscribe(&session.client_id, &sub.filter);
            if let Some(group) = &sub.filter.group {
                let key = (group.clone(), sub.filter.filter.clone(), session.owner.clone());
                self.shared.leave(&key, &session.client_id);
            }
        }
        let removed = match self.store.remove_session(&session.client_id).await {
            Ok(()) => self.store.clear_queue(&session.client_id).await,
            Err(err) => Err(err),
        };
        if let Err(err) = removed {
            tracing::warn!(client = %session.client_id, error = %err, "a finished MQTT session could not be removed from storage");
        }
    }

    /// Forgets `slot` of `client` when nobody else holds it.
    fn release_slot(&self, client: &Arc<str>, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock();
        // The map's reference and the caller's: no connection is waiting for it.
        if Arc::strong_count(slot) == 2 && slots.get(client).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            slots.remove(client);
        }
    }

    /// Publishes a will, its expiry counted from now.
    async fn publish_will(&self, ctx: &Context, mut will: Message, expiry: Option<Duration>) {
        will.expires_at = expiry.map(|after| Instant::now() + after);
        let topic = will.topic.clone();
        if let Err(refusal) = self.publish(ctx, will).await {
            tracing::warn!(topic = %topic, reason = %refusal.text, "a will message could not be published");
        }
    }

    /// Publishes the will of the connection numbered `generation` of `slot` after
    /// `delay`; the client connecting again meanwhile cancels it.
    fn schedule_will(
        self: &Arc<Self>,
        ctx: Context,
        slot: &Arc<Slot>,
        generation: u64,
        will: Message,
        expiry: Option<Duration>,
        delay: Duration,
    ) {
        let (broker, watched) = (self.clone(), Arc::downgrade(slot));
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let current = watched.upgrade().map(|slot| slot.generation.load(Ordering::SeqCst));
            if current == Some(generation) {
                broker.publish_will(&ctx, will, expiry).await;
            }
        });
        if let Some(earlier) = slot.will.lock().replace(task.abort_handle()) {
            earlier.abort();
        }
    }

    /// Ends the sessions whose expiry interval has passed since they disconnected.
    pub async fn expire_sessions(&self) {
        let now = Instant::now();
        let due: Vec<(Arc<str>, Arc<Slot>)> = self
            .slots
            .lock()
            .iter()
            .filter(|(_, slot)| slot.expires_at.lock().is_some_and(|at| at <= now))
            .map(|(client, slot)| (client.clone(), slot.clone()))
            .collect();
        for (client, slot) in due {
            let Ok(mut guard) = slot.session.clone().try_lock_owned() else { continue };
            if !slot.expires_at.lock().is_some_and(|at| at <= now) {
                continue; // it connected meanwhile
            }
            if let Some(session) = guard.take() {
                self.end_session(session).await;
            }
            drop(guard);
            self.release_slot(&client, &slot);
        }
    }
}

impl crate::app::MqttService for Broker {
    fn serve(
        self: Arc<Self>,
        stream: tokio::io::DuplexStream,
        peer: SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let stopping = self.state.stopping.clone();
        Box::pin(serve_connection(self, stream, peer, None, stopping))
    }
}

impl Slot {
    fn new(session: Option<Session>) -> Arc<Slot> {
        Arc::new(Slot {
            session: Arc::new(tokio::sync::Mutex::new(session)),
            kick: Mutex::new(None),
            generation: AtomicU64::new(0),
            expires_at: Mutex::new(None),
            will: Mutex::new(None),
            owner: Mutex::new(None),
        })
    }
}

/// Accepts MQTT connections on `listener` (over TLS when `tls` is given) until
/// the server stops; each is served on its own task. Past `max_connections` open
/// at once, a new connection is closed at once.
pub async fn serve(
    broker: Arc<Broker>,
    listener: TcpListener,
    tls: Option<Secure>,
    max_connections: u64,
    stopping: watch::Receiver<bool>,
) {
    let mut stop = stopping.clone();
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, most likely: wait rather than spin.
                    tracing::warn!(error = %err, "accepting an MQTT connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => return,
        };
        if broker.connections() >= max_connections {
            tracing::warn!(%peer, limit = max_connections, "an MQTT connection was refused: too many are open");
            continue;
        }
        let _ = socket.set_nodelay(true);
        let (broker, stopping, tls) = (broker.clone(), stopping.clone(), tls.clone());
        tokio::spawn(async move {
            let Some(secure) = tls else {
                return serve_connection(broker, socket, peer, None, stopping).await;
            };
            let handshake = secure.acceptor.accept(socket);
            let Ok(Ok(secured)) = tokio::time::timeout(broker.options.connect_timeout, handshake).await else {
                tracing::debug!(%peer, "an MQTT TLS handshake failed or took too long");
                return;
            };
            let certificate = secure.login.user(secured.get_ref().1.peer_certificates().and_then(|c| c.first()));
            serve_connection(broker, secured, peer, certificate.map(|c| c.0), stopping).await;
        });
    }
}

/// Waits until the server starts shutting down.
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// Serves an MQTT connection over any byte stream (TCP, TLS, a WebSocket's
/// binary frames).
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// The address a connection came from, for logs and `authorizeLocal`.
pub(crate) type Peer = SocketAddr;
