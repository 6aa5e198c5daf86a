//! Topics bound to records: REST writes reach MQTT subscribers, MQTT retained
//! publishes are records readable over REST, messages reach WebSocket
//! subscribers, and permissions decide who may publish and subscribe.

use std::time::Duration;

use futures_util::StreamExt;
use mqtt5_protocol::packet::subscribe::{SubscriptionOptions, TopicFilter};
use mqtt5_protocol::{Packet, QoS};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::client::{Raw, V5, V311};
use super::dogs;
use crate::support::{PASSWORD, USER};

fn json_of(payload: &[u8]) -> Value {
    serde_json::from_slice(payload).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(payload)))
}

/// A subscription to `Dog/1` receives the current record as a retained message,
/// then a REST write (RETAIN 0), then a delete as `null` (as Harper sends it).
#[tokio::test]
async fn a_rest_write_arrives_on_mqtt() {
    let s = dogs().await;
    s.rest_send(Method::PUT, "/Dog/1", Some(&json!({"name": "Rex", "age": 3})), &[]).await;
    for version in [V311, V5] {
        let (mut sub, _) = Raw::connect(&s, version, "dog-watcher", true).await;
        assert_eq!(sub.subscribe(1, "Dog/1", QoS::AtLeastOnce).await, vec![1]);
        let current = sub.next_acked().await;
        assert_eq!(current.topic_name, "Dog/1");
        assert!(current.retain, "the current record comes as a retained message");
        assert_eq!(json_of(&current.payload)["name"], "Rex");
        let (status, _, _) = s.rest_send(Method::PUT, "/Dog/1", Some(&json!({"name": "Rex", "age": 4})), &[]).await;
        assert_eq!(status, 204);
        let change = sub.next_acked().await;
        assert_eq!((change.topic_name.as_str(), change.retain, change.qos), ("Dog/1", false, QoS::AtLeastOnce));
        assert_eq!(json_of(&change.payload)["age"], 4);
        sub.disconnect().await;
    }
    let (mut sub, _) = Raw::connect(&s, V311, "dog-watcher-2", true).await;
    sub.subscribe(1, "Dog/#", QoS::AtMostOnce).await;
    assert_eq!(sub.next_publish().await.topic_name, "Dog/1");
    s.rest_send(Method::DELETE, "/Dog/1", None, &[]).await;
    let deleted = sub.next_publish().await;
    assert_eq!((deleted.topic_name.as_str(), &deleted.payload[..]), ("Dog/1", &b"null"[..]), "a delete is null");
}

