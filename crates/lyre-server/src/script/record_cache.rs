//! The frozen records a worker built lately: a record read again unchanged is the
//! very object it was (no attribute built again), as Harper's record cache
//! (`storage.caching`) gives the same frozen object for an entry it holds.
//!
//! Only flat records are kept (every attribute a string, number, boolean or null):
//! a frozen one cannot be changed at all, so what one request does to it shows in
//! no other (a script's own `WeakMap` keyed by records does see the same key again,
//! as with Harper's cache). A nested object or array stays changeable inside a
//! frozen record, so such a record is built afresh for each read.
//!
//! A record is kept under its table and id, with the stored bytes it was built
//! from: a read finds it only if the bytes it read are the same, and a record that
//! changed takes its old version's place. What the kept records cost (their bytes
//! and an estimate of their objects) stays within a budget; past it the oldest go
//! first, except those read since the last time round (a second chance).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};

use lyre_core::Value;
use rquickjs::{Ctx, Object, Persistent};

/// Records larger than this (stored bytes) are not kept.
const LARGEST: usize = 4096;

/// What keeping a record is counted as: its bytes, and its object in QuickJS (a
/// property slot and a string header per attribute, about five times its stored
/// bytes for records of short attributes, and a fixed part).
fn cost(bytes: &[u8]) -> usize {
    6 * bytes.len() + 256
}

/// Which record: its table and id.
#[derive(Clone, Copy)]
pub struct RecordKey<'a> {
    pub database: &'a str,
    pub table: &'a str,
    pub id: &'a Value,
}

/// A frozen record with what it was built from.
struct Kept {
    database: Box<str>,
    table: Box<str>,
    bytes: Box<[u8]>,
    object: Persistent<Object<'static>>,
    /// Read since it was last passed over for eviction.
    read: Cell<bool>,
}

impl Kept {
    fn holds(&self, key: RecordKey<'_>, bytes: &[u8]) -> bool {
        *self.bytes == *bytes && *self.table == *key.table && *self.database == *key.database
    }
}

#[derive(Default)]
struct Shelf {
    by_key: HashMap<u64, Kept, foldhash::fast::RandomState>,
    /// Keys in the order they were first kept: the oldest is let go first.
    order: VecDeque<u64>,
    /// The summed [`cost`] of what is kept.
    cost: usize,
}

/// The frozen records a worker built lately (see the module's documentation).
pub struct RecordCache<S = foldhash::fast::RandomState> {
    shelf: RefCell<Shelf>,
    /// The most the kept records may cost; 0 keeps none.
    budget: usize,
    hasher: S,
}

impl RecordCache {
    /// A cache whose records cost at most `budget` (bytes, estimated); 0 keeps none.
    pub fn new(budget: usize) -> Self {
        Self::with_hasher(budget, foldhash::fast::RandomState::default())
    }
}

impl<S: BuildHasher> RecordCache<S> {
    fn with_hasher(budget: usize, hasher: S) -> Self {
        Self { shelf: RefCell::default(), budget, hasher }
    }

    /// Where `key`'s record is kept; `None` for an id of a kind never kept (not a
    /// string or a number) or bytes too large.
    fn slot(&self, key: RecordKey<'_>, bytes: &[u8]) -> Option<u64> {
        if self.budget == 0 || bytes.len() > LARGEST {
            return None;
        }
        let mut hasher = self.hasher.build_hasher();
        (key.database, key.table).hash(&mut hasher);
        match key.id {
            Value::String(id) => (0u8, id).hash(&mut hasher),
            Value::Int(id) => (1u8, id).hash(&mut hasher),
            Value::Float(id) => (2u8, id.to_bits()).hash(&mut hasher),
            _ => return None,
        }
        Some(hasher.finish())
    }

