//! The frozen records a worker built lately, by their stored bytes: a record read
//! again unchanged is the very object it was (no attribute built again), as
//! Harper's record cache (`storage.caching`) gives the same frozen object for an
//! entry it holds.
//!
//! Only flat records are kept (every attribute a string, number, boolean or null):
//! a frozen one cannot be changed at all, so sharing it between requests shows
//! nothing of one request to another. A nested object or array stays changeable
//! inside a frozen record, so such a record is built afresh for each read.
//!
//! A record is found by a hash of its table and bytes, then its bytes are compared:
//! a record that changed since is simply not found (and its old object is dropped
//! in time). What the kept records cost (their bytes and an estimate of their
//! objects) stays within a budget; past it the oldest kept go first.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use rquickjs::{Ctx, Object, Persistent};

/// Records larger than this (stored bytes) are not kept.
const LARGEST: usize = 4096;

/// What keeping a record is counted as: its bytes, and its object (about three
/// times its stored bytes in QuickJS, and a fixed part).
fn cost(bytes: &[u8]) -> usize {
    4 * bytes.len() + 256
}

/// A frozen record with what it was built from.
struct Kept {
    database: Box<str>,
    table: Box<str>,
    bytes: Box<[u8]>,
    object: Persistent<Object<'static>>,
}

#[derive(Default)]
struct Shelf {
    by_hash: HashMap<u64, Kept, foldhash::fast::RandomState>,
    /// Hashes in the order they were first kept: the oldest is let go first.
    order: VecDeque<u64>,
    /// The summed [`cost`] of what is kept.
    cost: usize,
}

/// The frozen records a worker built lately (see the module's documentation).
pub struct RecordCache {
    shelf: RefCell<Shelf>,
    /// The most the kept records may cost; 0 keeps none.
    budget: usize,
    hasher: foldhash::fast::RandomState,
}

impl RecordCache {
    /// A cache whose records cost at most `budget` (bytes, estimated); 0 keeps none.
    pub fn new(budget: usize) -> Self {
        Self { shelf: RefCell::default(), budget, hasher: foldhash::fast::RandomState::default() }
    }

    fn hash(&self, database: &str, table: &str, bytes: &[u8]) -> u64 {
        self.hasher.hash_one((database, table, bytes))
    }

    /// The object built from `bytes` of `database`.`table`, when it is kept.
    pub fn get<'js>(&self, ctx: &Ctx<'js>, database: &str, table: &str, bytes: &[u8]) -> Option<Object<'js>> {
        if self.budget == 0 {
            return None;
        }
        let shelf = self.shelf.borrow();
        let kept = shelf.by_hash.get(&self.hash(database, table, bytes))?;
        if *kept.bytes != *bytes || *kept.table != *table || *kept.database != *database {
            return None;
        }
        kept.object.clone().restore(ctx).ok()
    }

    /// Keeps `object`, the flat frozen record built from `bytes` of `database`.`table`.
    pub fn keep<'js>(&self, ctx: &Ctx<'js>, database: &str, table: &str, bytes: &[u8], object: &Object<'js>) {
        let added = cost(bytes);
        if bytes.len() > LARGEST || added > self.budget {
            return;
        }
        let hash = self.hash(database, table, bytes);
        let kept = Kept {
            database: database.into(),
            table: table.into(),
            bytes: bytes.into(),
            object: Persistent::save(ctx, object.clone()),
        };
        // What is let go is dropped here, inside the runtime.
        let mut gone = Vec::new();
        let mut shelf = self.shelf.borrow_mut();
        shelf.cost += added;
        match shelf.by_hash.insert(hash, kept) {
            Some(previous) => {
                shelf.cost -= cost(&previous.bytes);
                gone.push(previous);
            }
            None => shelf.order.push_back(hash),
        }
        while shelf.cost > self.budget {
            let Some(oldest) = shelf.order.pop_front() else { break };
            if let Some(previous) = shelf.by_hash.remove(&oldest) {
                shelf.cost -= cost(&previous.bytes);
                gone.push(previous);
            }
        }
        drop(shelf);
        drop(gone);
    }

    /// How many records are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shelf.borrow().by_hash.len()
    }

    /// Lets every kept object go: before the runtime ends (a persistent object
    /// must not outlive its runtime).
    pub fn clear(&self) {
        let taken = std::mem::take(&mut *self.shelf.borrow_mut());
        drop(taken);
    }
}

#[cfg(test)]
mod tests {
    use rquickjs::{Ctx, Object};

    use super::{RecordCache, cost};
    use crate::script::record::tests::in_js;

    fn object<'js>(ctx: &Ctx<'js>, n: usize) -> Object<'js> {
        ctx.eval(format!("Object.freeze({{ n: {n} }})")).unwrap()
    }

    #[test]
    fn a_kept_record_is_found_by_its_database_table_and_bytes_only() {
        in_js(|ctx| {
            let cache = RecordCache::new(1 << 20);
            let kept = object(ctx, 1);
            cache.keep(ctx, "data", "Dog", b"one", &kept);
            let found = cache.get(ctx, "data", "Dog", b"one").expect("kept");
            assert_eq!(found.as_value(), kept.as_value(), "the very object");
            assert!(cache.get(ctx, "data", "Dog", b"one, changed").is_none());
            assert!(cache.get(ctx, "data", "Cat", b"one").is_none());
            assert!(cache.get(ctx, "other", "Dog", b"one").is_none());
            // A newer object for the same bytes takes the older's place.
            let newer = object(ctx, 2);
            cache.keep(ctx, "data", "Dog", b"one", &newer);
            assert_eq!(cache.get(ctx, "data", "Dog", b"one").expect("kept").as_value(), newer.as_value());
            assert_eq!(cache.len(), 1);
        });
    }

    #[test]
    fn what_is_kept_stays_within_the_budget_the_oldest_going_first() {
        in_js(|ctx| {
            let records: Vec<Vec<u8>> = (0..5u8).map(|n| vec![n; 100]).collect();
            let cache = RecordCache::new(3 * cost(&records[0]));
            for (n, bytes) in records.iter().enumerate() {
                cache.keep(ctx, "data", "Dog", bytes, &object(ctx, n));
            }
            assert_eq!(cache.len(), 3);
            let found: Vec<bool> = records.iter().map(|bytes| cache.get(ctx, "data", "Dog", bytes).is_some()).collect();
            assert_eq!(found, [false, false, true, true, true]);
            // A record costing more than the whole budget is not kept at all.
            cache.keep(ctx, "data", "Dog", &[9; 1000], &object(ctx, 9));
            assert_eq!(cache.len(), 3);
            cache.clear();
            assert_eq!(cache.len(), 0);
        });
    }

    #[test]
    fn a_cache_without_a_budget_keeps_nothing() {
        in_js(|ctx| {
            let cache = RecordCache::new(0);
            cache.keep(ctx, "data", "Dog", b"one", &object(ctx, 1));
            assert!(cache.get(ctx, "data", "Dog", b"one").is_none());
            assert_eq!(cache.len(), 0);
        });
    }
}