/// A retained publish to `Dog/<id>` is a put readable over REST; an empty one
/// deletes the record; a publish without retain is a message to the record
/// (a WebSocket subscriber hears it; the record is unchanged).
#[tokio::test]
async fn mqtt_publishes_are_writes_and_messages() {
    let s = dogs().await;
    let (mut publisher, _) = Raw::connect(&s, V5, "dog-writer", true).await;
    let code = publisher.publish("Dog/7", br#"{"name":"Fido","age":2}"#, QoS::AtLeastOnce, true, 1).await;
    assert_eq!(code, 0);
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/7", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!((body["id"].clone(), body["name"].clone()), (json!("7"), json!("Fido")));

    let mut request = format!("ws://127.0.0.1:{}/Dog/7", s.http_port).into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", crate::support::basic(crate::support::USER, PASSWORD).parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let current = ws_json(&mut socket).await;
    assert_eq!(current["type"], "put");
    publisher.publish("Dog/7", br#"{"bark":true}"#, QoS::AtLeastOnce, false, 2).await;
    let message = ws_json(&mut socket).await;
    assert_eq!((message["type"].clone(), message["value"].clone()), (json!("message"), json!({"bark": true})));
    let (_, _, body) = s.rest_send(Method::GET, "/Dog/7", None, &[]).await;
    assert_eq!(body["name"], "Fido", "a message leaves the record as it was");

    assert_eq!(publisher.publish("Dog/7", b"", QoS::AtLeastOnce, true, 3).await, 0);
    let (status, _, _) = s.rest_send(Method::GET, "/Dog/7", None, &[]).await;
    assert_eq!(status, 404, "an empty retained publish deletes the record");
    // A retained payload that is not a JSON object (text, an array, JSON that does
    // not parse) is kept as content, as Harper keeps it: read back, and sent to
    // subscribers, as it came.
    let (mut watcher, _) = Raw::connect(&s, V5, "dog-8-watcher", true).await;
    watcher.subscribe(1, "Dog/8", QoS::AtMostOnce).await;
    for (packet, payload) in [(4, &b"offline"[..]), (5, b"[1,2]"), (6, b"{bad")] {
        assert_eq!(publisher.publish("Dog/8", payload, QoS::AtLeastOnce, true, packet).await, 0);
        let answer = s.client.get(s.rest("/Dog/8")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
        assert_eq!(answer.headers()["content-type"], "application/octet-stream");
        assert_eq!(answer.bytes().await.unwrap().as_ref(), payload);
        assert_eq!(&watcher.next_publish().await.payload[..], payload);
    }
    // A table's own name is not a topic to publish to.
    assert_eq!(publisher.publish("Dog", br#"{"name":"x"}"#, QoS::AtLeastOnce, true, 7).await, 0x99);
}

async fn ws_json(
    socket: &mut (impl StreamExt<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
        if let WsMessage::Text(text) = frame {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

/// A wildcard at the first level covers tables and plain topics alike.
#[tokio::test]
async fn first_level_wildcards_cover_records_and_plain_topics() {
    let s = dogs().await;
    s.rest_send(Method::PUT, "/Dog/a", Some(&json!({"name": "A"})), &[]).await;
    let (mut sub, _) = Raw::connect(&s, V5, "everything", true).await;
    sub.subscribe(1, "+/a", QoS::AtMostOnce).await;
    let current = sub.next_publish().await;
    assert_eq!((current.topic_name.as_str(), current.retain), ("Dog/a", true));
    let (mut publisher, _) = Raw::connect(&s, V5, "everything-pub", true).await;
    publisher.publish("plain/a", b"p", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(sub.next_publish().await.topic_name, "plain/a");
    s.rest_send(Method::PUT, "/Dog/b", Some(&json!({"name": "B"})), &[]).await;
    s.rest_send(Method::PUT, "/Dog/a", Some(&json!({"name": "A2"})), &[]).await;
    let change = sub.next_publish().await;
    assert_eq!(change.topic_name, "Dog/a", "Dog/b does not match '+/a'");
    assert_eq!(json_of(&change.payload)["name"], "A2");
}

/// No local on a record topic (MQTT-3.8.3-3): the changes a client's own
/// publishes make do not come back to its no-local subscription, while another
/// client's publish and a REST write do (the log records which connection made
/// each write).
#[tokio::test]
async fn no_local_leaves_out_a_clients_own_record_writes() {
    let s = dogs().await;
    let (mut me, _) = Raw::connect(&s, V5, "no-local-dog", true).await;
    let mut own = SubscriptionOptions::new(QoS::AtLeastOnce);
    own.no_local = true;
    me.subscribe_with(1, TopicFilter::with_options("Dog/+", own), None).await;
    me.publish("Dog/9", br#"{"name":"Mine"}"#, QoS::AtLeastOnce, true, 2).await;
    me.publish("Dog/9", br#"{"bark":1}"#, QoS::AtLeastOnce, false, 3).await;
    me.nothing_within(Duration::from_millis(300)).await;
    let (mut other, _) = Raw::connect(&s, V5, "no-local-other", true).await;
    other.publish("Dog/9", br#"{"name":"Theirs"}"#, QoS::AtLeastOnce, true, 1).await;
    let theirs = me.next_acked().await;
    assert_eq!(json_of(&theirs.payload)["name"], "Theirs");
    s.rest_send(Method::PUT, "/Dog/9", Some(&json!({"name": "Rest"})), &[]).await;
    assert_eq!(json_of(&me.next_acked().await.payload)["name"], "Rest");
    // Without no-local, its own writes come back.
    me.subscribe(4, "Dog/9", QoS::AtLeastOnce).await;
    assert_eq!(json_of(&me.next_acked().await.payload)["name"], "Rest", "the current record, retained");
    me.publish("Dog/9", br#"{"name":"Again"}"#, QoS::AtLeastOnce, true, 5).await;
    assert_eq!(json_of(&me.next_acked().await.payload)["name"], "Again");
    me.nothing_within(Duration::from_millis(300)).await;
}

/// A role that may not write the table gets PUBACK 0x87 (MQTT 5) and nothing is
/// written; one that may not read it gets SUBACK 0x87 (0x80 in 3.1.1).
#[tokio::test]
async fn permissions_decide_publish_and_subscribe() {
    let s = dogs().await;
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": {"dev": {"tables": {"Dog": {"read": true, "insert": false, "update": false, "delete": false}}}}})).await;
    s.ok(
        json!({"operation": "add_user", "username": "reader", "password": PASSWORD, "role": "reader", "active": true}),
    )
    .await;
    s.ok(json!({"operation": "add_role", "role": "none", "permission": {"dev": {"tables": {"Dog": {"read": false, "insert": false, "update": false, "delete": false}}}}})).await;
    s.ok(json!({"operation": "add_user", "username": "none", "password": PASSWORD, "role": "none", "active": true}))
        .await;

    let as_user =
        |user: &'static str| move |o: &mut mqtt5_protocol::types::ConnectOptions| o.username = Some(user.to_string());
    let (mut reader, ack) = Raw::connect_with(&s, V5, "reader", true, as_user("reader")).await;
    assert_eq!(u8::from(ack.reason_code), 0);
    assert_eq!(reader.publish("Dog/9", br#"{"name":"x"}"#, QoS::AtLeastOnce, true, 1).await, 0x87);
    assert_eq!(reader.subscribe(2, "Dog/9", QoS::AtMostOnce).await, vec![0]);
    let (status, _, _) = s.rest_send(Method::GET, "/Dog/9", None, &[]).await;
    assert_eq!(status, 404);

    let (mut none, _) = Raw::connect_with(&s, V5, "none", true, as_user("none")).await;
    assert_eq!(none.subscribe(1, "Dog/#", QoS::AtMostOnce).await, vec![0x87]);
    let (mut none3, _) = Raw::connect_with(&s, V311, "none3", true, as_user("none")).await;
    assert_eq!(none3.subscribe(1, "Dog/1", QoS::AtMostOnce).await, vec![0x80]);
}

/// Permissions are those of now, not of the connect: a role given a permission
/// lets a connection already open publish; a role that loses read ends its
/// MQTT subscription (DISCONNECT 0x87) and its WebSocket (close 3003) at the
/// next change; the connection of a user dropped or given a new password ends
/// at its next publish or subscribe.
#[tokio::test]
async fn permission_changes_reach_open_connections() {
    let s = dogs().await;
    let role = |read: bool, insert: bool| json!({"dev": {"tables": {"Dog": {"read": read, "insert": insert, "update": insert, "delete": false}}}});
    s.ok(json!({"operation": "add_role", "role": "changing", "permission": role(true, false)})).await;
    for user in ["changing", "leaving", "rekeyed"] {
        s.ok(json!({"operation": "add_user", "username": user, "password": PASSWORD, "role": "changing", "active": true}))
            .await;
    }
    let as_user =
        |user: &'static str| move |o: &mut mqtt5_protocol::types::ConnectOptions| o.username = Some(user.to_string());
    let (mut mqtt, _) = Raw::connect_with(&s, V5, "changing", true, as_user("changing")).await;
    assert_eq!(mqtt.publish("Dog/5", br#"{"name":"x"}"#, QoS::AtLeastOnce, true, 1).await, 0x87);
    s.ok(json!({"operation": "alter_role", "id": "changing", "permission": role(true, true)})).await;
    assert_eq!(mqtt.publish("Dog/5", br#"{"name":"y"}"#, QoS::AtLeastOnce, true, 2).await, 0, "now it may");
    assert_eq!(mqtt.subscribe(3, "Dog/5", QoS::AtMostOnce).await, vec![0]);
    assert_eq!(json_of(&mqtt.next_publish().await.payload)["name"], "y");

    let mut request = format!("ws://127.0.0.1:{}/Dog/5", s.http_port).into_client_request().unwrap();
    request.headers_mut().insert("authorization", crate::support::basic("changing", PASSWORD).parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(ws_json(&mut socket).await["value"]["name"], "y");

    s.ok(json!({"operation": "alter_role", "id": "changing", "permission": role(false, true)})).await;
    s.rest_send(Method::PUT, "/Dog/5", Some(&json!({"name": "secret"})), &[]).await;
    let (closed, seen) = mqtt.closed_within(Duration::from_secs(10)).await;
    assert!(closed, "{seen:?}");
    assert!(matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x87), "{seen:?}");
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap() {
            Some(Ok(WsMessage::Close(frame))) => break frame,
            Some(Ok(WsMessage::Text(text))) => panic!("a change arrived after read was withdrawn: {text}"),
            Some(Ok(_)) => continue,
            other => panic!("the socket ended without a close: {other:?}"),
        }
    };
    assert_eq!(close.map(|f| u16::from(f.code)), Some(3003));

    let (mut leaving, _) = Raw::connect_with(&s, V5, "leaving", true, as_user("leaving")).await;
    assert_eq!(leaving.subscribe(1, "plain/x", QoS::AtMostOnce).await, vec![0]);
    s.ok(json!({"operation": "drop_user", "username": "leaving"})).await;
    leaving.send(&leaving.publish_packet("plain/x", b"1", QoS::AtMostOnce, false, None)).await;
    let (closed, seen) = leaving.closed_within(Duration::from_secs(10)).await;
    assert!(closed && matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x87), "{seen:?}");

    // A new password ends the connections made with the old one, as it ends tokens.
    let (mut rekeyed, _) = Raw::connect_with(&s, V5, "rekeyed", true, as_user("rekeyed")).await;
    s.ok(json!({"operation": "alter_user", "username": "rekeyed", "password": "another-password"})).await;
    rekeyed.send(&rekeyed.publish_packet("plain/x", b"1", QoS::AtMostOnce, false, None)).await;
    let (closed, seen) = rekeyed.closed_within(Duration::from_secs(10)).await;
    assert!(closed && matches!(&seen[..], [Packet::Disconnect(d)] if u8::from(d.reason_code) == 0x87), "{seen:?}");
}

/// A subscriber that reads slowly receives every change in commit order, well
/// past the feed's queue (1,024 events): what did not fit is read back from the
/// log.
#[tokio::test]
async fn a_slow_subscriber_receives_every_change_in_order() {
    const CHANGES: usize = 3_000;
    let s = dogs().await;
    let (mut sub, _) = Raw::connect_with(&s, V5, "slowpoke", true, |o| o.properties.receive_maximum = Some(1)).await;
    sub.subscribe(1, "Dog/slow", QoS::AtLeastOnce).await;
    // Written in batches while the subscriber takes nothing.
    for chunk in 0..CHANGES / 500 {
        let operations: Vec<Value> =
            (0..500).map(|i| json!({"id": "slow", "name": format!("{}", chunk * 500 + i)})).collect();
        for record in operations {
            s.ok(json!({"operation": "upsert", "database": "dev", "table": "Dog", "records": [record]})).await;
        }
    }
    for expected in 0..CHANGES {
        let change = sub.next_acked().await;
        assert_eq!(json_of(&change.payload)["name"], json!(expected.to_string()), "change {expected} in order");
    }
    sub.nothing_within(Duration::from_millis(300)).await;
}

/// A burst of changes, far more than one turn of sending (256) and than the
/// feed's channel (64), reaches a subscriber whole and in order: one insert of
/// 2,000 records is one log entry whose changes the connection takes in turns.
#[tokio::test]
async fn a_burst_of_changes_arrives_whole() {
    const RECORDS: usize = 2_000;
    let s = dogs().await;
    let (mut sub, _) = Raw::connect(&s, V5, "burst", true).await;
    sub.subscribe(1, "Dog/#", QoS::AtMostOnce).await;
    let records: Vec<Value> = (0..RECORDS).map(|i| json!({"id": format!("b{i:05}"), "name": i.to_string()})).collect();
    s.ok(json!({"operation": "insert", "database": "dev", "table": "Dog", "records": records})).await;
    for expected in 0..RECORDS {
        let change = sub.next_publish().await;
        let name = json_of(&change.payload)["name"].clone();
        assert_eq!(name, json!(expected.to_string()), "change {expected} in order, none missing");
    }
    sub.nothing_within(Duration::from_millis(300)).await;
}

/// A shared subscription to records (`$share/<group>/Dog/#`): each change goes
/// to one member of the group, whichever way it was written.
#[tokio::test]
async fn shared_subscriptions_to_records() {
    let s = dogs().await;
    let (mut a, _) = Raw::connect(&s, V5, "dog-worker-a", true).await;
    let (mut b, _) = Raw::connect(&s, V5, "dog-worker-b", true).await;
    assert_eq!(a.subscribe(1, "$share/kennel/Dog/#", QoS::AtLeastOnce).await, vec![1]);
    assert_eq!(b.subscribe(1, "$share/kennel/Dog/#", QoS::AtLeastOnce).await, vec![1]);
    for i in 0..6 {
        s.rest_send(Method::PUT, &format!("/Dog/s{i}"), Some(&json!({"name": format!("n{i}")})), &[]).await;
    }
    let mut names = Vec::new();
    for _ in 0..3 {
        names.push(json_of(&a.next_acked().await.payload)["name"].as_str().unwrap().to_string());
        names.push(json_of(&b.next_acked().await.payload)["name"].as_str().unwrap().to_string());
    }
    a.nothing_within(Duration::from_millis(300)).await;
    b.nothing_within(Duration::from_millis(300)).await;
    names.sort();
    assert_eq!(names, (0..6).map(|i| format!("n{i}")).collect::<Vec<_>>(), "each change once");
    // The last member out closes the group's feeds; a member alone takes all.
    let mut unsubscribe = mqtt5_protocol::packet::unsubscribe::UnsubscribePacket::new(2);
    unsubscribe.filters.push("$share/kennel/Dog/#".into());
    a.send(&unsubscribe).await;
    assert!(matches!(a.recv().await, mqtt5_protocol::Packet::UnsubAck(_)));
    s.rest_send(Method::PUT, "/Dog/s9", Some(&json!({"name": "n9"})), &[]).await;
    assert_eq!(json_of(&b.next_acked().await.payload)["name"], "n9");
}

/// A record topic may carry a `?query` after the id, as Harper allows: the
/// record is the id's, and a subscription's messages come on the record's topic.
#[tokio::test]
async fn a_query_after_a_record_topic_is_no_part_of_the_id() {
    let s = dogs().await;
    s.rest_send(Method::PUT, "/Dog/1", Some(&json!({"name": "Rex", "age": 3})), &[]).await;
    let (mut sub, _) = Raw::connect(&s, V5, "query-watcher", true).await;
    assert_eq!(sub.subscribe(1, "Dog/1?select(name)", QoS::AtLeastOnce).await, vec![1]);
    let current = sub.next_acked().await;
    assert_eq!((current.topic_name.as_str(), json_of(&current.payload)["name"].clone()), ("Dog/1", json!("Rex")));
    let (mut publisher, _) = Raw::connect(&s, V5, "query-writer", true).await;
    let code = publisher.publish("Dog/1?x=1", br#"{"name":"Rex","age":4}"#, QoS::AtLeastOnce, true, 1).await;
    assert_eq!(code, 0);
    let change = sub.next_acked().await;
    assert_eq!((change.topic_name.as_str(), json_of(&change.payload)["age"].clone()), ("Dog/1", json!(4)));
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/", None, &[]).await;
    assert_eq!((status, body), (200, json!([{"id": "1", "name": "Rex", "age": 4}])));
}
