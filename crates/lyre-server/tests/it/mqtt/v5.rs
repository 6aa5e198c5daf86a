//! MQTT 5's features, each against its normative statements; MQTT over
//! WebSocket; and library clients (`rumqttc`, both versions) and Debian's
//! `mosquitto_pub`/`mosquitto_sub`.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mqtt5_protocol::packet::subscribe::{RetainHandling, SubscriptionOptions, TopicFilter};
use mqtt5_protocol::{Packet, PropertyId, PropertyValue, QoS};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::client::{Raw, V5};
use crate::support::{PASSWORD, TestServer, USER};

fn options(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions::new(qos)
}

/// MQTT-3.2.2-16 (an assigned client identifier is returned), and CONNACK's
/// announcements: receive maximum, maximum packet size, topic alias maximum,
/// the server keep-alive where the client asked for none (MQTT-3.2.2-21).
#[tokio::test]
async fn connack_announces_what_the_server_does() {
    let s = TestServer::start().await;
    let (_raw, ack) = Raw::connect_with(&s, V5, "", true, |o| o.keep_alive = Duration::ZERO).await;
    let assigned = ack.properties.get(PropertyId::AssignedClientIdentifier);
    assert!(matches!(assigned, Some(PropertyValue::Utf8String(id)) if !id.is_empty()), "{ack:?}");
    assert!(ack.receive_maximum().is_some_and(|n| n > 0));
    assert!(ack.maximum_packet_size().is_some_and(|n| n >= 1 << 20));
    assert!(ack.topic_alias_maximum().is_some_and(|n| n > 0));
    assert!(ack.properties.get_server_keep_alive().is_some_and(|k| k > 0));
}

/// Topic aliases from the client (MQTT-3.3.2-12: an alias set with a topic stands
/// for it later), an unknown or out-of-range alias is a protocol error
/// (MQTT-3.3.2-9/-10: DISCONNECT 0x94 or 0x82); to the client, aliases within
/// its topic alias maximum (MQTT-3.3.2-11).
#[tokio::test]
async fn topic_aliases_both_ways() {
    let s = TestServer::start().await;
    let (mut sub, _) =
        Raw::connect_with(&s, V5, "alias-sub", true, |o| o.properties.topic_alias_maximum = Some(2)).await;
    sub.subscribe(1, "alias/#", QoS::AtMostOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V5, "alias-pub", true).await;
    let mut first = publisher.publish_packet("alias/long/topic", b"1", QoS::AtLeastOnce, false, Some(1));
    first.properties.set_topic_alias(3);
    publisher.send(&first).await;
    assert!(matches!(publisher.recv().await, Packet::PubAck(_)));
    let mut second = publisher.publish_packet("", b"2", QoS::AtLeastOnce, false, Some(2));
    second.properties.set_topic_alias(3);
    publisher.send(&second).await;
    assert!(matches!(publisher.recv().await, Packet::PubAck(ack) if u8::from(ack.reason_code) == 0));

    let one = sub.next_publish().await;
    assert_eq!((one.topic_name.as_str(), one.properties.get_topic_alias()), ("alias/long/topic", Some(1)));
    let two = sub.next_publish().await;
    assert_eq!((two.topic_name.as_str(), two.properties.get_topic_alias(), &two.payload[..]), ("", Some(1), &b"2"[..]));

    // Above the broker's topic alias maximum: 0x94; within it but never set: 0x82.
    for (alias, reason) in [(1_000, 0x94), (9, 0x82)] {
        let (mut publisher, _) = Raw::connect(&s, V5, "alias-bad", true).await;
        let mut unknown = publisher.publish_packet("", b"3", QoS::AtMostOnce, false, None);
        unknown.properties.set_topic_alias(alias);
        publisher.send(&unknown).await;
        let (closed, seen) = publisher.closed_within(Duration::from_secs(5)).await;
        assert!(closed);
        assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == reason), "{seen:?}");
    }
}

