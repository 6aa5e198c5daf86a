//! Broker-side statements of MQTT 3.1.1 (and their MQTT 5 twins), one test each
//! or a few closely tied ones together; each names the statements it checks.

use std::time::Duration;

use mqtt5_protocol::packet::connect::ConnectPacket;
use mqtt5_protocol::types::{ConnectOptions, WillMessage};
use mqtt5_protocol::{Packet, QoS};

use super::client::{Raw, V5, V311};
use crate::support::{PASSWORD, TestServer, USER};

/// MQTT-3.1.4-1 (credentials checked), MQTT-3.2.2-5 and 3.1.1's return codes 4
/// (bad user name or password) and 5 (not authorized), as bytes; MQTT 5's 0x86.
#[tokio::test]
async fn connect_refuses_wrong_or_missing_credentials() {
    let s = TestServer::start().await;
    let mut wrong = ConnectOptions::new("c1");
    wrong.username = Some(USER.into());
    wrong.password = Some(b"wrong".to_vec());
    let mut raw = Raw::open(&s, V311).await;
    raw.send(&ConnectPacket::new_v311(wrong.clone())).await;
    assert_eq!(raw.recv_raw(4).await, [0x20, 0x02, 0x00, 0x04]);
    assert!(raw.closed_within(Duration::from_secs(5)).await.0, "closed after the refusal (MQTT-3.2.2-5)");
    let mut raw = Raw::open(&s, V5).await;
    raw.send(&ConnectPacket::new(wrong)).await;
    match raw.recv().await {
        Packet::ConnAck(ack) => {
            assert_eq!(u8::from(ack.reason_code), 0x86);
            assert!(!ack.session_present, "session present is 0 on a refusal");
        }
        other => panic!("{other:?}"),
    }
    assert!(raw.closed_within(Duration::from_secs(5)).await.0);
    // No credentials from a loopback client is still a refusal when
    // authorizeLocal is off.
    let s = TestServer::start_with(&[("AUTHENTICATION_AUTHORIZELOCAL", "false")]).await;
    let mut raw = Raw::open(&s, V311).await;
    raw.send(&ConnectPacket::new_v311(ConnectOptions::new("c2"))).await;
    assert_eq!(raw.recv_raw(4).await, [0x20, 0x02, 0x00, 0x05]);
}

/// MQTT-3.1.0-1 (the first packet is CONNECT, else the connection is closed),
/// MQTT-3.1.0-2 (a second CONNECT is a protocol violation), MQTT-3.1.2-2 (an
/// unsupported level answers return code 1 and closes).
#[tokio::test]
async fn connect_is_first_and_once_and_of_a_known_level() {
    let s = TestServer::start().await;
    let mut raw = Raw::open(&s, V311).await;
    raw.send_bytes(&[0xC0, 0x00]).await; // PINGREQ first
    assert!(raw.closed_within(Duration::from_secs(5)).await.0);

    let (mut raw, _) = Raw::connect(&s, V311, "twice", true).await;
    let mut options = ConnectOptions::new("twice");
    options.username = Some(USER.into());
    options.password = Some(PASSWORD.as_bytes().to_vec());
    raw.send(&ConnectPacket::new_v311(options)).await;
    assert!(raw.closed_within(Duration::from_secs(5)).await.0);

    // MQTT 3.1 ("MQIsdp", level 3).
    let mut raw = Raw::open(&s, V311).await;
    let mut connect = vec![0x10, 0x0E, 0x00, 0x06];
    connect.extend_from_slice(b"MQIsdp");
    connect.extend_from_slice(&[3, 0x02, 0x00, 0x3C, 0x00, 0x00]);
    raw.send_bytes(&connect).await;
    assert_eq!(raw.recv_raw(4).await, [0x20, 0x02, 0x00, 0x01], "return code 1: unacceptable protocol level");
    assert!(raw.closed_within(Duration::from_secs(5)).await.0);
}

