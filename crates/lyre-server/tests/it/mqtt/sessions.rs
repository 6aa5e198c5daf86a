//! Sessions: redelivery of unacknowledged QoS 1 messages, QoS 2 exactly once
//! across a dropped connection (both directions), durable sessions across a kill
//! -9 of the server, session expiry, and 10,000 connections held at once.

use std::time::Duration;

use mqtt5_protocol::packet::pubcomp::PubCompPacket;
use mqtt5_protocol::packet::pubrec::PubRecPacket;
use mqtt5_protocol::packet::pubrel::PubRelPacket;
use mqtt5_protocol::{Packet, QoS};
use reqwest::Method;
use serde_json::json;

use super::client::{Raw, V5, V311};
use super::{dogs, dogs_with};
use crate::support::TestServer;

/// MQTT-4.4.0-1: on reconnecting with a session, unacknowledged QoS 1 and 2
/// PUBLISH packets are sent again with their packet ids, DUP set (MQTT-3.3.1-1).
#[tokio::test]
async fn unacknowledged_qos1_is_sent_again_after_reconnecting() {
    let s = TestServer::start().await;
    for version in [V311, V5] {
        let configure = |o: &mut mqtt5_protocol::types::ConnectOptions| {
            o.properties.session_expiry_interval = Some(60);
        };
        let id = format!("redeliver-{version}");
        let (mut sub, ack) = Raw::connect_with(&s, version, &id, false, configure).await;
        assert!(!ack.session_present, "a new session");
        sub.subscribe(1, "jobs/#", QoS::AtLeastOnce).await;
        let (mut publisher, _) = Raw::connect(&s, version, "jobs-pub", true).await;
        publisher.publish("jobs/1", b"work", QoS::AtLeastOnce, false, 1).await;
        let first = sub.next_publish().await; // not acknowledged
        assert!(!first.dup);
        drop(sub);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (mut sub, ack) = Raw::connect_with(&s, version, &id, false, configure).await;
        assert!(ack.session_present, "MQTT-3.2.2-2: session present");
        let again = sub.next_publish().await;
        assert_eq!((again.packet_id, again.dup, &again.payload[..]), (first.packet_id, true, &b"work"[..]));
        sub.send(&mqtt5_protocol::packet::puback::PubAckPacket::new(again.packet_id.unwrap())).await;
        sub.nothing_within(Duration::from_millis(300)).await;
        // Acknowledged: not sent a third time.
        drop(sub);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (mut sub, _) = Raw::connect_with(&s, version, &id, false, configure).await;
        sub.nothing_within(Duration::from_millis(500)).await;
        // Clean start discards the session (MQTT-3.1.2-4).
        drop(sub);
        let (_sub, ack) = Raw::connect_with(&s, version, &id, true, configure).await;
        assert!(!ack.session_present);
        publisher.disconnect().await;
    }
}

/// QoS 2 exactly once across a dropped connection: a PUBLISH sent again before
/// its PUBREL is acknowledged but not delivered twice (MQTT-4.3.3-9/-10, method
/// B); a subscriber that received PUBREL and dropped gets PUBREL again, not the
/// message (MQTT-4.4.0-1).
#[tokio::test]
async fn qos2_is_exactly_once_across_dropped_connections() {
    let s = TestServer::start().await;
    let (mut sub, _) = Raw::connect(&s, V311, "qos2-sub", false).await;
    sub.subscribe(1, "once", QoS::ExactlyOnce).await;

    // The publisher drops after PUBREC and sends the PUBLISH again.
    let (mut publisher, _) = Raw::connect(&s, V311, "qos2-pub", false).await;
    let packet = publisher.publish_packet("once", b"only", QoS::ExactlyOnce, false, Some(42));
    publisher.send(&packet).await;
    assert!(matches!(publisher.recv().await, Packet::PubRec(rec) if rec.packet_id == 42));
    drop(publisher);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut publisher, present) = Raw::connect(&s, V311, "qos2-pub", false).await;
    assert!(present);
    let mut again = packet.clone();
    again.dup = true;
    publisher.send(&again).await;
    assert!(matches!(publisher.recv().await, Packet::PubRec(rec) if rec.packet_id == 42));
    publisher.send(&PubRelPacket::new(42)).await;
    assert!(matches!(publisher.recv().await, Packet::PubComp(comp) if comp.packet_id == 42));

    // The subscriber takes it, answers PUBREC, drops after PUBREL.
    let got = sub.next_publish().await;
    let id = got.packet_id.unwrap();
    sub.send(&PubRecPacket::new(id)).await;
    assert!(matches!(sub.recv().await, Packet::PubRel(rel) if rel.packet_id == id));
    drop(sub);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut sub, present) = Raw::connect(&s, V311, "qos2-sub", false).await;
    assert!(present);
    match sub.recv().await {
        Packet::PubRel(rel) => assert_eq!(rel.packet_id, id, "PUBREL again, not the message"),
        other => panic!("expected PUBREL, got {other:?}"),
    }
    sub.send(&PubCompPacket::new(id)).await;
    sub.nothing_within(Duration::from_millis(500)).await;
}