/// Subscription identifiers (MQTT-3.8.2-? / 3.3.4-3: each matching
/// subscription's identifier is sent), no local (MQTT-3.8.3-3), retain as
/// published (MQTT-3.3.1-12/-13), retain handling 1 and 2 (MQTT-3.3.1-9/-10).
#[tokio::test]
async fn subscription_options() {
    let s = TestServer::start().await;
    let (mut me, _) = Raw::connect(&s, V5, "opts", true).await;
    me.publish("opt/kept", b"retained", QoS::AtLeastOnce, true, 1).await;
    // Retain handling 2: no retained message at subscribe.
    let mut never = options(QoS::AtLeastOnce);
    never.retain_handling = RetainHandling::DoNotSend;
    never.retain_as_published = true;
    me.subscribe_with(2, TopicFilter::with_options("opt/#", never), Some(7)).await;
    let mut own = options(QoS::AtLeastOnce);
    own.no_local = true;
    me.subscribe_with(3, TopicFilter::with_options("opt/+", own), Some(8)).await;
    // Retain handling 0 (the default): the retained message, with its identifier.
    let retained = me.next_acked().await;
    assert_eq!((&retained.payload[..], retained.retain), (&b"retained"[..], true));
    assert_eq!(retained.properties.subscription_identifiers(), vec![8]);
    me.nothing_within(Duration::from_millis(300)).await;
    // My own publish arrives once (through opt/#, not the no-local opt/+), with
    // identifier 7 only, and its retain flag kept.
    me.publish("opt/kept", b"again", QoS::AtLeastOnce, true, 4).await;
    let got = me.next_acked().await;
    assert_eq!((got.retain, got.properties.subscription_identifiers()), (true, vec![7]));
    me.nothing_within(Duration::from_millis(300)).await;
    // Another client's publish matches both: one copy, both identifiers.
    let (mut other, _) = Raw::connect(&s, V5, "opts-other", true).await;
    other.publish("opt/x", b"both", QoS::AtLeastOnce, false, 1).await;
    let mut ids = me.next_acked().await.properties.subscription_identifiers();
    ids.sort();
    assert_eq!(ids, vec![7, 8]);
    // Retain handling 1: the retained message only for a new subscription.
    let mut if_new = options(QoS::AtMostOnce);
    if_new.retain_handling = RetainHandling::SendAtSubscribeIfNew;
    let (mut fresh, _) = Raw::connect(&s, V5, "opts-fresh", true).await;
    fresh.subscribe_with(1, TopicFilter::with_options("opt/kept", if_new), None).await;
    assert_eq!(&fresh.next_publish().await.payload[..], b"again");
    fresh.subscribe_with(2, TopicFilter::with_options("opt/kept", if_new), None).await;
    fresh.nothing_within(Duration::from_millis(300)).await;
}

/// Shared subscriptions (MQTT-4.8.2): each message to one member of the group,
/// in turn; no retained messages at subscribe; no local is a protocol error.
#[tokio::test]
async fn shared_subscriptions() {
    let s = TestServer::start().await;
    let (mut a, _) = Raw::connect(&s, V5, "worker-a", true).await;
    let (mut b, _) = Raw::connect(&s, V5, "worker-b", true).await;
    a.subscribe(1, "$share/workers/tasks/+", QoS::AtLeastOnce).await;
    b.subscribe(1, "$share/workers/tasks/+", QoS::AtLeastOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V5, "boss", true).await;
    for i in 0..4u16 {
        publisher.publish("tasks/t", format!("{i}").as_bytes(), QoS::AtLeastOnce, false, i + 1).await;
    }
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        got_a.push(String::from_utf8(a.next_acked().await.payload.to_vec()).unwrap());
        got_b.push(String::from_utf8(b.next_acked().await.payload.to_vec()).unwrap());
    }
    a.nothing_within(Duration::from_millis(200)).await;
    b.nothing_within(Duration::from_millis(200)).await;
    let mut all: Vec<String> = got_a.into_iter().chain(got_b).collect();
    all.sort();
    assert_eq!(all, vec!["0", "1", "2", "3"], "each once");
    let mut bad = options(QoS::AtMostOnce);
    bad.no_local = true;
    let (mut c, _) = Raw::connect(&s, V5, "worker-c", true).await;
    let mut packet = mqtt5_protocol::packet::subscribe::SubscribePacket::new(1);
    packet.filters.push(TopicFilter::with_options("$share/g/x", bad));
    c.send(&packet).await;
    assert!(c.closed_within(Duration::from_secs(5)).await.0);
}