/// MQTT-3.1.3-6/-7 (an empty client id with a clean session is assigned one),
/// MQTT-3.1.3-8 (an empty id without a clean session is refused with return
/// code 2).
#[tokio::test]
async fn empty_client_ids() {
    let s = TestServer::start().await;
    let (raw, ack) = Raw::connect_with(&s, V311, "", true, |_| {}).await;
    assert_eq!(u8::from(ack.reason_code), 0);
    raw.disconnect().await;
    let mut raw = Raw::open(&s, V311).await;
    let mut options = ConnectOptions::new("").with_clean_start(false);
    options.username = Some(USER.into());
    options.password = Some(PASSWORD.as_bytes().to_vec());
    raw.send(&ConnectPacket::new_v311(options)).await;
    assert_eq!(raw.recv_raw(4).await, [0x20, 0x02, 0x00, 0x02], "return code 2 (identifier rejected)");
}

/// MQTT-3.12.4-1 (PINGREQ answered with PINGRESP) and MQTT-3.1.2-24 (no packet
/// within one and a half times the keep-alive closes the connection).
#[tokio::test]
async fn keep_alive() {
    let s = TestServer::start().await;
    let (mut raw, _) = Raw::connect_with(&s, V311, "pinger", true, |o| o.keep_alive = Duration::from_secs(1)).await;
    raw.send_bytes(&[0xC0, 0x00]).await;
    assert!(matches!(raw.recv().await, Packet::PingResp));
    let started = tokio::time::Instant::now();
    let (closed, _) = raw.closed_within(Duration::from_secs(10)).await;
    assert!(closed, "a silent client is disconnected");
    assert!(started.elapsed() >= Duration::from_millis(1_400), "not before 1.5 x keep-alive");
}

/// Plain topics: MQTT-3.3.5-1 (the message goes to every matching
/// subscription), MQTT-3.8.4-6 and MQTT-3.3.4-? (delivered at the lower of the
/// publish and subscription QoS), MQTT-3.8.4-5 (one SUBACK code per filter, in
/// order; 0x80 for a bad filter), MQTT-3.10.4-4/-5 (UNSUBACK, and delivery stops),
/// MQTT-4.6.0-5 (in order).
#[tokio::test]
async fn publish_subscribe_qos_and_unsubscribe() {
    let s = TestServer::start().await;
    for version in [V311, V5] {
        let (mut sub, _) = Raw::connect(&s, version, "sub", true).await;
        assert_eq!(sub.subscribe(1, "plain/qos1", QoS::AtLeastOnce).await, vec![1]);
        let mut bad = mqtt5_protocol::packet::subscribe::SubscribePacket::new(2);
        bad.protocol_version = version;
        bad.filters.push(mqtt5_protocol::packet::subscribe::TopicFilter::new("plain/#/x", QoS::AtMostOnce));
        bad.filters.push(mqtt5_protocol::packet::subscribe::TopicFilter::new("plain/qos2", QoS::ExactlyOnce));
        sub.send(&bad).await;
        match sub.recv().await {
            Packet::SubAck(ack) => {
                let codes: Vec<u8> = ack.reason_codes.iter().map(|c| *c as u8).collect();
                let invalid = if version == V5 { 0x8F } else { 0x80 };
                assert_eq!(codes, vec![invalid, 2]);
            }
            other => panic!("{other:?}"),
        }
        let (mut publisher, _) = Raw::connect(&s, version, "pub", true).await;
        // QoS 2 published to a QoS 1 subscription arrives at QoS 1; QoS 0 at 0.
        assert_eq!(publisher.publish("plain/qos1", b"one", QoS::ExactlyOnce, false, 10).await, 0);
        assert_eq!(publisher.publish("plain/qos1", b"two", QoS::AtMostOnce, false, 0).await, 0);
        assert_eq!(publisher.publish("plain/qos2", b"three", QoS::ExactlyOnce, false, 11).await, 0);
        let first = sub.next_acked().await;
        assert_eq!(
            (first.topic_name.as_str(), &first.payload[..], first.qos),
            ("plain/qos1", &b"one"[..], QoS::AtLeastOnce)
        );
        let second = sub.next_acked().await;
        assert_eq!((&second.payload[..], second.qos, second.packet_id), (&b"two"[..], QoS::AtMostOnce, None));
        let third = sub.next_acked().await;
        assert_eq!((&third.payload[..], third.qos), (&b"three"[..], QoS::ExactlyOnce));
        // Unsubscribe: UNSUBACK, then nothing.
        let mut unsubscribe = mqtt5_protocol::packet::unsubscribe::UnsubscribePacket::new(5);
        unsubscribe.protocol_version = version;
        unsubscribe.filters.push("plain/qos1".into());
        sub.send(&unsubscribe).await;
        assert!(matches!(sub.recv().await, Packet::UnsubAck(ack) if ack.packet_id == 5));
        publisher.publish("plain/qos1", b"gone", QoS::AtLeastOnce, false, 12).await;
        sub.nothing_within(Duration::from_millis(300)).await;
        sub.disconnect().await;
        publisher.disconnect().await;
    }
}