/// A durable session receives the record changes it missed while away, also
/// after the server was killed (-9) and started again.
#[tokio::test]
async fn a_durable_session_receives_what_it_missed_across_a_kill() {
    let mut s = dogs_with(&[("STORAGE_WRITEASYNC", "false")]).await;
    s.rest_send(Method::PUT, "/Dog/1", Some(&json!({"name": "one"})), &[]).await;
    let (mut sub, _) = Raw::connect(&s, V311, "durable", false).await;
    sub.subscribe(1, "Dog/#", QoS::AtLeastOnce).await;
    let current = sub.next_acked().await;
    assert_eq!(current.topic_name, "Dog/1");
    sub.disconnect().await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Missed while away; then the server dies.
    s.rest_send(Method::PUT, "/Dog/2", Some(&json!({"name": "two"})), &[]).await;
    s.rest_send(Method::PUT, "/Dog/1", Some(&json!({"name": "one again"})), &[]).await;
    s.stop("-KILL");
    s.start_again().await;
    s.rest_send(Method::PUT, "/Dog/3", Some(&json!({"name": "three"})), &[]).await;

    let (mut sub, present) = Raw::connect(&s, V311, "durable", false).await;
    assert!(present, "the session survived the crash");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let publish = sub.next_acked().await;
        let body: serde_json::Value = serde_json::from_slice(&publish.payload).unwrap();
        seen.push((publish.topic_name, body["name"].as_str().unwrap().to_string()));
    }
    assert_eq!(
        seen,
        vec![
            ("Dog/2".to_string(), "two".to_string()),
            ("Dog/1".to_string(), "one again".to_string()),
            ("Dog/3".to_string(), "three".to_string())
        ],
        "every missed change, in commit order, and nothing twice"
    );
    sub.nothing_within(Duration::from_millis(500)).await;
}

/// MQTT 5 session expiry: a session with expiry 1 s is gone 2 s after its
/// connection closed (MQTT-3.1.2-23); one with expiry 0 ends with its connection.
#[tokio::test]
async fn sessions_expire() {
    let s = TestServer::start().await;
    let expiring = |o: &mut mqtt5_protocol::types::ConnectOptions| o.properties.session_expiry_interval = Some(1);
    let (raw, _) = Raw::connect_with(&s, V5, "short", false, expiring).await;
    raw.disconnect().await;
    let (raw, ack) = Raw::connect_with(&s, V5, "short", false, expiring).await;
    assert!(ack.session_present, "within its expiry");
    raw.disconnect().await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (raw, ack) = Raw::connect_with(&s, V5, "short", false, expiring).await;
    assert!(!ack.session_present, "expired");
    raw.disconnect().await;
    let (raw, _) = Raw::connect(&s, V5, "zero", false).await;
    raw.disconnect().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_raw, ack) = Raw::connect_with(&s, V5, "zero", false, |_| {}).await;
    assert!(!ack.session_present, "expiry 0: the session ended with the connection");
}

/// 10,000 MQTT connections held open at once; each still answers.
#[tokio::test]
async fn ten_thousand_connections() {
    const CONNECTIONS: usize = 10_000;
    // Both processes need a file each per connection, and more.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let wanted = (CONNECTIONS as u64 * 2 + 1_000).min(limit.maximum.unwrap_or(u64::MAX));
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit { current: Some(wanted), maximum: limit.maximum },
    )
    .expect("raise the open-file limit");
    assert!(wanted >= CONNECTIONS as u64 + 500, "the machine allows {wanted} open files");
    let s = dogs().await;
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for chunk in 0..CONNECTIONS / 500 {
        let connecting = (0..500).map(|i| {
            let id = format!("many-{}", chunk * 500 + i);
            let s = &s;
            async move { Raw::connect(s, V311, &id, true).await.0 }
        });
        clients.extend(futures_util::future::join_all(connecting).await);
    }
    assert_eq!(clients.len(), CONNECTIONS);
    // Every one of them is live: each answers a ping.
    for chunk in clients.chunks_mut(500) {
        let pings = chunk.iter_mut().map(|client| async move {
            client.send_bytes(&[0xC0, 0x00]).await;
            matches!(client.recv().await, Packet::PingResp)
        });
        assert!(futures_util::future::join_all(pings).await.into_iter().all(|answered| answered));
    }
    let (mut last, _) = Raw::connect(&s, V311, "many-last", true).await;
    last.subscribe(1, "many", QoS::AtMostOnce).await;
    let (mut publisher, _) = Raw::connect(&s, V311, "many-pub", true).await;
    publisher.publish("many", b"all there", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(&last.next_publish().await.payload[..], b"all there");
}