/// Message expiry (MQTT-3.3.2-5: an expired message is not sent; -6: the
/// interval sent is what remains), and the properties a publisher sets reach the
/// subscriber unchanged (MQTT-3.3.2-17/-18/-20, MQTT-3.3.2-4).
#[tokio::test]
async fn message_expiry_and_properties_pass_through() {
    let s = TestServer::start().await;
    let (mut publisher, _) = Raw::connect(&s, V5, "props-pub", true).await;
    let mut short = publisher.publish_packet("exp/short", b"soon gone", QoS::AtLeastOnce, true, Some(1));
    short.properties.set_message_expiry_interval(1);
    publisher.send(&short).await;
    publisher.recv().await;
    let mut long = publisher.publish_packet("exp/long", b"stays", QoS::AtLeastOnce, true, Some(2));
    long.properties.set_message_expiry_interval(100);
    long.properties.set_content_type("text/plain".into());
    long.properties.set_response_topic("replies/1".into());
    long.properties.set_correlation_data(bytes::Bytes::from_static(b"corr"));
    long.properties.add_user_property("k".into(), "v".into());
    long.properties.set_payload_format_indicator(true);
    publisher.send(&long).await;
    publisher.recv().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (mut sub, _) = Raw::connect(&s, V5, "props-sub", true).await;
    sub.subscribe(1, "exp/#", QoS::AtMostOnce).await;
    let got = sub.next_publish().await;
    assert_eq!(got.topic_name, "exp/long", "the expired retained message is not sent");
    let left = got.properties.get_message_expiry_interval().unwrap();
    assert!((90..=100).contains(&left), "{left}");
    assert_eq!(got.properties.get_content_type().as_deref(), Some("text/plain"));
    assert!(
        matches!(got.properties.get(PropertyId::ResponseTopic), Some(PropertyValue::Utf8String(t)) if t == "replies/1")
    );
    assert!(
        matches!(got.properties.get(PropertyId::CorrelationData), Some(PropertyValue::BinaryData(d)) if &d[..] == b"corr")
    );
    assert_eq!(got.properties.get_user_property_value("k"), Some("v"));
    sub.nothing_within(Duration::from_millis(300)).await;
}

/// Flow control: no more unacknowledged QoS 1 messages than the client's receive
/// maximum (MQTT-3.3.4-7), the rest follow as acknowledgements come; a packet
/// larger than the client's maximum packet size is not sent (MQTT-3.1.2-25).
#[tokio::test]
async fn receive_maximum_and_maximum_packet_size() {
    let s = TestServer::start().await;
    let (mut sub, _) = Raw::connect_with(&s, V5, "slow", true, |o| {
        o.properties.receive_maximum = Some(2);
        o.properties.maximum_packet_size = Some(200);
    })
    .await;
    sub.subscribe(1, "flow/#", QoS::AtLeastOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V5, "fast", true).await;
    publisher.publish("flow/big", &[b'x'; 500], QoS::AtLeastOnce, false, 1).await;
    for i in 0..5u16 {
        publisher.publish("flow/n", format!("{i}").as_bytes(), QoS::AtLeastOnce, false, i + 2).await;
    }
    let first = sub.next_publish().await;
    let second = sub.next_publish().await;
    assert_eq!((&first.payload[..], &second.payload[..]), (&b"0"[..], &b"1"[..]), "the 500-byte one was dropped");
    sub.nothing_within(Duration::from_millis(300)).await;
    for publish in [first, second] {
        sub.send(&mqtt5_protocol::packet::puback::PubAckPacket::new(publish.packet_id.unwrap())).await;
    }
    let mut rest = Vec::new();
    for _ in 0..3 {
        rest.push(String::from_utf8(sub.next_acked().await.payload.to_vec()).unwrap());
    }
    assert_eq!(rest, vec!["2", "3", "4"]);
}

