//! A derived index's storage below its runner: ownership by epoch (no work of a
//! superseded owner lands), and a condemned index never reads as ready.

use lyre_core::catalog::parse_sdl;
use lyre_core::derived::store::{IndexState, prefix};
use lyre_core::vector::declared::KIND;
use lyre_core::{Context, Engine};

mod common;
use common::options;

const SDL: &str = r#"type Doc @table(database: "vec") { id: ID @primaryKey  v: [Float] @indexed(type: "HNSW") }"#;

fn state(epoch: u64, cursor: u64, ready: bool) -> IndexState {
    IndexState { epoch, cursor, log_epoch: 0, declaration: Vec::new(), ready }
}

/// A claim with an epoch no greater than the stored one is refused, and so is
/// every write of an owner whose epoch was superseded; the owner's own succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_owner_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    engine.define_tables(&Context::system(), parse_sdl(SDL, "schema.graphql").unwrap()).await.unwrap();
    let db = engine.database("vec").unwrap();
    let at = prefix(KIND, db.table_incarnation("Doc").unwrap(), 7);

    db.claim_index(&at, state(1, 0, true)).await.unwrap();
    db.claim_index(&at, state(2, 0, true)).await.unwrap();
    for stale in [1, 2] {
        let refused = db.claim_index(&at, state(stale, 0, true)).await.unwrap_err();
        assert!(refused.to_string().contains("superseded by epoch 2"), "{refused}");
    }
    let write = vec![(b"hnsw-test-key".to_vec(), Some(b"x".to_vec()))];
    let refused = db.write_index_progress(&at, state(1, 9, true), write.clone()).await.unwrap_err();
    assert!(refused.to_string().contains("superseded"), "{refused}");
    assert!(db.condemn_index(&at, state(1, 0, false)).await.is_err());
    assert!(db.reset_index(&at, 1).await.is_err());
    assert_eq!(db.stored_index(&at).unwrap().state.unwrap().cursor, 0, "the stale write left nothing");

    db.write_index_progress(&at, state(2, 9, true), write).await.unwrap();
    assert_eq!(db.stored_index(&at).unwrap().state.unwrap().cursor, 9);
}

/// Condemning commits the marker before anything is reset; only a ready state
/// written afterwards clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condemned_index_stays_condemned_until_ready_again() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    engine.define_tables(&Context::system(), parse_sdl(SDL, "schema.graphql").unwrap()).await.unwrap();
    let db = engine.database("vec").unwrap();
    let at = prefix(KIND, db.table_incarnation("Doc").unwrap(), 7);
    db.claim_index(&at, state(3, 5, true)).await.unwrap();
    db.condemn_index(&at, state(3, 5, true)).await.unwrap();
    let stored = db.stored_index(&at).unwrap();
    assert!(stored.condemned, "the marker alone says the stored graph may not be served");
    db.write_index_progress(&at, state(3, 6, false), Vec::new()).await.unwrap();
    assert!(db.stored_index(&at).unwrap().condemned, "a state that is not ready keeps the marker");
    db.write_index_progress(&at, state(3, 7, true), Vec::new()).await.unwrap();
    let stored = db.stored_index(&at).unwrap();
    assert!(!stored.condemned && stored.state.unwrap().ready);
}