/// QoS 1 and 2 messages to plain topics, published while a durable session is
/// away, are stored before their PUBACK and delivered after the server was killed
/// (-9) and started again; once delivered they are not delivered again. (A QoS 0
/// one is not stored.)
#[tokio::test]
async fn messages_queued_for_a_session_away_survive_a_kill() {
    let mut s = TestServer::start_with(&[("STORAGE_WRITEASYNC", "false")]).await;
    let mut publisher = away_and_a_publisher(&s, ("away", "news/#", QoS::ExactlyOnce), "newsroom").await;
    assert_eq!(publisher.publish("news/1", b"first", QoS::AtLeastOnce, false, 1).await, 0);
    assert_eq!(publisher.publish("news/2", b"second", QoS::ExactlyOnce, false, 2).await, 0);
    publisher.publish("news/3", b"not kept", QoS::AtMostOnce, false, 0).await;
    publisher.send_bytes(&[0xC0, 0x00]).await;
    assert!(matches!(publisher.recv().await, Packet::PingResp), "the QoS 0 publish was read");
    s.stop("-KILL");
    s.start_again().await;

    let (mut sub, present) = Raw::connect(&s, V311, "away", false).await;
    assert!(present);
    let first = sub.next_acked().await;
    assert_eq!((first.topic_name.as_str(), &first.payload[..], first.qos), ("news/1", &b"first"[..], QoS::AtLeastOnce));
    let second = sub.next_acked().await;
    assert_eq!((&second.payload[..], second.qos), (&b"second"[..], QoS::ExactlyOnce));
    sub.nothing_within(Duration::from_millis(500)).await;
    sub.disconnect().await;
    s.restart().await;
    let (mut sub, present) = Raw::connect(&s, V311, "away", false).await;
    assert!(present);
    sub.nothing_within(Duration::from_millis(500)).await;
}

/// On a server's first start the stored queue's table is created with no
/// `client` attribute; messages queued and then delivered in that same run are
/// still forgotten once delivered, so a restart does not deliver them again (the
/// queue was once searched through the handle opened before the attribute
/// existed, refused, and kept forever).
#[tokio::test]
async fn messages_queued_and_delivered_in_the_first_run_are_not_delivered_again() {
    let mut s = TestServer::start_with(&[("STORAGE_WRITEASYNC", "false")]).await;
    let mut publisher = away_and_a_publisher(&s, ("first-run", "alerts/#", QoS::AtLeastOnce), "alerter").await;
    assert_eq!(publisher.publish("alerts/1", b"one", QoS::AtLeastOnce, false, 1).await, 0);
    assert_eq!(publisher.publish("alerts/2", b"two", QoS::AtLeastOnce, false, 2).await, 0);
    assert_eq!(stored_queue_len(&s).await, 2, "both stored while the session is away");

    let (mut sub, present) = Raw::connect(&s, V311, "first-run", false).await;
    assert!(present);
    assert_eq!(&sub.next_acked().await.payload[..], b"one");
    assert_eq!(&sub.next_acked().await.payload[..], b"two");
    sub.disconnect().await;
    assert_eq!(stored_queue_len(&s).await, 0, "delivered, so no longer stored");

    s.restart().await;
    let (mut sub, present) = Raw::connect(&s, V311, "first-run", false).await;
    assert!(present);
    sub.nothing_within(Duration::from_millis(500)).await;
}

/// A durable session `client` subscribed to `filter` at `qos`, then gone away; and
/// a connected client `publisher` to publish to it.
async fn away_and_a_publisher(s: &TestServer, (client, filter, qos): (&str, &str, QoS), publisher: &str) -> Raw {
    let (mut sub, _) = Raw::connect(s, V311, client, false).await;
    sub.subscribe(1, filter, qos).await;
    sub.disconnect().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    Raw::connect(s, V311, publisher, true).await.0
}

/// How many messages the broker keeps queued for sessions away.
async fn stored_queue_len(s: &TestServer) -> usize {
    let (status, rows) = s.op(json!({"operation": "sql", "sql": "SELECT seq FROM system.hdb_mqtt_queued"})).await;
    assert_eq!(status, 200, "{rows}");
    rows.as_array().map_or(0, Vec::len)
}