/// A will with a delay is published after it (MQTT-3.1.3-9), and not at all when
/// the client comes back first.
#[tokio::test]
async fn will_delay() {
    let s = TestServer::start().await;
    let (mut watcher, _) = Raw::connect(&s, V5, "delay-watcher", true).await;
    watcher.subscribe(1, "wills/#", QoS::AtMostOnce).await;
    let with_will = |o: &mut mqtt5_protocol::types::ConnectOptions| {
        let mut will = mqtt5_protocol::types::WillMessage::new("wills/delayed", b"late".to_vec());
        will.properties.will_delay_interval = Some(1);
        o.will = Some(will);
        o.properties.session_expiry_interval = Some(60);
    };
    let (raw, _) = Raw::connect_with(&s, V5, "delayed", false, with_will).await;
    drop(raw);
    watcher.nothing_within(Duration::from_millis(600)).await;
    assert_eq!(&watcher.next_publish().await.payload[..], b"late");
    let (raw, _) = Raw::connect_with(&s, V5, "delayed", false, with_will).await;
    drop(raw);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_back, _) = Raw::connect_with(&s, V5, "delayed", false, with_will).await;
    watcher.nothing_within(Duration::from_millis(1_500)).await;
}

/// MQTT over WebSocket on the REST port (subprotocol `mqtt`): the same broker.
#[tokio::test]
async fn mqtt_over_websocket() {
    let s = TestServer::start().await;
    let mut request = format!("ws://127.0.0.1:{}/mqtt", s.http_port).into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", "mqtt".parse().unwrap());
    let (mut socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers().get("sec-websocket-protocol").unwrap(), "mqtt");
    let mut options = mqtt5_protocol::types::ConnectOptions::new("over-ws");
    options.username = Some(USER.into());
    options.password = Some(PASSWORD.as_bytes().to_vec());
    let frame = |packet: &dyn Fn(&mut bytes::BytesMut)| {
        let mut out = bytes::BytesMut::new();
        packet(&mut out);
        WsMessage::binary(out.to_vec())
    };
    use mqtt5_protocol::packet::MqttPacket;
    socket
        .send(frame(&|out| mqtt5_protocol::packet::connect::ConnectPacket::new(options.clone()).encode(out).unwrap()))
        .await
        .unwrap();
    let mut sub = mqtt5_protocol::packet::subscribe::SubscribePacket::new(1);
    sub.filters.push(TopicFilter::new("ws/topic", QoS::AtMostOnce));
    socket.send(frame(&|out| sub.encode(out).unwrap())).await.unwrap();
    let mut received = bytes::BytesMut::new();
    let (mut publisher, _) = Raw::connect(&s, V5, "ws-pub", true).await;
    let mut published = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next()).await.expect("frames in time").unwrap().unwrap();
        if let WsMessage::Binary(bytes) = message {
            received.extend_from_slice(&bytes);
        }
        // CONNACK (0x20 …), SUBACK (0x90 …), then the PUBLISH (0x30 …).
        if !published && received.windows(1).any(|w| w[0] == 0x90) {
            publisher.publish("ws/topic", b"hello ws", QoS::AtLeastOnce, false, 1).await;
            published = true;
        }
        if received.windows(8).any(|w| w == b"hello ws") {
            break;
        }
    }
    assert_eq!(received[0], 0x20, "CONNACK first");
    // The client closes the WebSocket: the server answers the close (RFC 6455
    // 5.5.1) rather than dropping the connection.
    socket.close(None).await.unwrap();
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await.expect("the close answered in time") {
            Some(Ok(WsMessage::Close(_))) => break,
            Some(Ok(_)) => continue,
            other => panic!("the server dropped the connection instead of closing: {other:?}"),
        }
    }
}

