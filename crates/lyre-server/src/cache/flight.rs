//! Single flight: one origin call per key at a time. The first caller for a key
//! starts the call as a task of its own (it finishes, and stores what it fetched,
//! even when every client waiting for it goes away); later callers for the key
//! wait for the same outcome, a failure included, so an origin that fails is
//! not called again by every waiter.
//!
//! Turns ([`Turns`]): one write through to an origin per key at a time, so the
//! origin and the table take a record's writes in the same order.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use parking_lot::Mutex;

/// A call under way: its number (so only it removes its own entry) and its
/// outcome, shared.
type Running<V> = (u64, Shared<BoxFuture<'static, V>>);

/// The calls under way, by key.
pub struct Flights<K, V: Clone> {
    running: Arc<Mutex<HashMap<K, Running<V>>>>,
    next: AtomicU64,
}

impl<K, V: Clone> Default for Flights<K, V> {
    fn default() -> Self {
        Flights { running: Arc::new(Mutex::new(HashMap::new())), next: AtomicU64::new(0) }
    }
}

impl<K, V> Flights<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Starts the call for `key` unless one is under way, and answers its outcome
    /// (to await, or to drop: the call goes on). `failed` stands for the outcome
    /// of a call whose task panicked.
    pub fn start<F>(
        &self,
        key: K,
        call: impl FnOnce() -> F,
        failed: impl Fn(String) -> V + Send + 'static,
    ) -> Shared<BoxFuture<'static, V>>
    where
        F: Future<Output = V> + Send + 'static,
    {
        let mut running = self.running.lock();
        if let Some((_, outcome)) = running.get(&key) {
            return outcome.clone();
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let (map, own_key) = (Arc::downgrade(&self.running), key.clone());
        let future = call();
        // A request a script's middleware passed on keeps its mark in the call.
        let task = tokio::spawn(crate::passed_on::inherit(async move {
            let outcome = future.await;
            // Gone from the map before its waiters wake: a caller after this point
            // starts a new call and sees what this one stored.
            if let Some(map) = map.upgrade() {
                let mut running = map.lock();
                if running.get(&own_key).is_some_and(|(n, _)| *n == number) {
                    running.remove(&own_key);
                }
            }
            outcome
        }));
        let outcome = async move { task.await.unwrap_or_else(|err| failed(err.to_string())) }.boxed().shared();
        running.insert(key, (number, outcome.clone()));
        outcome
    }

    /// How many calls are under way.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.running.lock().len()
    }
}

/// Turns per key: one holder at a time, the others waiting in order. A caching
/// table's write-through takes the record's turn for both halves of a write (the
/// origin's, then the table's), so the two take a record's concurrent writes in
/// the same order.
pub struct Turns<K> {
    keys: Arc<Mutex<TurnKeys<K>>>,
}

/// The keys someone holds or waits for (and, until a sweep, ones a waiter that
/// went away left behind).
struct TurnKeys<K> {
    turns: HashMap<K, Arc<tokio::sync::Mutex<()>>>,
    /// The size at which keys nobody holds or waits for are swept next.
    sweep_at: usize,
}

/// Keys kept before the first sweep; after one, twice what it kept.
const TURNS_BEFORE_SWEEP: usize = 64;

impl<K> Default for Turns<K> {
    fn default() -> Self {
        Turns { keys: Arc::new(Mutex::new(TurnKeys { turns: HashMap::new(), sweep_at: TURNS_BEFORE_SWEEP })) }
    }
}

/// A key's turn, held: the next waiter's comes when it is dropped (and the key
/// goes when nobody waits for it).
pub struct Turn<K: Hash + Eq> {
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
    keys: Arc<Mutex<TurnKeys<K>>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Turns<K> {
    /// Waits at most `wait` for `key`'s turn: `None` when it did not come.
    pub async fn take(&self, key: K, wait: std::time::Duration) -> Option<Turn<K>> {
        let turn = {
            let mut keys = self.keys.lock();
            if keys.turns.len() >= keys.sweep_at && !keys.turns.contains_key(&key) {
                // Only the map holds these: nobody has or awaits their turn.
                keys.turns.retain(|_, turn| Arc::strong_count(turn) > 1);
                keys.sweep_at = TURNS_BEFORE_SWEEP.max(2 * keys.turns.len());
            }
            keys.turns.entry(key.clone()).or_default().clone()
        };
        let held = tokio::time::timeout(wait, turn.lock_owned()).await.ok()?;
        Some(Turn { held: Some(held), keys: self.keys.clone(), key })
    }

    /// How many keys are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().turns.len()
    }
}

impl<K: Hash + Eq> Drop for Turn<K> {
    fn drop(&mut self) {
        let mut keys = self.keys.lock();
        self.held = None;
        if keys.turns.get(&self.key).is_some_and(|turn| Arc::strong_count(turn) == 1) {
            keys.turns.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn concurrent_callers_share_one_call_and_its_failure() {
        let flights: Arc<Flights<&'static str, Result<u32, String>>> = Arc::new(Flights::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for _ in 0..50 {
            let (flights, calls) = (flights.clone(), calls.clone());
            waiters.push(tokio::spawn(async move {
                flights
                    .start(
                        "k",
                        || async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Err::<u32, String>("origin down".into())
                        },
                        Err,
                    )
                    .await
            }));
        }
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), Err("origin down".to_string()));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for 50 concurrent callers");
        assert_eq!(flights.len(), 0, "the finished call is gone");
        // A later caller calls again.
        let again = flights.start("k", || async { Ok(7) }, Err).await;
        assert_eq!(again, Ok(7));
    }

    #[tokio::test]
    async fn a_call_goes_on_when_its_callers_leave() {
        let flights: Flights<u8, u8> = Flights::default();
        let done = Arc::new(AtomicUsize::new(0));
        let seen = done.clone();
        let outcome = flights.start(
            1,
            || async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                seen.fetch_add(1, Ordering::SeqCst);
                1
            },
            |_| 0,
        );
        drop(outcome);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn turns_pass_in_order_per_key_and_a_key_goes_with_its_last_holder() {
        let turns: Arc<Turns<u32>> = Arc::new(Turns::default());
        let wait = Duration::from_secs(5);
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let first = turns.take(1, wait).await.unwrap();
        let mut waiters = Vec::new();
        for n in 0..3 {
            let (turns, order) = (turns.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let _turn = turns.take(1, wait).await.unwrap();
                order.lock().push(n);
            }));
            tokio::time::sleep(Duration::from_millis(20)).await; // queued in this order
        }
        drop(turns.take(2, wait).await.unwrap()); // another key does not wait
        assert!(turns.take(1, Duration::from_millis(50)).await.is_none(), "a held turn is not given twice");
        // A sweep (a new key once the map is full) keeps every key someone holds.
        let mut held = Vec::new();
        for key in 100..(100 + TURNS_BEFORE_SWEEP as u32) {
            held.push(turns.take(key, wait).await.unwrap());
        }
        drop(turns.take(999, wait).await.unwrap());
        assert!(turns.take(100, Duration::from_millis(50)).await.is_none(), "still held after the sweep");
        drop(held);
        assert_eq!(turns.len(), 1, "a key goes with its last holder; the held one stays");
        assert!(order.lock().is_empty(), "nobody passes while the turn is held");
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock(), [0, 1, 2]);
        assert!(turns.take(1, wait).await.is_some());
    }
}
