//! The change feed: a subscription receives the current state, then every change it
//! covers in commit order, and nothing it does not cover; a subscriber that does not
//! read keeps a bounded queue and is served what it missed from the log; history
//! from a time or the last few changes; messages; a dropped table ends the feed with
//! the reason; one that stays behind too long is told why it was disconnected.

use std::sync::Arc;
use std::time::Duration;

use lyre_core::catalog::TableSpec;
use lyre_core::services::{
    Event, EventKind, EventValue, FeedEnd, FeedOptions, Position, Start, SubscribeRequest, Subscription,
};
use lyre_core::{Context, Engine, KeyScope, ServiceOptions, Services, Table, Value};

mod common;
use common::{options, record};

struct Fixture {
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
    services: Arc<Services>,
    table: Table,
    ctx: Context,
}

async fn fixture(feed: FeedOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let ctx = Context::system();
    engine.create_table(&ctx, "dev", TableSpec::dynamic("dog", "id")).await.unwrap();
    let services = Services::start(&engine, ServiceOptions { feed, ..ServiceOptions::default() }).await.unwrap();
    let table = engine.database("dev").unwrap().table("dog").unwrap();
    Fixture { _dir: dir, engine, services, table, ctx }
}

fn request(scope: KeyScope, start: Start) -> SubscribeRequest {
    SubscribeRequest {
        database: "dev".into(),
        table: Some("dog".into()),
        scope,
        matcher: None,
        start,
        omit_current: false,
    }
}

/// The next event, or a failure if none comes within 10 s.
async fn next(sub: &mut Subscription) -> Result<Arc<Event>, FeedEnd> {
    tokio::time::timeout(Duration::from_secs(10), sub.next()).await.expect("no event within 10 s")
}

/// `(kind, id, name)` of an event.
fn summary(event: &Event) -> (EventKind, Value, Option<Value>) {
    let name = match &event.value {
        EventValue::Record(body) => body.clone().into_object().unwrap().get("name").cloned(),
        EventValue::Message(message) => Some(message.clone()),
        EventValue::None => None,
    };
    (event.kind, event.id.clone(), name)
}

fn text(s: &str) -> Option<Value> {
    Some(Value::String(s.into()))
}

