//! MQTT packets on the wire: cutting whole packets off a connection's read buffer
//! (refusing one larger than the limit as soon as its length is read, before its
//! body arrives), decoding them with the `mqtt5-protocol` codec in the protocol
//! version the connection speaks, and encoding what the broker sends.

use bytes::{Buf, BytesMut};
use mqtt5_protocol::packet::MqttPacket;
use mqtt5_protocol::{FixedHeader, Packet, PacketType, ReasonCode};

/// MQTT 3.1.1's protocol level.
pub(crate) const V311: u8 = 4;
/// MQTT 5's protocol level.
pub(crate) const V5: u8 = 5;

/// Why the bytes a client sent are not a packet this broker takes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum WireError {
    /// Larger than the broker's maximum packet size.
    #[error("the packet is {size} bytes, more than the {limit} this server accepts")]
    TooLarge {
        /// The packet's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a well-formed packet.
    #[error("malformed packet: {0}")]
    Malformed(String),
    /// A CONNECT with a protocol level other than 4 (3.1.1) or 5.
    #[error("protocol level {0} is not supported (3.1.1 and 5 are)")]
    Version(u8),
}

impl WireError {
    /// The MQTT 5 reason code that says it.
    pub(crate) fn reason(&self) -> ReasonCode {
        match self {
            WireError::TooLarge { .. } => ReasonCode::PacketTooLarge,
            WireError::Malformed(_) => ReasonCode::MalformedPacket,
            WireError::Version(_) => ReasonCode::UnsupportedProtocolVersion,
        }
    }
}

/// Takes the first whole packet off `buf`: `Ok(None)` while it has not all
/// arrived. `version` is the connection's protocol level (0 before its CONNECT,
/// which must be the first packet and tells it).
pub(crate) fn take_packet(buf: &mut BytesMut, version: u8, limit: usize) -> Result<Option<Packet>, WireError> {
    let Some(&first) = buf.first() else { return Ok(None) };
    // Before CONNECT, a first byte that cannot start one is refused at once
    // (whatever length the rest would claim).
    if version == 0 && first != 0x10 {
        return Err(WireError::Malformed("the first packet must be CONNECT".into()));
    }
    let (length, header) = match remaining_length(&buf[1..])? {
        Some((length, used)) => (length, 1 + used),
        None => return Ok(None),
    };
    let size = header + length;
    if size > limit {
        return Err(WireError::TooLarge { size, limit });
    }
    if buf.len() < size {
        // Room as the bytes come (a header alone does not claim its whole size).
        buf.reserve((size - buf.len()).min(64 << 10));
        return Ok(None);
    }
    let mut body = buf.split_to(size).freeze();
    body.advance(header);
    let packet_type = PacketType::from_u8(first >> 4)
        .ok_or_else(|| WireError::Malformed(format!("packet type {} is reserved", first >> 4)))?;
    if packet_type == PacketType::Connect {
        check_protocol(&body)?;
    }
    if packet_type == PacketType::Subscribe && version == V311 {
        check_subscription_options(&body)?;
    }
    if packet_type == PacketType::Auth && version == V311 {
        return Err(WireError::Malformed("AUTH is an MQTT 5 packet".into()));
    }
    let fixed = FixedHeader::new(packet_type, first & 0x0F, length as u32);
    let packet = Packet::decode_from_body_with_version(packet_type, &fixed, &mut body, version.max(V311))
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    if body.has_remaining() {
        return Err(WireError::Malformed(format!(
            "{} has {} bytes after its end",
            packet.packet_type_name(),
            body.remaining()
        )));
    }
    Ok(Some(packet))
}