/// `rumqttc`, a library client, in both versions: connect, subscribe, publish,
/// receive.
#[tokio::test]
async fn rumqttc_clients_of_both_versions() {
    let s = TestServer::start().await;
    let mut options = rumqttc::MqttOptions::new("rumqttc-311", "127.0.0.1", s.mqtt_port);
    options.set_credentials(USER, PASSWORD);
    let (client, mut events) = rumqttc::AsyncClient::new(options, 10);
    client.subscribe("lib/311", rumqttc::QoS::AtLeastOnce).await.unwrap();
    client.publish("lib/311", rumqttc::QoS::AtLeastOnce, false, "from 3.1.1").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, events.poll()).await.expect("in time").expect("no error") {
            rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) => {
                assert_eq!((p.topic.as_str(), &p.payload[..]), ("lib/311", &b"from 3.1.1"[..]));
                break;
            }
            _ => continue,
        }
    }

    let mut options = rumqttc::v5::MqttOptions::new("rumqttc-5", "127.0.0.1", s.mqtt_port);
    options.set_credentials(USER, PASSWORD);
    let (client, mut events) = rumqttc::v5::AsyncClient::new(options, 10);
    client.subscribe("lib/5", rumqttc::v5::mqttbytes::QoS::ExactlyOnce).await.unwrap();
    client.publish("lib/5", rumqttc::v5::mqttbytes::QoS::ExactlyOnce, false, "from 5").await.unwrap();
    loop {
        match tokio::time::timeout_at(deadline, events.poll()).await.expect("in time").expect("no error") {
            rumqttc::v5::Event::Incoming(rumqttc::v5::mqttbytes::v5::Packet::Publish(p)) => {
                assert_eq!((&p.topic[..], &p.payload[..]), (&b"lib/5"[..], &b"from 5"[..]));
                break;
            }
            _ => continue,
        }
    }
}

/// Debian's `mosquitto_sub` and `mosquitto_pub` against the broker, both
/// versions (`.ci/test` installs them).
#[tokio::test]
async fn mosquitto_clients() {
    assert!(
        std::process::Command::new("mosquitto_sub").arg("--help").output().is_ok(),
        "mosquitto_sub is not installed: the README's test command (.ci/test) installs mosquitto-clients"
    );
    let s = TestServer::start().await;
    let port = s.mqtt_port.to_string();
    for version in ["mqttv311", "mqttv5"] {
        let sub = std::process::Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &port, "-u", USER, "-P", PASSWORD, "-V", version])
            .args(["-t", "mosq/#", "-C", "1", "-W", "10", "-v"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = std::process::Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &port, "-u", USER, "-P", PASSWORD, "-V", version])
            .args(["-t", "mosq/x", "-m", "hi from mosquitto", "-q", "1"])
            .status()
            .unwrap();
        assert!(status.success());
        let output = tokio::task::spawn_blocking(move || sub.wait_with_output()).await.unwrap().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "mosq/x hi from mosquitto");
    }
}

/// MQTT-3.3.4-8: a client with more QoS 2 publishes unreleased than the receive
/// maximum the server announced is disconnected with 0x93.
#[tokio::test]
async fn the_servers_receive_maximum_is_enforced() {
    let s = TestServer::start().await;
    let (mut raw, ack) = Raw::connect(&s, V5, "flood", true).await;
    let _ = ack;
    let (_, connack) = Raw::connect_with(&s, V5, "flood-probe", true, |_| {}).await;
    let maximum = connack.receive_maximum().expect("announced");
    for id in 1..=maximum {
        let packet = raw.publish_packet("flood/x", b"x", QoS::ExactlyOnce, false, Some(id));
        raw.send(&packet).await;
    }
    // Every one answered with PUBREC, none released.
    for _ in 0..maximum {
        assert!(matches!(raw.recv().await, Packet::PubRec(_)));
    }
    let one_more = raw.publish_packet("flood/x", b"x", QoS::ExactlyOnce, false, Some(maximum + 1));
    raw.send(&one_more).await;
    let (closed, seen) = raw.closed_within(Duration::from_secs(5)).await;
    assert!(closed);
    assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x93), "{seen:?}");
}