/// Nothing more arrives within a short wait.
async fn silent(sub: &mut Subscription) {
    assert!(tokio::time::timeout(Duration::from_millis(200), sub.next()).await.is_err(), "an event arrived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_subscription_gets_the_current_record_then_its_changes_only() {
    let f = fixture(FeedOptions::default()).await;
    f.table
        .insert(&f.ctx, vec![record(r#"{"id":1,"name":"Penny"}"#), record(r#"{"id":2,"name":"Rex"}"#)])
        .await
        .unwrap();
    let mut sub =
        f.services.feed().subscribe(&f.ctx, request(KeyScope::Record(Value::Int(1)), Start::Now)).await.unwrap();
    let first = next(&mut sub).await.unwrap();
    assert!(first.current, "the current record comes first, marked as such");
    assert_eq!(summary(&first), (EventKind::Put, Value::Int(1), text("Penny")));

    f.table.upsert(&f.ctx, vec![record(r#"{"id":2,"name":"Rex II"}"#)]).await.unwrap();
    f.table.upsert(&f.ctx, vec![record(r#"{"id":1,"name":"Penny II"}"#)]).await.unwrap();
    f.table.delete(&f.ctx, vec![Value::Int(1)]).await.unwrap();
    let put = next(&mut sub).await.unwrap();
    assert!(!put.current && put.begin_txn);
    assert_eq!(summary(&put), (EventKind::Put, Value::Int(1), text("Penny II")));
    assert_eq!(summary(&next(&mut sub).await.unwrap()), (EventKind::Delete, Value::Int(1), None));
    silent(&mut sub).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_and_prefix_subscriptions_cover_their_records() {
    let f = fixture(FeedOptions::default()).await;
    f.table
        .insert(&f.ctx, vec![record(r#"{"id":"a/1","name":"one"}"#), record(r#"{"id":"b/1","name":"two"}"#)])
        .await
        .unwrap();
    let feed = f.services.feed();
    let mut whole = feed.subscribe(&f.ctx, request(KeyScope::Table, Start::Now)).await.unwrap();
    let mut prefix = feed.subscribe(&f.ctx, request(KeyScope::Prefix("a/".into()), Start::Now)).await.unwrap();
    let mut omitted = request(KeyScope::Table, Start::Now);
    omitted.omit_current = true;
    let mut live_only = feed.subscribe(&f.ctx, omitted).await.unwrap();

    assert_eq!(summary(&next(&mut whole).await.unwrap()).1, Value::String("a/1".into()));
    assert_eq!(summary(&next(&mut whole).await.unwrap()).1, Value::String("b/1".into()));
    assert_eq!(summary(&next(&mut prefix).await.unwrap()).1, Value::String("a/1".into()));

    f.table
        .insert(&f.ctx, vec![record(r#"{"id":"b/2","name":"three"}"#), record(r#"{"id":"a/b/2","name":"four"}"#)])
        .await
        .unwrap();
    for sub in [&mut whole, &mut live_only] {
        let first = next(sub).await.unwrap();
        let second = next(sub).await.unwrap();
        assert_eq!((summary(&first).1, first.begin_txn), (Value::String("b/2".into()), true));
        assert_eq!((summary(&second).1, second.begin_txn), (Value::String("a/b/2".into()), false));
    }
    assert_eq!(summary(&next(&mut prefix).await.unwrap()).1, Value::String("a/b/2".into()));
    silent(&mut prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_keeps_a_bounded_queue_and_misses_nothing() {
    let feed_options = FeedOptions { queue_events: 8, read_entries: 16, ..FeedOptions::default() };
    let f = fixture(feed_options).await;
    let mut sub = f.services.feed().subscribe(&f.ctx, request(KeyScope::Table, Start::Now)).await.unwrap();
    let writes = 500;
    for i in 0..writes {
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":{},"name":"n{i}"}}"#, i % 7))]).await.unwrap();
    }
    // Give the hub time to dispatch everything it will.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (events, _) = sub.queued();
    assert!(events <= 8, "the queue held {events} events, over its bound of 8");
    for i in 0..writes {
        let event = next(&mut sub).await.unwrap();
        assert_eq!(summary(&event), (EventKind::Put, Value::Int(i % 7), text(&format!("n{i}"))), "event {i}");
        assert!(sub.queued().0 <= 8);
    }
    silent(&mut sub).await;
    // Live again: a new change arrives from the queue.
    f.table.upsert(&f.ctx, vec![record(r#"{"id":1,"name":"after"}"#)]).await.unwrap();
    assert_eq!(summary(&next(&mut sub).await.unwrap()).2, text("after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_from_a_time_or_the_last_changes_comes_from_the_log() {
    let f = fixture(FeedOptions::default()).await;
    for i in 0..5 {
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":1,"name":"v{i}"}}"#))]).await.unwrap();
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":2,"name":"w{i}"}}"#))]).await.unwrap();
    }
    let feed = f.services.feed();
    let mut last_two =
        feed.subscribe(&f.ctx, request(KeyScope::Record(Value::Int(1)), Start::Previous(2))).await.unwrap();
    assert_eq!(summary(&next(&mut last_two).await.unwrap()).2, text("v3"));
    assert_eq!(summary(&next(&mut last_two).await.unwrap()).2, text("v4"));
    silent(&mut last_two).await;

    let mid = f.table.get(&f.ctx, &Value::Int(2)).unwrap().unwrap().1.time;
    f.table.upsert(&f.ctx, vec![record(r#"{"id":1,"name":"v5"}"#)]).await.unwrap();
    let mut since = feed.subscribe(&f.ctx, request(KeyScope::Record(Value::Int(1)), Start::Since(mid))).await.unwrap();
    assert_eq!(summary(&next(&mut since).await.unwrap()).2, text("v5"));
    f.table.upsert(&f.ctx, vec![record(r#"{"id":1,"name":"v6"}"#)]).await.unwrap();
    assert_eq!(summary(&next(&mut since).await.unwrap()).2, text("v6"), "then live");
    for sub in [&mut last_two] {
        assert_eq!(summary(&next(sub).await.unwrap()).2, text("v5"));
        assert_eq!(summary(&next(sub).await.unwrap()).2, text("v6"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_message_reaches_the_record_subscribers_and_changes_nothing() {
    let f = fixture(FeedOptions::default()).await;
    let mut omitted = request(KeyScope::Record(Value::Int(9)), Start::Now);
    omitted.omit_current = true;
    let mut sub = f.services.feed().subscribe(&f.ctx, omitted).await.unwrap();
    f.table.publish(&f.ctx, &Value::Int(9), &Value::String("hello".into())).await.unwrap();
    assert_eq!(summary(&next(&mut sub).await.unwrap()), (EventKind::Message, Value::Int(9), text("hello")));
    assert!(f.table.get(&f.ctx, &Value::Int(9)).unwrap().is_none(), "a message writes no record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_table_ends_its_subscriptions_with_the_reason() {
    let f = fixture(FeedOptions::default()).await;
    let mut sub = f.services.feed().subscribe(&f.ctx, request(KeyScope::Table, Start::Now)).await.unwrap();
    f.engine.database("dev").unwrap().drop_table(&f.ctx, "dog").await.unwrap();
    let end = next(&mut sub).await.unwrap_err();
    assert_eq!(end, FeedEnd::TableDropped { table: "dog".into() });
    assert!(end.to_string().contains("'dog' was dropped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_for_too_long_is_told_why_it_is_cut_off() {
    let feed_options = FeedOptions { queue_events: 2, max_behind: Duration::ZERO, ..FeedOptions::default() };
    let f = fixture(feed_options).await;
    let mut live_only = request(KeyScope::Table, Start::Now);
    live_only.omit_current = true; // sending the current state counts as behind too
    let mut sub = f.services.feed().subscribe(&f.ctx, live_only).await.unwrap();
    for i in 0..10 {
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":{i}}}"#))]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The two queued events, then the overflow: reading the log takes too long.
    next(&mut sub).await.unwrap();
    next(&mut sub).await.unwrap();
    let end = next(&mut sub).await.unwrap_err();
    assert!(matches!(end, FeedEnd::TooSlow { .. }), "{end:?}");
    assert!(end.to_string().contains("fell behind"), "{end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_leaves_out_an_earlier_table_of_the_same_name() {
    let f = fixture(FeedOptions::default()).await;
    f.table.insert(&f.ctx, vec![record(r#"{"id":1,"name":"old"}"#)]).await.unwrap();
    let db = f.engine.database("dev").unwrap();
    db.drop_table(&f.ctx, "dog").await.unwrap();
    db.create_table(&f.ctx, TableSpec::dynamic("dog", "id")).await.unwrap();
    let table = db.table("dog").unwrap();
    table.insert(&f.ctx, vec![record(r#"{"id":1,"name":"new"}"#)]).await.unwrap();
    let mut sub = f
        .services
        .feed()
        .subscribe(&f.ctx, request(KeyScope::Record(Value::Int(1)), Start::Previous(5)))
        .await
        .unwrap();
    assert_eq!(summary(&next(&mut sub).await.unwrap()).2, text("new"), "the dropped table's record is not history");
    silent(&mut sub).await; // and its drop does not end the new table's feed
    let mut since =
        f.services.feed().subscribe(&f.ctx, request(KeyScope::Record(Value::Int(1)), Start::Since(0.0))).await.unwrap();
    assert_eq!(summary(&next(&mut since).await.unwrap()).2, text("new"), "from the start of the log, too");
    table.upsert(&f.ctx, vec![record(r#"{"id":1,"name":"newer"}"#)]).await.unwrap();
    assert_eq!(summary(&next(&mut sub).await.unwrap()).2, text("newer"));
    assert_eq!(summary(&next(&mut since).await.unwrap()).2, text("newer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_a_pruned_position_is_refused_not_resumed_with_a_gap() {
    let f = fixture(FeedOptions::default()).await;
    for i in 0..5 {
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":{i}}}"#))]).await.unwrap();
    }
    let first = Position { seq: 1, index: 0 };
    f.table.delete_audit_log_before(&f.ctx, lyre_core::now_ms() + 1.0).await.unwrap();
    let refused = f
        .services
        .feed()
        .subscribe(&f.ctx, request(KeyScope::Table, Start::After(first)))
        .await
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("no longer holds entry 1,"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_the_current_state_is_sent_come_once_after_it() {
    let feed_options = FeedOptions { queue_events: 4, page_records: 16, ..FeedOptions::default() };
    let f = fixture(feed_options).await;
    let records: Vec<_> = (0..100).map(|i| record(&format!(r#"{{"id":{i},"name":"v0"}}"#))).collect();
    f.table.insert(&f.ctx, records).await.unwrap();
    let mut sub = f.services.feed().subscribe(&f.ctx, request(KeyScope::Table, Start::Now)).await.unwrap();
    let mut seen = 0;
    for round in 1..=20 {
        // Changes land while the current state is being read: the queue overflows.
        f.table.upsert(&f.ctx, vec![record(&format!(r#"{{"id":{},"name":"v{round}"}}"#, round % 3))]).await.unwrap();
        if seen < 100 {
            let event = next(&mut sub).await.unwrap();
            assert!(event.current, "event {seen} of the current state");
            seen += 1;
        }
    }
    while seen < 100 {
        assert!(next(&mut sub).await.unwrap().current);
        seen += 1;
    }
    for round in 1..=20 {
        let event = next(&mut sub).await.unwrap();
        assert!(!event.current);
        assert_eq!(summary(&event), (EventKind::Put, Value::Int(round % 3), text(&format!("v{round}"))));
    }
    silent(&mut sub).await;
}
