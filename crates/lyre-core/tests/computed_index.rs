//! An indexed `@computed` attribute whose code cannot compute the value of the record
//! a write replaces or deletes (it throws now, times out, finds no worker) cannot
//! name the index entries that record had: the write sweeps the attribute's index
//! for the record's entries, so none is left pointing at a value the record no
//! longer has.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use lyre_core::catalog::{Attribute, Computed, parse_sdl};
use lyre_core::services::check_consistency;
use lyre_core::{AttributeComputer, Context, Engine, Object, Value};

mod common;
use common::{options, record};

const SDL: &str = r#"
type Item @table(database: "dev") {
  id: ID @primaryKey
  x: Int
  double: Int @computed(from: "x * 2") @indexed
}
"#;

/// `double` is `x * 2`. It fails for records whose `x` is 1 while `failing` is set
/// (as code that throws on some records would), and every other time it sees one
/// while `flaky` is set (as code that runs out of time now and then would).
#[derive(Default)]
struct Doubler {
    failing: AtomicBool,
    flaky: AtomicBool,
    seen: AtomicUsize,
}

impl AttributeComputer for Doubler {
    fn compute(
        &self,
        _database: &str,
        _table: &str,
        _attribute: &Attribute,
        _computed: &Computed,
        record: &Object,
    ) -> Result<Option<Value>, String> {
        let Some(Value::Int(x)) = record.get("x") else { return Ok(None) };
        let fails = *x == 1
            && (self.failing.load(Ordering::SeqCst)
                || (self.flaky.load(Ordering::SeqCst) && self.seen.fetch_add(1, Ordering::SeqCst).is_multiple_of(2)));
        match fails {
            true => Err("the code threw".to_string()),
            false => Ok(Some(Value::Int(x * 2))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_over_a_record_whose_computed_value_fails_leaves_no_entry_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let doubler = Arc::new(Doubler::default());
    engine.install_attribute_computer(doubler.clone());
    let ctx = Context::system();
    engine.define_tables(&ctx, parse_sdl(SDL, "schema.graphql").unwrap()).await.unwrap();
    let items = engine.database("dev").unwrap().table("Item").unwrap();

    // Indexed while the code works: `double` 2 for records 1 to 5.
    let ones = ["1", "2", "3", "4", "5"].map(|id| record(&format!(r#"{{"id":{id},"x":1}}"#)));
    assert_eq!(items.insert(&ctx, ones.to_vec()).await.unwrap().written.len(), 5);
    let report = check_consistency(&items, &ctx).unwrap();
    assert!(report.is_consistent() && report.index_entries == 5, "{report:?}");

    doubler.failing.store(true, Ordering::SeqCst);
    // Record 1 changes, record 2 is deleted, records 4 and 5 change in one write
    // (one walk of the index for both): the `double` they had cannot be computed now.
    items.upsert(&ctx, vec![record(r#"{"id":1,"x":5}"#)]).await.unwrap();
    items.delete(&ctx, vec![Value::Int(2)]).await.unwrap();
    items.upsert(&ctx, vec![record(r#"{"id":4,"x":6}"#), record(r#"{"id":5,"x":8}"#)]).await.unwrap();
    doubler.failing.store(false, Ordering::SeqCst);
    // Record 3 changes twice in one write. The code fails on the stored record,
    // works on the first change (its entry is a change still pending in the job),
    // and fails again when that change is the old record of the second.
    doubler.flaky.store(true, Ordering::SeqCst);
    items.upsert(&ctx, vec![record(r#"{"id":3,"x":1}"#), record(r#"{"id":3,"x":7}"#)]).await.unwrap();
    doubler.flaky.store(false, Ordering::SeqCst);
    assert_eq!(doubler.seen.load(Ordering::SeqCst), 3, "the code ran on the stored record and both changes");

    let report = check_consistency(&items, &ctx).unwrap();
    assert!(report.is_consistent(), "no entry points at a value its record no longer has: {report:?}");
    assert_eq!((report.records, report.index_entries), (4, 4), "{report:?}");
}