/// MQTT-3.3.5-1 with overlapping subscriptions: one delivery at the highest QoS
/// of those that match.
#[tokio::test]
async fn overlapping_subscriptions_deliver_once_at_the_highest_qos() {
    let s = TestServer::start().await;
    let (mut sub, _) = Raw::connect(&s, V311, "overlap", true).await;
    sub.subscribe(1, "a/+", QoS::AtMostOnce).await;
    sub.subscribe(2, "a/#", QoS::ExactlyOnce).await;
    sub.subscribe(3, "#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V311, "overlap-pub", true).await;
    publisher.publish("a/b", b"x", QoS::ExactlyOnce, false, 1).await;
    let got = sub.next_acked().await;
    assert_eq!((got.topic_name.as_str(), got.qos), ("a/b", QoS::ExactlyOnce));
    sub.nothing_within(Duration::from_millis(300)).await;
}

/// MQTT-4.7.1-1..3 (wildcards), MQTT-4.7.2-1 (`$` topics not matched by a
/// first-level wildcard), MQTT-3.3.2-2 (a wildcard in a PUBLISH topic closes the
/// connection; others go on).
#[tokio::test]
async fn wildcards_and_dollar_topics() {
    let s = TestServer::start().await;
    let (mut all, _) = Raw::connect(&s, V311, "all", true).await;
    all.subscribe(1, "#", QoS::AtMostOnce).await;
    let (mut plus, _) = Raw::connect(&s, V311, "plus", true).await;
    plus.subscribe(1, "+/tennis/+", QoS::AtMostOnce).await;
    let (mut sys, _) = Raw::connect(&s, V311, "sys", true).await;
    sys.subscribe(1, "$SYS/#", QoS::AtMostOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V311, "wild-pub", true).await;
    publisher.publish("$SYS/uptime", b"1", QoS::AtLeastOnce, false, 1).await;
    publisher.publish("sport/tennis/player1", b"2", QoS::AtLeastOnce, false, 2).await;
    assert_eq!(&sys.next_publish().await.payload[..], b"1");
    assert_eq!(all.next_publish().await.topic_name, "sport/tennis/player1", "'#' skips $SYS");
    assert_eq!(plus.next_publish().await.topic_name, "sport/tennis/player1");
    sys.nothing_within(Duration::from_millis(200)).await;

    let bad = publisher.publish_packet("sport/+", b"x", QoS::AtMostOnce, false, None);
    publisher.send(&bad).await;
    assert!(publisher.closed_within(Duration::from_secs(5)).await.0);
    let (mut other, _) = Raw::connect(&s, V311, "still", true).await;
    other.send_bytes(&[0xC0, 0x00]).await;
    assert!(matches!(other.recv().await, Packet::PingResp), "the broker serves on");
}

/// Retained messages: MQTT-3.3.1-5 (kept), -6 (sent to a new subscriber with
/// RETAIN 1), -9 (RETAIN 0 on live delivery), -10/-11 (an empty retained message
/// removes it and is not kept); and they survive a restart.
#[tokio::test]
async fn retained_messages() {
    let mut s = TestServer::start().await;
    let (mut publisher, _) = Raw::connect(&s, V311, "retainer", true).await;
    publisher.publish("r/one", b"first", QoS::AtLeastOnce, true, 1).await;
    publisher.publish("r/two", b"second", QoS::AtLeastOnce, true, 2).await;
    publisher.publish("r/two", b"", QoS::AtLeastOnce, true, 3).await;
    let (mut sub, _) = Raw::connect(&s, V311, "late", true).await;
    sub.subscribe(1, "r/#", QoS::AtLeastOnce).await;
    let retained = sub.next_acked().await;
    assert_eq!((retained.topic_name.as_str(), &retained.payload[..], retained.retain), ("r/one", &b"first"[..], true));
    sub.nothing_within(Duration::from_millis(300)).await;
    publisher.publish("r/one", b"live", QoS::AtLeastOnce, true, 4).await;
    let live = sub.next_acked().await;
    assert_eq!((&live.payload[..], live.retain), (&b"live"[..], false));
    publisher.disconnect().await;
    sub.disconnect().await;

    s.restart().await;
    let (mut sub, _) = Raw::connect(&s, V311, "after-restart", true).await;
    sub.subscribe(1, "r/+", QoS::AtMostOnce).await;
    let kept = sub.next_publish().await;
    assert_eq!((kept.topic_name.as_str(), &kept.payload[..], kept.retain), ("r/one", &b"live"[..], true));
    sub.nothing_within(Duration::from_millis(300)).await;
}

/// MQTT-3.1.2-8 (the will is published when the connection closes without
/// DISCONNECT), MQTT-3.1.2-10 (and discarded on DISCONNECT), MQTT-3.1.2-17 (with
/// its retain flag).
#[tokio::test]
async fn will_messages() {
    let s = TestServer::start().await;
    let (mut watcher, _) = Raw::connect(&s, V311, "watcher", true).await;
    watcher.subscribe(1, "status/#", QoS::AtLeastOnce).await;
    let will = |topic: &str| {
        let mut will = WillMessage::new(topic, b"gone".to_vec());
        will.qos = QoS::AtLeastOnce;
        will.retain = true;
        will
    };
    let (dropped, _) = Raw::connect_with(&s, V311, "dropper", true, |o| o.will = Some(will("status/dropper"))).await;
    drop(dropped); // the socket closes without DISCONNECT
    let got = watcher.next_acked().await;
    assert_eq!((got.topic_name.as_str(), &got.payload[..]), ("status/dropper", &b"gone"[..]));
    let (polite, _) = Raw::connect_with(&s, V311, "polite", true, |o| o.will = Some(will("status/polite"))).await;
    polite.disconnect().await;
    watcher.nothing_within(Duration::from_millis(500)).await;
    // The will was retained.
    let (mut late, _) = Raw::connect(&s, V311, "late-watcher", true).await;
    late.subscribe(1, "status/+", QoS::AtMostOnce).await;
    let kept = late.next_publish().await;
    assert_eq!((kept.topic_name.as_str(), kept.retain), ("status/dropper", true));
}

/// MQTT-3.1.4-2: a second connection with a client id in use closes the first
/// (MQTT 5 tells it 0x8E); a session with an expiry passes to the second, one
/// without ends with the first connection (MQTT-3.1.2-6); another user may not
/// take a session over at all.
#[tokio::test]
async fn a_second_connection_takes_the_session_over() {
    let s = TestServer::start().await;
    let lasting = |o: &mut ConnectOptions| o.properties.session_expiry_interval = Some(60);
    let (mut first, _) = Raw::connect_with(&s, V5, "same", false, lasting).await;
    first.subscribe(1, "takeover/t", QoS::AtLeastOnce).await;
    let (mut second, ack) = Raw::connect_with(&s, V5, "same", false, lasting).await;
    let (closed, seen) = first.closed_within(Duration::from_secs(5)).await;
    assert!(closed);
    assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x8E), "told why: {seen:?}");
    assert!(ack.session_present, "the session passed on");
    let (mut publisher, _) = Raw::connect(&s, V5, "taker-pub", true).await;
    publisher.publish("takeover/t", b"x", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(&second.next_acked().await.payload[..], b"x");

    // Expiry 0: the session ends with the connection taken over.
    let (mut brief, _) = Raw::connect(&s, V311, "brief", true).await;
    brief.subscribe(1, "takeover/b", QoS::AtLeastOnce).await;
    let (_again, present) = Raw::connect(&s, V311, "brief", false).await;
    assert!(!present, "no session survived");

    // Another user: refused, and the session's own connection goes on.
    s.ok(serde_json::json!({"operation": "add_role", "role": "other", "permission": {}})).await;
    s.ok(serde_json::json!({"operation": "add_user", "username": "other", "password": PASSWORD, "role": "other", "active": true}))
        .await;
    let (_intruder, ack) = Raw::connect_with(&s, V5, "same", false, |o| o.username = Some("other".into())).await;
    assert_eq!(u8::from(ack.reason_code), 0x87);
    publisher.publish("takeover/t", b"still", QoS::AtLeastOnce, false, 2).await;
    assert_eq!(&second.next_acked().await.payload[..], b"still");
}