    /// The object built from `bytes`, `key`'s record as just read, when it is kept.
    pub fn get<'js>(&self, ctx: &Ctx<'js>, key: RecordKey<'_>, bytes: &[u8]) -> Option<Object<'js>> {
        let slot = self.slot(key, bytes)?;
        let shelf = self.shelf.borrow();
        let kept = shelf.by_key.get(&slot).filter(|kept| kept.holds(key, bytes))?;
        kept.read.set(true);
        kept.object.clone().restore(ctx).ok()
    }

    /// Keeps `object`, the flat frozen record built from `bytes`, `key`'s record,
    /// in place of what was kept for it.
    pub fn keep<'js>(&self, ctx: &Ctx<'js>, key: RecordKey<'_>, bytes: &[u8], object: &Object<'js>) {
        let added = cost(bytes);
        let Some(slot) = self.slot(key, bytes).filter(|_| added <= self.budget) else { return };
        let mut shelf = self.shelf.borrow_mut();
        // A record kept before (an older version) keeps its place, counted as read.
        let fresh = !shelf.by_key.contains_key(&slot);
        let kept = Kept {
            database: key.database.into(),
            table: key.table.into(),
            bytes: bytes.into(),
            object: Persistent::save(ctx, object.clone()),
            read: Cell::new(!fresh),
        };
        // What is let go is dropped after the borrow ends, inside the runtime.
        let mut gone = Vec::new();
        shelf.cost += added;
        if let Some(previous) = shelf.by_key.insert(slot, kept) {
            shelf.cost -= cost(&previous.bytes);
            gone.push(previous);
        }
        // The new record is not in the order yet, so never the one let go; each of
        // the others is passed over at most once.
        let mut passes = shelf.order.len();
        while shelf.cost > self.budget {
            let Some(oldest) = shelf.order.pop_front() else { break };
            let Some(candidate) = shelf.by_key.get(&oldest) else { continue };
            if passes > 0 && candidate.read.replace(false) {
                passes -= 1;
                shelf.order.push_back(oldest);
                continue;
            }
            if let Some(previous) = shelf.by_key.remove(&oldest) {
                shelf.cost -= cost(&previous.bytes);
                gone.push(previous);
            }
        }
        if fresh {
            shelf.order.push_back(slot);
        }
        drop(shelf);
        drop(gone);
    }

    /// How many records are kept, and what they cost.
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        let shelf = self.shelf.borrow();
        (shelf.by_key.len(), shelf.cost)
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
    use std::hash::BuildHasherDefault;

    use lyre_core::Value;
    use rquickjs::{Ctx, Object};

    use super::{LARGEST, RecordCache, RecordKey, cost};
    use crate::script::record::tests::in_js;

    fn object<'js>(ctx: &Ctx<'js>, n: usize) -> Object<'js> {
        ctx.eval(format!("Object.freeze({{ n: {n} }})")).unwrap()
    }

    fn dog(id: &Value) -> RecordKey<'_> {
        RecordKey { database: "data", table: "Dog", id }
    }

    /// A hasher giving every record the same slot, so records collide.
    #[derive(Default)]
    struct Colliding;
    impl std::hash::Hasher for Colliding {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn a_kept_record_is_found_only_as_it_was_read() {
        in_js(|ctx| {
            let cache = RecordCache::new(1 << 20);
            let (a, b) = (Value::String("a".into()), Value::Int(1));
            let kept = object(ctx, 1);
            cache.keep(ctx, dog(&a), b"one", &kept);
            let found = cache.get(ctx, dog(&a), b"one").expect("kept");
            assert_eq!(found.as_value(), kept.as_value(), "the very object");
            // Changed since: not found; kept again, its old version is gone.
            assert!(cache.get(ctx, dog(&a), b"one, changed").is_none());
            let newer = object(ctx, 2);
            cache.keep(ctx, dog(&a), b"one, changed", &newer);
            assert!(cache.get(ctx, dog(&a), b"one").is_none());
            assert_eq!(cache.get(ctx, dog(&a), b"one, changed").expect("kept").as_value(), newer.as_value());
            assert_eq!(cache.size(), (1, cost(b"one, changed")));
            // Another id, table or database is another record.
            assert!(cache.get(ctx, dog(&b), b"one, changed").is_none());
            assert!(cache.get(ctx, RecordKey { table: "Cat", ..dog(&a) }, b"one, changed").is_none());
            assert!(cache.get(ctx, RecordKey { database: "other", ..dog(&a) }, b"one, changed").is_none());
            // Ids that are not strings or numbers, and records past the largest kept, are not kept.
            let list = Value::Array(vec![Value::Int(1)]);
            cache.keep(ctx, dog(&list), b"two", &object(ctx, 3));
            cache.keep(ctx, dog(&b), &[1; LARGEST + 1], &object(ctx, 4));
            assert_eq!(cache.size().0, 1);
        });
    }

    #[test]
    fn records_sharing_a_slot_are_told_apart_by_what_they_hold() {
        in_js(|ctx| {
            let cache = RecordCache::with_hasher(1 << 20, BuildHasherDefault::<Colliding>::default());
            let (a, b) = (Value::String("a".into()), Value::String("b".into()));
            cache.keep(ctx, dog(&a), b"a's bytes", &object(ctx, 1));
            cache.keep(ctx, dog(&b), b"b's bytes", &object(ctx, 2));
            assert!(cache.get(ctx, dog(&a), b"a's bytes").is_none(), "b took the slot");
            assert!(cache.get(ctx, dog(&b), b"b's bytes").is_some());
            assert!(cache.get(ctx, RecordKey { table: "Cat", ..dog(&b) }, b"b's bytes").is_none());
            assert!(cache.get(ctx, RecordKey { database: "other", ..dog(&b) }, b"b's bytes").is_none());
            assert_eq!(cache.size(), (1, cost(b"b's bytes")));
        });
    }

    #[test]
    fn what_is_kept_stays_within_the_budget_the_oldest_unread_going_first() {
        in_js(|ctx| {
            let ids: Vec<Value> = (0..5).map(Value::Int).collect();
            let bytes = [0u8; 100];
            let cache = RecordCache::new(3 * cost(&bytes));
            for (n, id) in ids.iter().take(3).enumerate() {
                cache.keep(ctx, dog(id), &bytes, &object(ctx, n));
            }
            // Record 0 is read again: record 1, the oldest unread, goes first.
            assert!(cache.get(ctx, dog(&ids[0]), &bytes).is_some());
            cache.keep(ctx, dog(&ids[3]), &bytes, &object(ctx, 3));
            let found: Vec<bool> = ids[..4].iter().map(|id| cache.get(ctx, dog(id), &bytes).is_some()).collect();
            assert_eq!(found, [true, false, true, true]);
            assert_eq!(cache.size(), (3, 3 * cost(&bytes)));
            // Every one read since: the oldest goes after all had their second chance.
            cache.keep(ctx, dog(&ids[4]), &bytes, &object(ctx, 4));
            let found: Vec<bool> = ids[..5].iter().map(|id| cache.get(ctx, dog(id), &bytes).is_some()).collect();
            assert_eq!(found, [true, false, false, true, true]);
            // A record costing more than the whole budget is not kept at all.
            cache.keep(ctx, dog(&ids[0]), &[9; 1000], &object(ctx, 9));
            assert_eq!(cache.size().0, 3);
            cache.clear();
            assert_eq!(cache.size(), (0, 0));
        });
    }

    #[test]
    fn a_cache_without_a_budget_keeps_nothing() {
        in_js(|ctx| {
            let cache = RecordCache::new(0);
            let id = Value::Int(1);
            cache.keep(ctx, dog(&id), b"one", &object(ctx, 1));
            assert!(cache.get(ctx, dog(&id), b"one").is_none());
            assert_eq!(cache.size(), (0, 0));
        });
    }
}
