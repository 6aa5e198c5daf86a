//! Writes that replace a record whole (`PUT`, and `insert` over an expired record)
//! decode only what they read of the record they replace: its indexed attributes,
//! its creation stamps and its `@expiresAt` time. These tests hold the outcome to
//! what decoding all of it gives: no index entry left behind, stamps kept, expired
//! records replaced.

use std::collections::HashMap;

use lyre_core::catalog::parse_sdl;
use lyre_core::services::check_consistency;
use std::sync::Arc;

use lyre_core::{Context, Engine, Table, Value, WriteOptions};

mod common;
use common::{options, record};

const SDL: &str = r#"
type Thing @table(database: "dev") {
  id: ID @primaryKey
  tag: String @indexed
  size: Int @indexed
  note: String
  created: Long @createdTime
  updated: Long @updatedTime
}
type Lease @table(database: "dev") {
  id: ID @primaryKey
  until: Long @expiresAt
  holder: String @indexed
}
"#;

async fn open(dir: &std::path::Path) -> Arc<Engine> {
    let (engine, _) = Engine::open(options(dir)).await.unwrap();
    engine.define_tables(&Context::system(), parse_sdl(SDL, "schema.graphql").unwrap()).await.unwrap();
    engine
}

fn table(engine: &Engine, name: &str) -> Table {
    engine.database("dev").unwrap().table(name).unwrap()
}

/// A small deterministic generator (xorshift), so a failure replays.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The attributes a model record holds (absent ones are `None`).
#[derive(Debug, Clone, PartialEq)]
struct Model {
    tag: Option<String>,
    size: Option<i64>,
    note: Option<String>,
    created: Option<Value>,
}

fn body(model: &Model) -> lyre_core::Object {
    let mut body = record("{}");
    if let Some(tag) = &model.tag {
        body.insert("tag".into(), Value::String(tag.clone()));
    }
    if let Some(size) = model.size {
        body.insert("size".into(), Value::Int(size));
    }
    if let Some(note) = &model.note {
        body.insert("note".into(), Value::String(note.clone()));
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_writes_leave_indexes_and_stamps_as_decoding_everything_would() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path()).await;
    let things = table(&engine, "Thing");
    let ctx = Context::system();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut model: HashMap<i64, Model> = HashMap::new();
    for _ in 0..400 {
        let id = dice.below(8) as i64;
        let fresh = Model {
            tag: (dice.below(4) > 0).then(|| format!("t{}", dice.below(5))),
            size: (dice.below(4) > 0).then(|| dice.below(6) as i64),
            note: (dice.below(2) > 0).then(|| "n".repeat(dice.below(40) as usize)),
            created: None,
        };
        let kept = model.get(&id).and_then(|m| m.created.clone());
        match dice.below(5) {
            // PUT: the record becomes the body; its creation stamp stays.
            0 | 1 => {
                things.put(&ctx, Value::Int(id), body(&fresh), WriteOptions::default()).await.unwrap();
                model.insert(id, Model { created: kept, ..fresh });
            }
            // insert: skipped when the record exists.
            2 => {
                let mut with_id = body(&fresh);
                with_id.insert("id".into(), Value::Int(id));
                let summary = things.insert(&ctx, vec![with_id]).await.unwrap();
                assert_eq!(summary.written.is_empty(), model.contains_key(&id));
                model.entry(id).or_insert(fresh);
            }
            // PATCH: merged into what is stored.
            3 => {
                things.patch(&ctx, Value::Int(id), body(&fresh), WriteOptions::default()).await.unwrap();
                let merged = match model.remove(&id) {
                    Some(old) => Model {
                        tag: fresh.tag.or(old.tag),
                        size: fresh.size.or(old.size),
                        note: fresh.note.or(old.note),
                        created: old.created,
                    },
                    None => fresh,
                };
                model.insert(id, merged);
            }
            _ => {
                things.delete(&ctx, vec![Value::Int(id)]).await.unwrap();
                model.remove(&id);
            }
        }
        let stored = things.get(&ctx, &Value::Int(id)).unwrap().map(|(record, _)| record);
        match (model.get_mut(&id), stored) {
            (None, None) => {}
            (Some(expected), Some(stored)) => {
                assert_eq!(stored.get("tag").and_then(Value::as_str), expected.tag.as_deref(), "{stored:?}");
                assert_eq!(stored.get("size").and_then(Value::as_f64), expected.size.map(|n| n as f64), "{stored:?}");
                assert_eq!(stored.get("note").and_then(Value::as_str), expected.note.as_deref(), "{stored:?}");
                let created = stored.get("created").cloned();
                assert!(created.is_some(), "every record is stamped: {stored:?}");
                match &expected.created {
                    Some(first) => assert_eq!(created.as_ref(), Some(first), "the creation stamp stays"),
                    None => expected.created = created,
                }
            }
            (expected, stored) => panic!("record {id}: expected {expected:?}, stored {stored:?}"),
        }
    }
    let report = check_consistency(&things, &ctx).unwrap();
    assert!(report.is_consistent(), "{report:?}");
    assert!(report.index_entries > 0, "the indexes were walked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_replaces_an_expired_record_and_its_index_entries() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path()).await;
    let leases = table(&engine, "Lease");
    let ctx = Context::system();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let expired = record(&format!(r#"{{"id":1,"until":{},"holder":"old"}}"#, now - 60_000));
    assert_eq!(leases.insert(&ctx, vec![expired]).await.unwrap().written.len(), 1);
    assert!(leases.get(&ctx, &Value::Int(1)).unwrap().is_none(), "the lease has expired");
    let current = record(&format!(r#"{{"id":1,"until":{},"holder":"new"}}"#, now + 600_000));
    let summary = leases.insert(&ctx, vec![current]).await.unwrap();
    assert_eq!(summary.written, vec![Value::Int(1)], "an expired record is no obstacle to an insert");
    let (stored, _) = leases.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert_eq!(stored.get("holder").and_then(Value::as_str), Some("new"));
    let report = check_consistency(&leases, &ctx).unwrap();
    assert!(report.is_consistent(), "the expired record's entry went with it: {report:?}");
    assert_eq!(report.records, 1);
}