/// A malformed packet and an oversized one close their own connection (MQTT 5
/// with 0x81 and 0x95 first, MQTT-4.13.1-1), and nothing else is affected.
#[tokio::test]
async fn bad_packets_close_only_their_connection() {
    let s = TestServer::start().await;
    let (mut bystander, _) = Raw::connect(&s, V5, "bystander", true).await;
    bystander.subscribe(1, "calm/#", QoS::AtLeastOnce).await;

    let (mut raw, _) = Raw::connect(&s, V5, "malformed", true).await;
    // A SUBSCRIBE with reserved flags 0 instead of 2 (MQTT-3.8.1-1).
    raw.send_bytes(&[0x80, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, b'a']).await;
    let (closed, seen) = raw.closed_within(Duration::from_secs(5)).await;
    assert!(closed);
    assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x81), "{seen:?}");

    let (mut raw, _) = Raw::connect(&s, V5, "oversized", true).await;
    // A PUBLISH announcing 16 MiB: refused from its header, before its body.
    raw.send_bytes(&[0x30, 0x80, 0x80, 0x80, 0x08]).await;
    let (closed, seen) = raw.closed_within(Duration::from_secs(5)).await;
    assert!(closed);
    assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x95), "{seen:?}");

    // Garbage before any CONNECT.
    let mut raw = Raw::open(&s, V5).await;
    raw.send_bytes(b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(raw.closed_within(Duration::from_secs(5)).await.0);

    let (mut publisher, _) = Raw::connect(&s, V5, "calm-pub", true).await;
    publisher.publish("calm/x", b"fine", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(&bystander.next_acked().await.payload[..], b"fine");
}

/// A connection that sends no CONNECT is closed after the connect timeout.
#[tokio::test]
async fn a_silent_connection_is_closed() {
    let s = TestServer::start().await;
    let mut raw = Raw::open(&s, V311).await;
    let (closed, _) = raw.closed_within(Duration::from_secs(20)).await;
    assert!(closed);
}

/// MQTT over TLS on `mqtt.network.securePort`, with the server's certificate.
#[tokio::test]
async fn mqtt_over_tls() {
    use rustls_pki_types::pem::PemObject as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let port = crate::support::free_port();
    let s = TestServer::start_with(&[("MQTT_NETWORK_SECUREPORT", &port.to_string())]).await;
    let mut roots = rustls::RootCertStore::empty();
    let pem = s.root().join("keys/certificate.pem");
    for certificate in rustls_pki_types::CertificateDer::pem_file_iter(&pem).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    let mut options = ConnectOptions::new("over-tls");
    options.username = Some(USER.into());
    options.password = Some(PASSWORD.as_bytes().to_vec());
    let mut out = bytes::BytesMut::new();
    mqtt5_protocol::packet::MqttPacket::encode(&ConnectPacket::new_v311(options), &mut out).unwrap();
    tls.write_all(&out).await.unwrap();
    let mut connack = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut connack)).await.unwrap().unwrap();
    assert_eq!(connack, [0x20, 0x02, 0x00, 0x00], "CONNACK, accepted");
}
