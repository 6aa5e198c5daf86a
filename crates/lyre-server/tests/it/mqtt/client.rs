//! A raw MQTT client for the broker's tests: packets encoded and decoded with the
//! `mqtt5-protocol` codec, sent and read one at a time, so a test controls every
//! byte (what a library client would hide: unacknowledged messages, resent
//! packets, malformed input).

use std::time::Duration;

use bytes::{Buf, BytesMut};
use mqtt5_protocol::packet::MqttPacket;
use mqtt5_protocol::packet::connack::ConnAckPacket;
use mqtt5_protocol::packet::connect::ConnectPacket;
use mqtt5_protocol::packet::publish::PublishPacket;
use mqtt5_protocol::packet::subscribe::{SubscribePacket, SubscriptionOptions, TopicFilter};
use mqtt5_protocol::types::ConnectOptions;
use mqtt5_protocol::{FixedHeader, Packet, PacketType, QoS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{PASSWORD, TestServer, USER};

pub const V311: u8 = 4;
pub const V5: u8 = 5;

/// One raw connection.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    pub version: u8,
    /// Packets that came while waiting for an acknowledgement, read next.
    stash: std::collections::VecDeque<Packet>,
}

impl Raw {
    /// A TCP connection to the server's MQTT port (nothing sent yet).
    pub async fn open(s: &TestServer, version: u8) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", s.mqtt_port)).await.expect("connect to the MQTT port");
        stream.set_nodelay(true).unwrap();
        Raw { stream, buf: BytesMut::new(), version, stash: Default::default() }
    }

    /// Connects as the test super user with `client_id`, `clean` start and
    /// `configure` applied to the options; answers the CONNACK.
    pub async fn connect_with(
        s: &TestServer,
        version: u8,
        client_id: &str,
        clean: bool,
        configure: impl FnOnce(&mut ConnectOptions),
    ) -> (Raw, ConnAckPacket) {
        let mut raw = Raw::open(s, version).await;
        let mut options =
            ConnectOptions::new(client_id).with_clean_start(clean).with_credentials(USER, PASSWORD.as_bytes());
        options.keep_alive = Duration::from_secs(60);
        configure(&mut options);
        raw.send(&connect_packet(version, options)).await;
        match raw.recv().await {
            Packet::ConnAck(ack) => (raw, ack),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Connects, expecting success.
    pub async fn connect(s: &TestServer, version: u8, client_id: &str, clean: bool) -> (Raw, bool) {
        let (raw, ack) = Raw::connect_with(s, version, client_id, clean, |_| {}).await;
        assert_eq!(u8::from(ack.reason_code), 0, "CONNACK refused: {ack:?}");
        (raw, ack.session_present)
    }

    /// Sends a packet.
    pub async fn send(&mut self, packet: &impl MqttPacket) {
        let mut out = BytesMut::new();
        packet.encode(&mut out).unwrap();
        self.stream.write_all(&out).await.expect("send a packet");
    }

    /// Sends raw bytes.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send bytes");
    }

    /// The next packet, failing after 10 s.
    pub async fn recv(&mut self) -> Packet {
        match self.recv_within(Duration::from_secs(10)).await {
            Some(packet) => packet,
            None => panic!("no packet within 10 s (or the connection closed)"),
        }
    }

    /// The next packet within `limit`; `None` on timeout or when the connection
    /// closed.
    pub async fn recv_within(&mut self, limit: Duration) -> Option<Packet> {
        if let Some(packet) = self.stash.pop_front() {
            return Some(packet);
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(packet) = self.take() {
                return Some(packet);
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Whether the server closes the connection within `limit` (packets before
    /// the close are returned).
    pub async fn closed_within(&mut self, limit: Duration) -> (bool, Vec<Packet>) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            while let Some(packet) = self.take() {
                seen.push(packet);
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (true, seen),
                Err(_) => return (false, seen),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The next `n` bytes as they came (a 3.1.1 return code, say).
    pub async fn recv_raw(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf)).await;
            assert!(matches!(read, Ok(Ok(k)) if k > 0), "{n} bytes within 10 s");
        }
        self.buf.split_to(n).to_vec()
    }

    fn take(&mut self) -> Option<Packet> {
        let first = *self.buf.first()?;
        let (mut length, mut used) = (0usize, 0usize);
        loop {
            let byte = *self.buf.get(1 + used)?;
            length |= usize::from(byte & 0x7F) << (7 * used);
            used += 1;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if self.buf.len() < 1 + used + length {
            return None;
        }
        let mut body = self.buf.split_to(1 + used + length).freeze();
        body.advance(1 + used);
        let packet_type = PacketType::from_u8(first >> 4).expect("a packet type");
        if self.version == V311 {
            // 3.1.1's shapes exactly: no reason codes or properties leak into them.
            let fixed_size = matches!(
                packet_type,
                PacketType::ConnAck
                    | PacketType::PubAck
                    | PacketType::PubRec
                    | PacketType::PubRel
                    | PacketType::PubComp
                    | PacketType::UnsubAck
            );
            assert!(!fixed_size || length == 2, "a 3.1.1 {packet_type:?} of {length} bytes: {:?}", &body[..]);
            if packet_type == PacketType::SubAck {
                assert!(body[2..].iter().all(|c| matches!(c, 0 | 1 | 2 | 0x80)), "3.1.1 SUBACK codes: {:?}", &body[..]);
            }
            assert!(packet_type != PacketType::Disconnect, "a 3.1.1 server sends no DISCONNECT");
        }
        let fixed = FixedHeader::new(packet_type, first & 0x0F, length as u32);
        Some(
            Packet::decode_from_body_with_version(packet_type, &fixed, &mut body, self.version)
                .expect("a packet decodes"),
        )
    }

    /// Subscribes to `filter` at `qos` with packet id `id`; answers the SUBACK's
    /// reason codes.
    pub async fn subscribe(&mut self, id: u16, filter: &str, qos: QoS) -> Vec<u8> {
        self.subscribe_with(id, TopicFilter::with_options(filter, SubscriptionOptions::new(qos)), None).await
    }

    /// Subscribes with full options and an optional subscription identifier.
    pub async fn subscribe_with(&mut self, id: u16, filter: TopicFilter, subscription_id: Option<u32>) -> Vec<u8> {
        let mut packet = match self.version {
            V5 => SubscribePacket::new(id),
            _ => SubscribePacket::new_v311(id),
        };
        packet.filters.push(filter);
        if let Some(sid) = subscription_id {
            packet.properties.set_subscription_identifier(sid);
        }
        self.send(&packet).await;
        match self.recv().await {
            Packet::SubAck(ack) => {
                assert_eq!(ack.packet_id, id);
                ack.reason_codes.iter().map(|c| *c as u8).collect()
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// A PUBLISH packet in this connection's version.
    pub fn publish_packet(
        &self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        id: Option<u16>,
    ) -> PublishPacket {
        let mut packet = match self.version {
            V5 => PublishPacket::new(topic, payload.to_vec(), qos),
            _ => PublishPacket::new_v311(topic, payload.to_vec(), qos),
        };
        packet.retain = retain;
        packet.packet_id = id;
        packet
    }

    /// Publishes and waits for the acknowledgement (QoS 1: PUBACK; QoS 2: the
    /// whole exchange); answers the PUBACK or PUBREC reason code. A message the
    /// connection receives meanwhile (its own subscription, say) is kept for
    /// [`Raw::recv`].
    pub async fn publish(&mut self, topic: &str, payload: &[u8], qos: QoS, retain: bool, id: u16) -> u8 {
        let packet = self.publish_packet(topic, payload, qos, retain, (qos != QoS::AtMostOnce).then_some(id));
        self.send(&packet).await;
        match qos {
            QoS::AtMostOnce => 0,
            QoS::AtLeastOnce => match self.ack().await {
                Packet::PubAck(ack) => u8::from(ack.reason_code),
                other => panic!("expected PUBACK, got {other:?}"),
            },
            QoS::ExactlyOnce => {
                let code = match self.ack().await {
                    Packet::PubRec(rec) => u8::from(rec.reason_code),
                    other => panic!("expected PUBREC, got {other:?}"),
                };
                if code < 0x80 {
                    self.send(&mqtt5_protocol::packet::pubrel::PubRelPacket::new(id)).await;
                    assert!(matches!(self.ack().await, Packet::PubComp(_)));
                }
                code
            }
        }
    }

    /// The next packet that is not a PUBLISH (those are kept for later).
    async fn ack(&mut self) -> Packet {
        let mut kept = Vec::new();
        let packet = loop {
            match self.recv_fresh().await {
                Packet::Publish(publish) => kept.push(Packet::Publish(publish)),
                other => break other,
            }
        };
        self.stash.extend(kept);
        packet
    }

    /// The next packet off the wire (not the stash), failing after 10 s.
    async fn recv_fresh(&mut self) -> Packet {
        let stashed = std::mem::take(&mut self.stash);
        let packet = self.recv().await;
        self.stash = stashed;
        packet
    }

    /// The next PUBLISH (other packets fail the test).
    pub async fn next_publish(&mut self) -> PublishPacket {
        match self.recv().await {
            Packet::Publish(publish) => publish,
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    /// The next PUBLISH, acknowledged as its QoS asks.
    pub async fn next_acked(&mut self) -> PublishPacket {
        let publish = self.next_publish().await;
        match (publish.qos, publish.packet_id) {
            (QoS::AtLeastOnce, Some(id)) => self.send(&mqtt5_protocol::packet::puback::PubAckPacket::new(id)).await,
            (QoS::ExactlyOnce, Some(id)) => {
                self.send(&mqtt5_protocol::packet::pubrec::PubRecPacket::new(id)).await;
                assert!(matches!(self.recv().await, Packet::PubRel(_)));
                self.send(&mqtt5_protocol::packet::pubcomp::PubCompPacket::new(id)).await;
            }
            _ => {}
        }
        publish
    }

    /// No PUBLISH arrives within `limit`.
    pub async fn nothing_within(&mut self, limit: Duration) {
        if let Some(packet) = self.recv_within(limit).await {
            panic!("expected nothing, got {packet:?}");
        }
    }

    /// Sends DISCONNECT (normal).
    pub async fn disconnect(mut self) {
        self.send(&mqtt5_protocol::packet::disconnect::DisconnectPacket::new(mqtt5_protocol::ReasonCode::Success))
            .await;
        let _ = self.stream.shutdown().await;
    }
}

/// A CONNECT in `version`.
pub fn connect_packet(version: u8, options: ConnectOptions) -> ConnectPacket {
    match version {
        V5 => ConnectPacket::new(options),
        _ => ConnectPacket::new_v311(options),
    }
}