/// The remaining length at the start of `bytes` and how many bytes encode it:
/// `None` while incomplete.
fn remaining_length(bytes: &[u8]) -> Result<Option<(usize, usize)>, WireError> {
    let mut value = 0usize;
    for (i, byte) in bytes.iter().take(4).enumerate() {
        value |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    match bytes.len() >= 4 {
        true => Err(WireError::Malformed("the remaining length takes more than four bytes".into())),
        false => Ok(None),
    }
}

/// Refuses a CONNECT for a protocol this broker does not speak before decoding it
/// (MQTT 3.1's `MQIsdp` included), so the client hears which.
fn check_protocol(body: &[u8]) -> Result<(), WireError> {
    let name_len = match body {
        [hi, lo, ..] => usize::from(*hi) << 8 | usize::from(*lo),
        _ => return Err(WireError::Malformed("CONNECT without a protocol name".into())),
    };
    let name = body.get(2..2 + name_len).ok_or_else(|| WireError::Malformed("CONNECT is cut short".into()))?;
    let level = *body.get(2 + name_len).ok_or_else(|| WireError::Malformed("CONNECT is cut short".into()))?;
    match (name, level) {
        (b"MQTT", V311 | V5) => Ok(()),
        (b"MQTT" | b"MQIsdp", level) => Err(WireError::Version(level)),
        _ => Err(WireError::Malformed(format!("'{}' is not MQTT's protocol name", String::from_utf8_lossy(name)))),
    }
}

/// MQTT-3.8.3-4 for 3.1.1 (which the codec reads leniently): each requested QoS
/// is 0, 1 or 2 and the option byte's upper bits are 0.
fn check_subscription_options(body: &[u8]) -> Result<(), WireError> {
    let mut rest = body.get(2..).unwrap_or_default(); // after the packet id
    while let [hi, lo, tail @ ..] = rest {
        let length = usize::from(*hi) << 8 | usize::from(*lo);
        let Some(&options) = tail.get(length) else { break }; // the codec reports it
        if options & 0xFC != 0 || options & 0x03 == 3 {
            return Err(WireError::Malformed(format!("subscription options 0x{options:02X} are not 3.1.1's")));
        }
        rest = &tail[length + 1..];
    }
    Ok(())
}

/// Appends `packet` to `out`.
pub(crate) fn put(packet: &impl MqttPacket, out: &mut BytesMut) {
    // Encoding into memory fails only for a packet longer than MQTT can say, which
    // the broker never builds (it refuses larger input first).
    if let Err(err) = packet.encode(out) {
        tracing::error!(error = %err, "an MQTT packet could not be encoded");
    }
}

/// The size `packet` takes on the wire.
pub(crate) fn publish_size(packet: &mqtt5_protocol::packet::publish::PublishPacket) -> usize {
    let body = packet.body_encoded_size();
    1 + match body {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    } + body
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqtt5_protocol::packet::publish::PublishPacket;

    #[test]
    fn a_packet_is_taken_only_once_whole() {
        let mut whole = BytesMut::new();
        put(&PublishPacket::new_v311("a/b", &b"hello"[..], mqtt5_protocol::QoS::AtMostOnce), &mut whole);
        let mut buf = BytesMut::from(&whole[..4]);
        assert!(take_packet(&mut buf, V311, 1 << 20).unwrap().is_none());
        buf.extend_from_slice(&whole[4..]);
        buf.extend_from_slice(&whole[..2]);
        match take_packet(&mut buf, V311, 1 << 20).unwrap() {
            Some(Packet::Publish(p)) => assert_eq!((p.topic_name.as_str(), &p.payload[..]), ("a/b", &b"hello"[..])),
            other => panic!("{other:?}"),
        }
        assert_eq!(buf.len(), 2, "the next packet's start stays");
        assert_eq!(
            publish_size(&PublishPacket::new_v311("a/b", &b"hello"[..], mqtt5_protocol::QoS::AtMostOnce)),
            whole.len()
        );
    }

    #[test]
    fn oversized_and_malformed_input_is_refused() {
        // A PUBLISH announcing 2 MiB is refused from its header alone.
        let mut buf = BytesMut::from(&[0x30, 0x80, 0x80, 0x80, 0x01][..]);
        assert!(matches!(take_packet(&mut buf, V5, 1 << 20), Err(WireError::TooLarge { .. })));
        // Five length bytes.
        let mut buf = BytesMut::from(&[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01][..]);
        assert!(matches!(take_packet(&mut buf, V5, usize::MAX), Err(WireError::Malformed(_))));
        // Packet type 0 is reserved.
        let mut buf = BytesMut::from(&[0x00, 0x00][..]);
        assert!(matches!(take_packet(&mut buf, V5, 1 << 20), Err(WireError::Malformed(_))));
        // The first packet must be CONNECT.
        let mut buf = BytesMut::from(&[0xC0, 0x00][..]);
        assert!(matches!(take_packet(&mut buf, 0, 1 << 20), Err(WireError::Malformed(_))));
        // MQTT 3.1 is named and refused.
        let mut connect = vec![0x10, 0x0C, 0x00, 0x06];
        connect.extend_from_slice(b"MQIsdp");
        connect.extend_from_slice(&[3, 0x02, 0x00, 0x3C]);
        let mut buf = BytesMut::from(&connect[..]);
        assert!(matches!(take_packet(&mut buf, 0, 1 << 20), Err(WireError::Version(3))));
        // A 3.1.1 SUBSCRIBE asking for QoS 3 (MQTT-3.8.3-4).
        let mut buf = BytesMut::from(&[0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x03][..]);
        assert!(matches!(take_packet(&mut buf, V311, 1 << 20), Err(WireError::Malformed(_))));
        let mut buf = BytesMut::from(&[0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x02][..]);
        assert!(matches!(take_packet(&mut buf, V311, 1 << 20), Ok(Some(Packet::Subscribe(_)))));
        // PINGREQ with flags set (MQTT-2.1.3-1).
        let mut buf = BytesMut::from(&[0xC1, 0x00][..]);
        assert!(matches!(take_packet(&mut buf, V5, 1 << 20), Err(WireError::Malformed(_))));
    }
}
