//! One client connection: CONNECT (authentication, the session taken or made),
//! then packets in and deliveries out until the connection ends, then the will
//! and the session's fate (kept for its expiry interval, or ended).
//!
//! Flow control: no more QoS 1 and 2 deliveries are in flight than the client's
//! receive maximum; a client that exceeds the broker's is disconnected. What
//! waits meanwhile stays bounded: the session's mailbox for plain topics, and for
//! record subscriptions a small channel behind which the change feed falls back
//! to reading the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesOrdered;
use lyre_core::services::{FeedEnd, Start};
use lyre_core::{Code, Context};
use mqtt5_protocol::packet::connack::ConnAckPacket;
use mqtt5_protocol::packet::connect::ConnectPacket;
use mqtt5_protocol::packet::disconnect::DisconnectPacket;
use mqtt5_protocol::packet::puback::PubAckPacket;
use mqtt5_protocol::packet::pubcomp::PubCompPacket;
use mqtt5_protocol::packet::publish::PublishPacket;
use mqtt5_protocol::packet::pubrec::PubRecPacket;
use mqtt5_protocol::packet::pubrel::PubRelPacket;
use mqtt5_protocol::packet::suback::{SubAckPacket, SubAckReasonCode};
use mqtt5_protocol::packet::subscribe::{RetainHandling, SubscribePacket, TopicFilter};
use mqtt5_protocol::packet::unsuback::{UnsubAckPacket, UnsubAckReasonCode};
use mqtt5_protocol::packet::unsubscribe::UnsubscribePacket;
use mqtt5_protocol::{Packet, Properties, PropertyId, QoS, ReasonCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::message::{Delivery, Message, Origin, min_qos};
use super::records::{self, FeedItem};
use super::session::SubOptions;
use super::session::{Inflight, RecordCursor, Session, SessionSub};
use super::topic::{Filter, check_name};
use super::wire::{self, V5, WireError};
use super::{Broker, Peer, Slot, Stream, stopped};
use crate::app::Credentials;

/// Record-subscription deliveries waiting for a connection, at most.
const FEED_CHANNEL: usize = 64;
/// Deliveries taken from the mailbox in one turn, so reading is not starved.
const TURN: usize = 256;
/// How often a durable session's acknowledged positions are stored while connected.
const SAVE_EVERY: Duration = Duration::from_secs(5);
/// How long a write to a client that does not read may take before it is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// A read buffer larger than this is let go once empty (idle connections stay small).
const KEEP_BUFFER: usize = 4 << 10;
/// Publishes from one client under way at once; reading waits past it.
const MAX_PENDING: usize = 1_024;
/// About the most bytes of payloads of one client's publishes under way.
const MAX_PENDING_BYTES: usize = 8 << 20;
/// How long a closing connection may take to write its last bytes.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// Session expiry of an MQTT 3.1.1 session that is not clean: never.
const NEVER: u32 = u32::MAX;

/// Why a connection ended.
#[derive(Debug)]
enum End {
    /// The client sent DISCONNECT; `will` when it asked for its will (0x04).
    Disconnected { will: bool },
    /// The network connection closed without DISCONNECT.
    Closed,
    /// The broker closes it, telling an MQTT 5 client why.
    Refused(ReasonCode, String),
    /// Another connection took the session over.
    TakenOver,
    /// The server is stopping.
    Stopping,
}

impl End {
    fn protocol(text: impl Into<String>) -> End {
        End::Refused(ReasonCode::ProtocolError, text.into())
    }
}

/// A connection's last will, published when it ends other than by DISCONNECT.
struct Will {
    /// The message (its expiry set when it is published).
    message: Message,
    /// The will delay interval.
    delay: Duration,
    /// The message expiry interval, counted from publication.
    expiry: Option<Duration>,
}

/// What a CONNECT presents to say who the client is: a user name and password
/// (a password shaped like a JWT, three dot-separated parts starting `eyJ`, is an
/// operation token, whatever the user name), else the verified client
/// certificate's user.
fn credentials(connect: &ConnectPacket, certificate: Option<String>) -> Credentials {
    let password = match connect.password.clone().map(String::from_utf8) {
        None => None,
        Some(Ok(password)) => Some(password),
        Some(Err(_)) => return Credentials::Malformed,
    };
    match (connect.username.clone(), password) {
        (_, Some(token)) if token.starts_with("eyJ") && token.split('.').count() == 3 => Credentials::Token(token),
        (Some(username), password) => Credentials::Password { username, password: password.unwrap_or_default() },
        (None, Some(_)) => Credentials::Malformed,
        (None, None) => certificate.map_or(Credentials::None, Credentials::Certificate),
    }
}

/// Counts a connection while it is open.
struct Counted(Arc<Broker>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serves one MQTT connection to its end.
pub(crate) async fn serve_connection<S: Stream>(
    broker: Arc<Broker>,
    io: S,
    peer: Peer,
    certificate: Option<String>,
    stopping: watch::Receiver<bool>,
) {
    broker.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let _counted = Counted(broker.clone());
    let (reader, writer) = tokio::io::split(io);
    let mut io = Io { reader, writer, inbuf: BytesMut::new(), out: BytesMut::new(), version: 0 };
    let limit = broker.options.max_packet;
    let connect = match tokio::time::timeout(broker.options.connect_timeout, io.read_packet(limit)).await {
        Ok(Ok(Some(Packet::Connect(connect)))) => connect,
        Ok(Err(WireError::Version(level))) => {
            // Said in the client's own version where it has one.
            let refusal = match level {
                V5 => ConnAckPacket::new(false, ReasonCode::UnsupportedProtocolVersion),
                _ => ConnAckPacket::new_v311(false, ReasonCode::UnsupportedProtocolVersion),
            };
            wire::put(&refusal, &mut io.out);
            let _ = io.flush().await;
            return;
        }
        Ok(Err(err)) => {
            tracing::debug!(%peer, error = %err, "an MQTT connection sent no valid CONNECT");
            return;
        }
        _ => return,
    };
    io.version = connect.protocol_version;
    // The rarely taken steps are boxed: an idle connection's task holds only the
    // state of its loop.
    let Some(mut conn) = Box::pin(Conn::accept(broker.clone(), io, *connect, peer, certificate)).await else {
        return;
    };
    let end = conn.run(stopping).await;
    Box::pin(conn.finish(end)).await;
}

/// The byte stream and its buffers.
struct Io<S> {
    reader: ReadHalf<S>,
    writer: WriteHalf<S>,
    inbuf: BytesMut,
    out: BytesMut,
    version: u8,
}

impl<S: Stream> Io<S> {
    /// The next whole packet, `None` at the end of the stream.
    async fn read_packet(&mut self, limit: usize) -> Result<Option<Packet>, WireError> {
        loop {
            if let Some(packet) = wire::take_packet(&mut self.inbuf, self.version, limit)? {
                return Ok(Some(packet));
            }
            match self.reader.read_buf(&mut self.inbuf).await {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => {}
            }
        }
    }

    /// Writes what is buffered.
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let written = tokio::time::timeout(WRITE_TIMEOUT, async {
            self.writer.write_all(&self.out).await?;
            self.writer.flush().await
        })
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
        self.out.clear();
        if self.out.capacity() > KEEP_BUFFER {
            self.out = BytesMut::new();
        }
        written
    }
}

/// A connection after its CONNECT was accepted.
struct Conn<S> {
    broker: Arc<Broker>,
    io: Io<S>,
    peer: Peer,
    ctx: Context,
    client: Arc<str>,
    slot: Arc<Slot>,
    session: OwnedMutexGuard<Option<Session>>,
    kicked: oneshot::Receiver<()>,
    /// 1.5 × the keep-alive, or `None` for no limit.
    idle_limit: Option<Duration>,
    /// The client's receive maximum, packet size limit and topic alias maximum.
    client_receive_max: usize,
    client_max_packet: usize,
    client_alias_max: u16,
    /// Whether the client takes reason strings on acknowledgements.
    problem_info: bool,
    aliases_in: HashMap<u16, Arc<str>>,
    aliases_out: HashMap<Arc<str>, u16>,
    /// The forwarders of each record subscription, by filter as subscribed.
    feeds: HashMap<String, Vec<Forwarder>>,
    /// Where record subscriptions' forwarders send (made with the first one).
    feed: Option<(mpsc::Sender<FeedItem>, mpsc::Receiver<FeedItem>)>,
    /// Publishes under way, acknowledged in the order they came.
    pending: FuturesOrdered<PendingPublish>,
    /// Of which QoS 1 ones (QoS 2 ones are in the session's `incoming_qos2`).
    pending_qos1: usize,
    /// About the bytes of their payloads.
    pending_bytes: Arc<std::sync::atomic::AtomicUsize>,
    will: Option<Will>,
    /// The session's stored copy is older than its acknowledgements.
    dirty: bool,
    /// The users' generation its user was read at (see [`Conn::check_user`]).
    security: u64,
}

/// A publish under way: its QoS, packet id and outcome once taken.
type PendingPublish =
    std::pin::Pin<Box<dyn std::future::Future<Output = (QoS, u16, Result<(), super::Refusal>)> + Send>>;

/// A record subscription's forwarder task, stopped when dropped.
struct Forwarder(JoinHandle<()>);

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: Stream> Conn<S> {
    /// Checks and authenticates `connect`, takes or makes the session, and answers
    /// CONNACK. `None` when the connection was refused (and told why).
    async fn accept(
        broker: Arc<Broker>,
        mut io: Io<S>,
        connect: ConnectPacket,
        peer: Peer,
        certificate: Option<String>,
    ) -> Option<Conn<S>> {
        let v5 = connect.protocol_version == V5;
        let refuse = |io: &mut Io<S>, reason: ReasonCode, text: String| {
            let packet = match v5 {
                true => ConnAckPacket::new(false, reason).with_reason_string(text),
                false => ConnAckPacket::new_v311(false, reason),
            };
            wire::put(&packet, &mut io.out);
        };
        if v5 && connect.properties.get_authentication_method().is_some() {
            refuse(&mut io, ReasonCode::BadAuthenticationMethod, "no authentication method is supported".into());
            let _ = io.flush().await;
            return None;
        }
        if v5
            && (connect.properties.get_receive_maximum() == Some(0)
                || connect.properties.get_maximum_packet_size() == Some(0))
        {
            // MQTT-3.1.2-? : a receive maximum or packet size of 0 is a protocol error.
            refuse(&mut io, ReasonCode::ProtocolError, "receive maximum and maximum packet size cannot be 0".into());
            let _ = io.flush().await;
            return None;
        }
        // A will whose topic is no topic name refuses the CONNECT before anything
        // about the session changes.
        if let Some(will) = &connect.will
            && let Err(err) = check_name(&will.topic)
        {
            refuse(&mut io, ReasonCode::TopicNameInvalid, format!("the will's topic: {err}"));
            let _ = io.flush().await;
            return None;
        }
        // Read before the user is: a change meanwhile makes the first publish or
        // subscribe look the user up again.
        let security = broker.state.engine.users().generation();
        let user = match broker.state.user(credentials(&connect, certificate), peer.ip()).await {
            Ok(user) => user,
            Err(err) => {
                let reason = match err {
                    crate::app::AuthError::MustLogin if !v5 => ReasonCode::NotAuthorized,
                    _ => ReasonCode::BadUsernameOrPassword,
                };
                tracing::info!(%peer, error = %err, "an MQTT login was refused");
                refuse(&mut io, reason, err.to_string());
                let _ = io.flush().await;
                return None;
            }
        };
        // The client id: an empty one is assigned one, where the session is clean
        // (3.1.1) or always (5).
        let assigned = connect.client_id.is_empty();
        if assigned && !v5 && !connect.clean_start {
            refuse(&mut io, ReasonCode::ClientIdentifierNotValid, String::new());
            let _ = io.flush().await;
            return None;
        }
        let client: Arc<str> = match assigned {
            true => Arc::from(format!("lyre-{}", uuid::Uuid::new_v4().simple())),
            false => Arc::from(connect.client_id.as_str()),
        };
        let (slot, mut session, kicked) = match broker.attach(&client, &user.username).await {
            Ok(attached) => attached,
            Err(refusal) => {
                refuse(&mut io, refusal.reason, refusal.text);
                let _ = io.flush().await;
                return None;
            }
        };
        let expiry = match v5 {
            true => connect.properties.get_session_expiry_interval().unwrap_or(0),
            false if connect.clean_start => 0,
            false => NEVER,
        };
        let present = session.is_some() && !connect.clean_start;
        if !present {
            if let Some(old) = session.take() {
                broker.end_session(old).await;
            }
            *session = Some(Session::new(client.clone(), &user.username, broker.options.mailbox_limit()));
        }
        if let Some(session) = session.as_mut() {
            session.expiry = expiry;
        }
        // Keep-alive: the client's, or the server's where the client asks for none
        // or more than the server allows (announced to MQTT 5 clients).
        let max_keep_alive = broker.options.max_keep_alive;
        let keep_alive = match v5 && (connect.keep_alive == 0 || connect.keep_alive > max_keep_alive) {
            true => max_keep_alive,
            false => connect.keep_alive,
        };
        let will = connect.will.as_ref().map(|will| {
            let mut properties = Properties::default();
            will.properties.apply_to_publish_properties(&mut properties);
            // Its expiry runs from when it is published, not from now.
            let expiry = will.properties.message_expiry_interval;
            let mut message = message(
                Arc::from(will.topic.as_str()),
                Bytes::from(will.payload.clone()),
                will.qos,
                will.retain,
                &properties,
                Some(client.clone()),
            );
            message.expires_at = None;
            Will {
                message,
                delay: Duration::from_secs(u64::from(will.properties.will_delay_interval.unwrap_or(0))),
                expiry: expiry.map(|s| Duration::from_secs(u64::from(s))),
            }
        });
        let mut conn = Conn {
            // Its writes are logged as its own, for its no-local subscriptions.
            ctx: Context::new(user).with_origin(records::origin_of(&client)),
            security,
            broker: broker.clone(),
            io,
            peer,
            client: client.clone(),
            slot,
            session,
            kicked,
            idle_limit: (keep_alive > 0).then(|| Duration::from_millis(u64::from(keep_alive) * 1500)),
            client_receive_max: usize::from(connect.properties.get_receive_maximum().unwrap_or(u16::MAX))
                .min(usize::from(broker.options.send_maximum)),
            client_max_packet: connect.properties.get_maximum_packet_size().map_or(usize::MAX, |n| n as usize),
            client_alias_max: connect.properties.get_topic_alias_maximum().unwrap_or(0),
            problem_info: connect.properties.get_request_problem_information().unwrap_or(true),
            aliases_in: HashMap::new(),
            aliases_out: HashMap::new(),
            feeds: HashMap::new(),
            feed: None,
            pending: FuturesOrdered::new(),
            pending_qos1: 0,
            pending_bytes: Arc::default(),
            will,
            dirty: false,
        };
        let options = broker.options;
        let ack = match v5 {
            false => ConnAckPacket::new_v311(present, ReasonCode::Success),
            true => {
                let mut ack = ConnAckPacket::new(present, ReasonCode::Success)
                    .with_receive_maximum(options.receive_maximum)
                    .with_maximum_packet_size(options.max_packet as u32)
                    .with_topic_alias_maximum(options.topic_alias_maximum)
                    .with_retain_available(true)
                    .with_wildcard_subscription_available(true)
                    .with_subscription_identifier_available(true)
                    .with_shared_subscription_available(true);
                if assigned {
                    ack = ack.with_assigned_client_id(client.to_string());
                }
                if keep_alive != connect.keep_alive {
                    ack = ack.with_server_keep_alive(keep_alive);
                }
                ack
            }
        };
        wire::put(&ack, &mut conn.io.out);
        // What waited for it is in its mailbox now (or, for a new session, was an
        // ended one's): the stored copy goes.
        conn.session().mailbox.unpark().await;
        if let Err(err) = broker.store.clear_queue(&client).await {
            tracing::warn!(client = %client, error = %err, "an MQTT session's stored queue could not be cleared");
        }
        if present {
            conn.resume().await;
        }
        tracing::debug!(client = %client, %peer, present, "MQTT client connected");
        Some(conn)
    }

    fn session(&mut self) -> &mut Session {
        // Set in `accept` and only taken in `finish`, which consumes the connection.
        let limit = self.broker.options.mailbox_limit();
        self.session.get_or_insert_with(|| Session::new(self.client.clone(), "", limit))
    }

    /// A resumed session: its record subscriptions follow their feeds again from
    /// where they stood, and what was in flight is sent again.
    async fn resume(&mut self) {
        let subs: Vec<(String, SessionSub)> =
            self.session().subscriptions.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (text, sub) in subs {
            if let Some(group) = &sub.filter.group {
                if let Err(reason) = self.join_shared(group, &sub.filter.filter, sub.options).await {
                    tracing::warn!(client = %self.client, filter = %text, reason = ?reason, "a shared record subscription could not resume");
                }
                continue;
            }
            match self.open_feeds(&sub.filter.filter, sub.options, Some(&sub.records), true).await {
                Ok((cursors, forwarders)) => {
                    if let Some(entry) = self.session().subscriptions.get_mut(&text) {
                        entry.records = cursors;
                    }
                    self.feeds.insert(text, forwarders);
                }
                Err(reason) => {
                    tracing::warn!(client = %self.client, filter = %text, reason = ?reason, "a record subscription could not resume");
                }
            }
        }
        let inflight = self.session().inflight.in_order();
        for (id, inflight) in inflight {
            match inflight {
                Inflight::Published(delivery) => {
                    self.put_publish(&delivery, Some(id), true);
                }
                Inflight::Released(_) => wire::put(&PubRelPacket::new(id), &mut self.io.out),
            }
        }
    }

    /// Serves packets and deliveries until the connection ends.
    async fn run(&mut self, mut stopping: watch::Receiver<bool>) -> End {
        let mailbox = self.session().mailbox.clone();
        let mut deadline = self.idle_limit.map(|limit| Instant::now() + limit);
        let mut save = tokio::time::interval(SAVE_EVERY);
        save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let more = self.deliver();
            // A client that does not read is still told when it is taken over.
            let flushed = tokio::select! {
                flushed = self.io.flush() => flushed,
                _ = &mut self.kicked => return End::TakenOver,
            };
            if let Err(err) = flushed {
                tracing::debug!(client = %self.client, error = %err, "writing to an MQTT client failed");
                return End::Closed;
            }
            let can_send = self.can_send();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = &mut self.kicked => return End::TakenOver,
                () = stopped(&mut stopping) => return End::Stopping,
                Some((qos, id, outcome)) = self.pending.next(), if !self.pending.is_empty() => {
                    self.acknowledge_publish(qos, id, outcome);
                }
                read = self.io.reader.read_buf(&mut self.io.inbuf), if self.may_read() => {
                    match read {
                        Ok(0) | Err(_) => return End::Closed,
                        Ok(_) => {}
                    }
                    deadline = self.idle_limit.map(|limit| Instant::now() + limit);
                    if let Err(end) = Box::pin(self.take_packets()).await {
                        return end;
                    }
                }
                Some(item) = next_fed(&mut self.feed), if can_send => {
                    if let Err(end) = self.take_fed(item) {
                        return end;
                    }
                }
                _ = mailbox.ready(), if can_send && !more => {}
                _ = std::future::ready(()), if can_send && more => {}
                _ = sleep => return End::Refused(ReasonCode::KeepAliveTimeout, "no packet within 1.5 times the keep-alive".into()),
                _ = save.tick() => Box::pin(self.save_if_dirty()).await,
            }
        }
    }

    /// After users or roles changed: the connection's user as it is now (its role
    /// decides the next publish or subscribe); the connection ends with 0x87 when
    /// the user was dropped or deactivated.
    fn check_user(&mut self) -> Result<(), End> {
        let users = self.broker.state.engine.users();
        let generation = users.generation();
        if generation == self.security {
            return Ok(());
        }
        self.security = generation;
        match users.current(&self.ctx.user) {
            Ok(user) => {
                self.ctx.user = user;
                Ok(())
            }
            Err(err) => {
                let reason = match err.code() {
                    Code::LoginFailed => ReasonCode::NotAuthorized,
                    _ => ReasonCode::UnspecifiedError,
                };
                Err(End::Refused(reason, format!("user '{}' may no longer connect: {err}", self.ctx.username())))
            }
        }
    }

    /// Whether to read more: not while too many publishes (or bytes of them)
    /// are under way, so one client cannot fill a database's writer queue.
    fn may_read(&self) -> bool {
        self.pending.len() < MAX_PENDING
            && self.pending_bytes.load(std::sync::atomic::Ordering::Relaxed) < MAX_PENDING_BYTES
    }

    fn can_send(&mut self) -> bool {
        let limit = self.client_receive_max;
        self.session().inflight.len() < limit
    }

    /// Sends `first` and the record deliveries ready behind it, a turn's worth,
    /// so that they go out in one write; `Err` when a record subscription ended.
    fn take_fed(&mut self, first: FeedItem) -> Result<(), End> {
        let mut item = first;
        for taken in 1..=TURN {
            match item {
                FeedItem::Delivery(delivery) => self.send(delivery),
                FeedItem::Ended(end) => {
                    let reason = match end {
                        FeedEnd::AccessRevoked(_) => ReasonCode::NotAuthorized,
                        _ => ReasonCode::UnspecifiedError,
                    };
                    return Err(End::Refused(reason, format!("a record subscription ended: {end}")));
                }
            }
            // Nothing is taken that this turn could not send.
            if taken == TURN || !self.can_send() {
                break;
            }
            let Some((_, receiver)) = &mut self.feed else { break };
            match receiver.try_recv() {
                Ok(next) => item = next,
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Sends what waits in the mailbox, a turn's worth; true when more waits.
    fn deliver(&mut self) -> bool {
        for _ in 0..TURN {
            if !self.can_send() {
                return false;
            }
            let Some(delivery) = self.session().mailbox.pop() else { return false };
            self.send(delivery);
        }
        true
    }

    /// Decodes and handles every whole packet read.
    async fn take_packets(&mut self) -> Result<(), End> {
        loop {
            let packet = match wire::take_packet(&mut self.io.inbuf, self.io.version, self.broker.options.max_packet) {
                Ok(Some(packet)) => packet,
                Ok(None) => break,
                Err(err) => return Err(End::Refused(err.reason(), err.to_string())),
            };
            self.handle(packet).await?;
        }
        if self.io.inbuf.is_empty() && self.io.inbuf.capacity() > KEEP_BUFFER {
            self.io.inbuf = BytesMut::new();
        }
        Ok(())
    }

    async fn handle(&mut self, packet: Packet) -> Result<(), End> {
        match packet {
            Packet::Publish(publish) => self.on_publish(publish).await,
            Packet::PubAck(ack) => {
                if let Some(Inflight::Published(delivery)) = self.session().inflight.get(ack.packet_id)
                    && delivery.qos == QoS::AtLeastOnce
                {
                    let delivery = delivery.clone();
                    self.session().inflight.remove(ack.packet_id);
                    self.acknowledged(&delivery);
                }
                Ok(())
            }
            Packet::PubRec(rec) => {
                let id = rec.packet_id;
                match self.session().inflight.get(id).cloned() {
                    Some(Inflight::Published(delivery)) if delivery.qos == QoS::ExactlyOnce => {
                        if u8::from(rec.reason_code) >= 0x80 {
                            // The client refused it: the exchange ends here.
                            self.session().inflight.remove(id);
                            self.acknowledged(&delivery);
                        } else {
                            self.session().inflight.insert(id, Inflight::Released(delivery));
                            wire::put(&PubRelPacket::new(id), &mut self.io.out);
                        }
                    }
                    Some(Inflight::Released(_)) => wire::put(&PubRelPacket::new(id), &mut self.io.out),
                    _ => {
                        let reason = self.reason(ReasonCode::PacketIdentifierNotFound);
                        wire::put(&PubRelPacket::new_with_reason(id, reason), &mut self.io.out);
                    }
                }
                Ok(())
            }
            Packet::PubRel(rel) => {
                let found = self.session().incoming_qos2.remove(&rel.packet_id);
                let reason = match found {
                    true => ReasonCode::Success,
                    false => self.reason(ReasonCode::PacketIdentifierNotFound),
                };
                wire::put(&PubCompPacket::new_with_reason(rel.packet_id, reason), &mut self.io.out);
                Ok(())
            }
            Packet::PubComp(comp) => {
                // Only a message whose PUBREL was sent is complete.
                if let Some(Inflight::Released(delivery)) = self.session().inflight.get(comp.packet_id).cloned() {
                    self.session().inflight.remove(comp.packet_id);
                    self.acknowledged(&delivery);
                }
                Ok(())
            }
            Packet::Subscribe(subscribe) => self.on_subscribe(subscribe).await,
            Packet::Unsubscribe(unsubscribe) => self.on_unsubscribe(unsubscribe).await,
            Packet::PingReq => {
                wire::put(&mqtt5_protocol::packet::pingresp::PingRespPacket::default(), &mut self.io.out);
                Ok(())
            }
            Packet::Disconnect(disconnect) => {
                if let Some(expiry) = disconnect.properties.get_session_expiry_interval() {
                    // MQTT-3.14.2-2: a session that expired on disconnect cannot be
                    // made to outlive it now.
                    if self.session().expiry == 0 && expiry > 0 {
                        return Err(End::protocol("the session expiry cannot be set at DISCONNECT when CONNECT set 0"));
                    }
                    self.session().expiry = expiry;
                }
                Err(End::Disconnected { will: disconnect.reason_code == ReasonCode::DisconnectWithWillMessage })
            }
            Packet::Connect(_) => Err(End::protocol("a second CONNECT")),
            Packet::Auth(_) => Err(End::protocol("AUTH without an authentication method")),
            other => Err(End::protocol(format!("{} is sent by servers, not clients", other.packet_type_name()))),
        }
    }

    /// The reason code to send: the code itself to MQTT 5 clients, success to
    /// 3.1.1 clients (whose acknowledgements carry none).
    fn reason(&self, code: ReasonCode) -> ReasonCode {
        match self.io.version {
            V5 => code,
            _ => ReasonCode::Success,
        }
    }

    async fn on_publish(&mut self, publish: PublishPacket) -> Result<(), End> {
        self.check_user()?;
        let topic: Arc<str> = match publish.properties.get_topic_alias() {
            Some(alias) if self.io.version == V5 => {
                if alias == 0 || alias > self.broker.options.topic_alias_maximum {
                    return Err(End::Refused(
                        ReasonCode::TopicAliasInvalid,
                        format!("topic alias {alias} is out of range"),
                    ));
                }
                match publish.topic_name.is_empty() {
                    true => self
                        .aliases_in
                        .get(&alias)
                        .cloned()
                        .ok_or_else(|| End::protocol(format!("topic alias {alias} was never set")))?,
                    false => {
                        let topic: Arc<str> = Arc::from(publish.topic_name.as_str());
                        self.aliases_in.insert(alias, topic.clone());
                        topic
                    }
                }
            }
            _ => Arc::from(publish.topic_name.as_str()),
        };
        if let Err(err) = check_name(&topic) {
            return Err(End::Refused(ReasonCode::TopicNameInvalid, err.to_string()));
        }
        let id = match (publish.qos, publish.packet_id) {
            (QoS::AtMostOnce, _) => 0,
            (_, Some(id)) if id != 0 => id,
            _ => {
                return Err(End::Refused(ReasonCode::MalformedPacket, "a QoS 1 or 2 PUBLISH needs a packet id".into()));
            }
        };
        if publish.qos == QoS::ExactlyOnce && self.session().incoming_qos2.contains(&id) {
            // Sent again before its PUBREL: acknowledged, not delivered twice.
            wire::put(&PubRecPacket::new(id), &mut self.io.out);
            return Ok(());
        }
        // MQTT-3.3.4-8: no more QoS 1 and 2 publishes unacknowledged (QoS 2: not
        // yet released) than the receive maximum the server announced.
        let unacknowledged = self.pending_qos1 + self.session().incoming_qos2.len();
        if publish.qos != QoS::AtMostOnce && unacknowledged >= usize::from(self.broker.options.receive_maximum) {
            return Err(End::Refused(
                ReasonCode::ReceiveMaximumExceeded,
                format!("more than {} QoS 1 and 2 publishes unacknowledged", self.broker.options.receive_maximum),
            ));
        }
        let weight = publish.payload.len() + 64;
        let message = message(
            topic,
            publish.payload,
            publish.qos,
            publish.retain,
            &publish.properties,
            Some(self.client.clone()),
        );
        if publish.qos == QoS::ExactlyOnce {
            // Noted now, so the PUBLISH sent again before it is acknowledged is
            // not delivered twice; forgotten again if it is refused.
            self.session().incoming_qos2.insert(id);
        }
        let accepted = self.broker.publish_queued(&self.ctx, message).await;
        let qos = publish.qos;
        if qos == QoS::AtLeastOnce {
            self.pending_qos1 += 1;
        }
        // Counted until taken (QoS 0 ones too), so reading waits past a bound.
        self.pending_bytes.fetch_add(weight, std::sync::atomic::Ordering::Relaxed);
        let pending_bytes = self.pending_bytes.clone();
        self.pending.push_back(Box::pin(async move {
            let outcome = accepted.await;
            pending_bytes.fetch_sub(weight, std::sync::atomic::Ordering::Relaxed);
            (qos, id, outcome)
        }));
        Ok(())
    }

    /// Acknowledges a publish once it was taken or refused, in the order received.
    fn acknowledge_publish(&mut self, qos: QoS, id: u16, outcome: Result<(), super::Refusal>) {
        if let Err(refusal) = &outcome {
            tracing::debug!(client = %self.client, reason = %refusal.text, "an MQTT publish was refused");
        }
        let (reason, text) = match outcome {
            Ok(()) => (ReasonCode::Success, None),
            Err(refusal) => (self.reason(refusal.reason), Some(refusal.text)),
        };
        let text = text.filter(|_| self.problem_info && self.io.version == V5);
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => {
                self.pending_qos1 -= 1;
                let mut ack = PubAckPacket::new_with_reason(id, reason);
                if let Some(text) = text {
                    ack = ack.with_reason_string(text);
                }
                wire::put(&ack, &mut self.io.out);
            }
            QoS::ExactlyOnce => {
                if reason != ReasonCode::Success {
                    self.session().incoming_qos2.remove(&id);
                }
                let mut rec = PubRecPacket::new_with_reason(id, reason);
                if let Some(text) = text {
                    rec = rec.with_reason_string(text);
                }
                wire::put(&rec, &mut self.io.out);
            }
        }
    }

    async fn on_subscribe(&mut self, subscribe: SubscribePacket) -> Result<(), End> {
        self.check_user()?;
        if subscribe.filters.is_empty() {
            return Err(End::protocol("SUBSCRIBE without a topic filter"));
        }
        let id = subscribe.properties.get_subscription_identifier();
        if id == Some(0) {
            return Err(End::protocol("subscription identifier 0"));
        }
        let mut codes = Vec::with_capacity(subscribe.filters.len());
        let mut retained = Vec::new();
        for filter in &subscribe.filters {
            codes.push(self.subscribe_one(filter, id, &mut retained).await?);
        }
        self.save_durable().await;
        let mut ack = match self.io.version {
            V5 => SubAckPacket::new(subscribe.packet_id),
            _ => SubAckPacket::new_v311(subscribe.packet_id),
        };
        for code in codes {
            ack = ack.add_reason_code(code);
        }
        wire::put(&ack, &mut self.io.out);
        // Through the mailbox, so the receive maximum holds for them too.
        for delivery in retained {
            self.session().mailbox.push(delivery);
        }
        Ok(())
    }

    /// Subscribes to one filter; the retained messages it is to receive are added
    /// to `retained`.
    async fn subscribe_one(
        &mut self,
        requested: &TopicFilter,
        id: Option<u32>,
        retained: &mut Vec<Delivery>,
    ) -> Result<SubAckReasonCode, End> {
        let v5 = self.io.version == V5;
        let failure = |code| if v5 { code } else { SubAckReasonCode::UnspecifiedError };
        let filter = match Filter::parse(&requested.filter) {
            Ok(filter) => filter,
            Err(_) => return Ok(failure(SubAckReasonCode::TopicFilterInvalid)),
        };
        let options = requested.options;
        if filter.group.is_some() && options.no_local {
            return Err(End::protocol("no local on a shared subscription (MQTT-3.8.3-4)"));
        }
        let sub = SubOptions {
            qos: options.qos,
            no_local: options.no_local,
            retain_as_published: options.retain_as_published,
            id,
        };
        let existed = self.session().subscriptions.contains_key(&requested.filter);
        let send_retained = match options.retain_handling {
            RetainHandling::SendAtSubscribe => true,
            RetainHandling::SendAtSubscribeIfNew => !existed,
            RetainHandling::DoNotSend => false,
        };
        // Records follow their feeds: the session's own, or its share group's.
        let (cursors, forwarders) = match &filter.group {
            Some(group) => {
                if let Err(code) = self.join_shared(group, &filter.filter, sub).await {
                    return Ok(failure(code));
                }
                (Vec::new(), Vec::new())
            }
            None => match self.open_feeds(&filter.filter, sub, None, !send_retained).await {
                Ok(opened) => opened,
                Err(code) => return Ok(failure(code)),
            },
        };
        self.feeds.insert(requested.filter.clone(), forwarders);
        let (client, mailbox) = (self.client.clone(), self.session().mailbox.clone());
        self.broker.router.subscribe(&client, &mailbox, &filter, sub);
        if send_retained && filter.group.is_none() {
            for message in self.broker.router.retained(&filter.filter) {
                retained.push(Delivery {
                    qos: min_qos(message.qos, sub.qos),
                    message,
                    retain: true,
                    subscription_ids: id.into_iter().collect(),
                    origin: Origin::Plain,
                });
            }
        }
        self.session()
            .subscriptions
            .insert(requested.filter.clone(), SessionSub { filter, options: sub, records: cursors });
        Ok(match sub.qos {
            QoS::AtMostOnce => SubAckReasonCode::GrantedQoS0,
            QoS::AtLeastOnce => SubAckReasonCode::GrantedQoS1,
            QoS::ExactlyOnce => SubAckReasonCode::GrantedQoS2,
        })
    }

    /// Opens the change feeds `filter` needs: from where `resume` stood, or now
    /// (with the current records first unless `omit_current`).
    async fn open_feeds(
        &mut self,
        filter: &str,
        options: SubOptions,
        resume: Option<&[RecordCursor]>,
        omit_current: bool,
    ) -> Result<(Vec<RecordCursor>, Vec<Forwarder>), SubAckReasonCode> {
        let plans = records::plan(&self.broker.state, &self.ctx, filter).map_err(|err| code_for(&err))?;
        let (mut cursors, mut forwarders) = (Vec::new(), Vec::new());
        for mut plan in plans {
            let previous = resume.and_then(|r| r.iter().find(|c| c.feed == plan.feed));
            (plan.request.start, plan.request.omit_current) = match previous.and_then(|c| c.sent) {
                Some(position) => (Start::After(position), true),
                None if resume.is_some() => (Start::Now, true),
                None => (Start::Now, omit_current),
            };
            let subscription = self
                .broker
                .state
                .services
                .feed()
                .subscribe(&self.ctx, plan.request)
                .await
                .map_err(|err| code_for(&err.into()))?;
            // A resumed cursor keeps its number: deliveries in flight carry it.
            let mut cursor = match previous.cloned() {
                Some(cursor) => cursor,
                None => RecordCursor::new(self.session().record_id()),
            };
            cursor.feed = plan.feed;
            let feed = self.feed.get_or_insert_with(|| mpsc::channel(FEED_CHANNEL)).0.clone();
            let own = options.no_local.then(|| self.ctx.origin().map(Arc::from)).flatten();
            let task = records::forward(subscription, plan.names, options, (cursor.id, own), feed);
            forwarders.push(Forwarder(tokio::spawn(task)));
            cursors.push(cursor);
        }
        Ok((cursors, forwarders))
    }

    /// Joins the share group of `group` and `filter` for the records `filter`
    /// matches (none: the router alone serves it).
    async fn join_shared(&mut self, group: &str, filter: &str, options: SubOptions) -> Result<(), SubAckReasonCode> {
        let plans = records::plan(&self.broker.state, &self.ctx, filter).map_err(|err| code_for(&err))?;
        if plans.is_empty() {
            return Ok(());
        }
        let member = (self.client.clone(), self.session().mailbox.clone(), options);
        let key = (group.to_string(), filter.to_string(), self.ctx.username().to_string());
        self.broker.shared.join(&self.broker, &self.ctx, key, plans, member).await.map_err(|err| code_for(&err))
    }

    async fn on_unsubscribe(&mut self, unsubscribe: UnsubscribePacket) -> Result<(), End> {
        if unsubscribe.filters.is_empty() {
            return Err(End::protocol("UNSUBSCRIBE without a topic filter"));
        }
        let mut ack = match self.io.version {
            V5 => UnsubAckPacket::new(unsubscribe.packet_id),
            _ => UnsubAckPacket::new_v311(unsubscribe.packet_id),
        };
        for text in &unsubscribe.filters {
            let code = match self.session().subscriptions.remove(text) {
                Some(sub) => {
                    let client = self.client.clone();
                    self.broker.router.unsubscribe(&client, &sub.filter);
                    if let Some(group) = &sub.filter.group {
                        let user = self.ctx.username().to_string();
                        self.broker.shared.leave(&(group.clone(), sub.filter.filter.clone(), user), &client);
                    }
                    self.feeds.remove(text);
                    UnsubAckReasonCode::Success
                }
                None => UnsubAckReasonCode::NoSubscriptionExisted,
            };
            ack = ack.add_reason_code(code);
        }
        self.save_durable().await;
        wire::put(&ack, &mut self.io.out);
        Ok(())
    }

    /// Sends `delivery` as a new PUBLISH (QoS > 0 ones are kept until
    /// acknowledged).
    fn send(&mut self, delivery: Delivery) {
        if delivery.message.expired(Instant::now()) {
            self.acknowledged(&delivery);
            return;
        }
        let id = match delivery.qos {
            QoS::AtMostOnce => None,
            _ => match self.session().packet_id() {
                Some(id) => Some(id),
                None => return, // 65,535 in flight: the receive maximum prevents it
            },
        };
        let fits = self.put_publish(&delivery, id, false);
        if let Origin::Record { subscription, position } = delivery.origin
            && let Some(cursor) = self.session().cursor(subscription)
        {
            cursor.sent(position, id.is_none() || !fits);
            self.dirty = true;
        }
        if let (Some(id), true) = (id, fits) {
            self.session().inflight.insert(id, Inflight::Published(delivery));
        }
    }

    /// Writes the PUBLISH of `delivery`; false when it is larger than the client
    /// takes (it is then dropped, MQTT-3.1.2-25).
    fn put_publish(&mut self, delivery: &Delivery, id: Option<u16>, dup: bool) -> bool {
        let message = &delivery.message;
        let mut packet = match self.io.version {
            V5 => {
                let mut packet = PublishPacket::new(message.topic.to_string(), message.payload.clone(), delivery.qos);
                packet.properties = message.properties.clone();
                for id in &delivery.subscription_ids {
                    packet.properties.set_subscription_identifier(*id);
                }
                if let Some(at) = message.expires_at {
                    let left = at.saturating_duration_since(Instant::now()).as_secs().max(1);
                    packet.properties.set_message_expiry_interval(left.min(u64::from(u32::MAX)) as u32);
                }
                packet
            }
            _ => PublishPacket::new_v311(message.topic.to_string(), message.payload.clone(), delivery.qos),
        };
        packet.retain = delivery.retain;
        packet.dup = dup && id.is_some();
        packet.packet_id = id;
        if wire::publish_size(&packet) > self.client_max_packet {
            return false;
        }
        if self.io.version == V5 && self.client_alias_max > 0 {
            self.alias(&mut packet, &message.topic);
        }
        wire::put(&packet, &mut self.io.out);
        true
    }

    /// Uses a topic alias for `topic`: the topic is sent once with its alias,
    /// then the alias alone, for as many topics as the client takes.
    fn alias(&mut self, packet: &mut PublishPacket, topic: &Arc<str>) {
        match self.aliases_out.get(topic) {
            Some(alias) => {
                packet.topic_name.clear();
                packet.properties.set_topic_alias(*alias);
            }
            None if self.aliases_out.len() < usize::from(self.client_alias_max) => {
                let alias = self.aliases_out.len() as u16 + 1;
                self.aliases_out.insert(topic.clone(), alias);
                packet.properties.set_topic_alias(alias);
            }
            None => {}
        }
    }

    /// Notes `delivery` as done with: a record subscription's cursor moves.
    fn acknowledged(&mut self, delivery: &Delivery) {
        if let Origin::Record { subscription, position } = delivery.origin
            && let Some(cursor) = self.session().cursor(subscription)
        {
            cursor.acked(position);
            self.dirty = true;
        }
    }

    /// Stores a durable session's subscriptions now.
    async fn save_durable(&mut self) {
        if self.session().expiry == 0 {
            return;
        }
        let stored = self.session().stored();
        if let Err(err) = self.broker.store.save_session(&self.client, &stored).await {
            tracing::warn!(client = %self.client, error = %err, "an MQTT session could not be stored");
        }
        self.dirty = false;
    }

    async fn save_if_dirty(&mut self) {
        if self.dirty {
            self.save_durable().await;
        }
    }

    /// Ends the connection: tells an MQTT 5 client why the broker closes it,
    /// publishes the will where due, and keeps or ends the session.
    async fn finish(mut self, end: End) {
        let tell = match &end {
            End::Refused(reason, text) => Some((*reason, text.clone())),
            End::TakenOver => Some((ReasonCode::SessionTakenOver, "another connection took the session over".into())),
            End::Stopping => Some((ReasonCode::ServerShuttingDown, "the server is shutting down".into())),
            _ => None,
        };
        // Publishes received before the end are answered first (in order), for as
        // long as a closing connection may take.
        let deadline = tokio::time::Instant::now() + CLOSE_LIMIT;
        while !self.pending.is_empty() {
            match tokio::time::timeout_at(deadline, self.pending.next()).await {
                Ok(Some((qos, id, outcome))) => self.acknowledge_publish(qos, id, outcome),
                _ => break,
            }
        }
        if let (Some((reason, text)), V5) = (tell, self.io.version) {
            let mut packet = DisconnectPacket::new(reason);
            packet.properties.set_reason_string(text);
            wire::put(&packet, &mut self.io.out);
        }
        if let End::Refused(reason, text) = &end {
            tracing::debug!(client = %self.client, peer = %self.peer, reason = ?reason, %text, "closing an MQTT connection");
        }
        // A client that does not read holds the session no longer than this.
        let _ = tokio::time::timeout(CLOSE_LIMIT, async {
            let _ = self.io.flush().await;
            let _ = self.io.writer.shutdown().await;
        })
        .await;
        self.feeds.clear();
        let dropped = self.session().mailbox.dropped();
        if dropped > 0 {
            tracing::warn!(client = %self.client, dropped, "messages were dropped for an MQTT session whose queue was full");
        }
        let publish_will = !matches!(end, End::Disconnected { will: false } | End::Stopping);
        let expiry = self.session().expiry;
        // A will is published as the user is now: none when it is gone.
        let publish_will = publish_will && self.check_user().is_ok();
        if let (Some(will), true) = (self.will.take(), publish_will) {
            let delay = will.delay.min(Duration::from_secs(u64::from(expiry)));
            match delay.is_zero() {
                true => self.broker.publish_will(&self.ctx, will.message, will.expiry).await,
                false => {
                    let generation = self.slot.generation.load(std::sync::atomic::Ordering::SeqCst);
                    self.broker.schedule_will(
                        self.ctx.clone(),
                        &self.slot,
                        generation,
                        will.message,
                        will.expiry,
                        delay,
                    );
                }
            }
        }
        let taken_over = matches!(end, End::TakenOver);
        // A session that ends with its connection ends on a takeover too
        // (MQTT-3.1.2-6): the new connection starts without it.
        if expiry == 0 {
            if let Some(session) = self.session.take() {
                self.broker.end_session(session).await;
            }
            drop(self.session);
            self.broker.release_slot(&self.client, &self.slot);
            return;
        }
        // Kept: a record subscription that had sent nothing resumes from now.
        let feeds: Vec<(u64, String)> = self
            .session()
            .subscriptions
            .values()
            .flat_map(|s| s.records.iter())
            .filter(|c| c.sent.is_none())
            .map(|c| (c.id, c.feed.clone()))
            .collect();
        for (id, feed) in feeds {
            let now = records::position_now(&self.broker.state, records::feed_database(&feed));
            if let Some(cursor) = self.session().cursor(id) {
                cursor.sent = now;
                cursor.acked = cursor.acked.or(now);
            }
        }
        if expiry > 0 {
            self.save_durable().await;
        }
        // From now on what it is sent is stored as it arrives; what it holds
        // already (unacknowledged, or not yet sent) is stored now, numbered before
        // anything sent from now on.
        let mut held: Vec<Delivery> = self
            .session()
            .inflight
            .in_order()
            .into_iter()
            .filter_map(|(_, inflight)| match inflight {
                Inflight::Published(delivery) if delivery.origin == Origin::Plain => Some(delivery),
                _ => None,
            })
            .collect();
        let broker = self.broker.clone();
        let unacknowledged = held.len();
        let (queued, first) = self.session().mailbox.park_and_hold(|n| broker.reserve_seqs(unacknowledged + n));
        held.extend(queued);
        let held: Vec<(Arc<str>, Delivery)> = held.into_iter().map(|d| (self.client.clone(), d)).collect();
        if let Err(err) = self.broker.keep_queued_from(first, &held).await {
            tracing::warn!(client = %self.client, error = %err, "an MQTT session's queue could not be stored");
        }
        if expiry != NEVER && !taken_over {
            *self.slot.expires_at.lock() = Some(Instant::now() + Duration::from_secs(u64::from(expiry)));
        }
    }
}

/// The next item from the record subscriptions' channel; never, without one.
async fn next_fed(feed: &mut Option<(mpsc::Sender<FeedItem>, mpsc::Receiver<FeedItem>)>) -> Option<FeedItem> {
    match feed {
        Some((_, receiver)) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// A message as published by a client, with the properties passed on.
fn message(
    topic: Arc<str>,
    payload: Bytes,
    qos: QoS,
    retain: bool,
    properties: &Properties,
    publisher: Option<Arc<str>>,
) -> Message {
    let mut passed = Properties::default();
    for (id, value) in properties.iter() {
        let kept = matches!(
            id,
            PropertyId::PayloadFormatIndicator
                | PropertyId::ContentType
                | PropertyId::ResponseTopic
                | PropertyId::CorrelationData
                | PropertyId::UserProperty
        );
        if kept {
            let _ = passed.add(id, value.clone());
        }
    }
    let expires_at = properties
        .get_message_expiry_interval()
        .map(|seconds| Instant::now() + Duration::from_secs(u64::from(seconds)));
    Message { topic, payload, qos, retain, properties: passed, expires_at, publisher }
}

/// The SUBACK code for a subscription refused with `err`.
fn code_for(err: &crate::http::error::ApiError) -> SubAckReasonCode {
    match err.code() {
        lyre_core::Code::Forbidden | lyre_core::Code::MustLogin | lyre_core::Code::LoginFailed => {
            SubAckReasonCode::NotAuthorized
        }
        lyre_core::Code::BadRequest | lyre_core::Code::NotFound => SubAckReasonCode::TopicFilterInvalid,
        _ => SubAckReasonCode::UnspecifiedError,
    }
}
