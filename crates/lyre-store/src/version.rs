//! Node-monotonic versions: f64 milliseconds since the epoch, as Harper's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A version: when (f64 ms with a sub-millisecond fraction) and on which node.
/// Ordered by time, then node, so two nodes never tie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Version {
    /// Milliseconds since the Unix epoch.
    pub time: f64,
    /// The node that issued it.
    pub node: u16,
}

impl Version {
    /// Total order: time first, node id breaks ties.
    pub fn cmp_order(&self, other: &Version) -> std::cmp::Ordering {
        self.time.total_cmp(&other.time).then(self.node.cmp(&other.node))
    }
}

/// Issues strictly increasing versions for one node, even if the wall clock steps back.
#[derive(Debug)]
pub struct VersionClock {
    node: u16,
    last: AtomicU64,
}

impl VersionClock {
    /// A clock for `node`, never issuing a time at or below `floor` (the highest version
    /// already stored, so a restart with a slower clock stays monotonic).
    pub fn new(node: u16, floor: f64) -> Self {
        Self { node, last: AtomicU64::new(floor.max(0.0).to_bits()) }
    }

    /// The node this clock issues versions for.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The next version: the wall clock, or the smallest float above the last one.
    pub fn next(&self) -> Version {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0);
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let last_time = f64::from_bits(last);
            // Positive floats order like their bits, so +1 is the next representable float.
            let time = if now > last_time { now } else { f64::from_bits(last + 1) };
            match self.last.compare_exchange_weak(last, time.to_bits(), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    return Version { time, node: self.node };
                }
                Err(current) => last = current,
            }
        }
    }

    /// The latest time issued or observed.
    pub fn last(&self) -> f64 {
        f64::from_bits(self.last.load(Ordering::Relaxed))
    }

    /// Raises the floor so later versions exceed `time` (used after replaying writes).
    pub fn observe(&self, time: f64) {
        if time > 0.0 {
            self.last.fetch_max(time.to_bits(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_strictly_increase() {
        let clock = VersionClock::new(1, 0.0);
        let mut last = clock.next().time;
        for _ in 0..10_000 {
            let next = clock.next().time;
            assert!(next > last);
            last = next;
        }
    }

    #[test]
    fn floor_in_the_future_is_respected() {
        let future = 1e15;
        let clock = VersionClock::new(2, future);
        assert!(clock.next().time > future);
        assert_eq!(clock.next().node, 2);
    }
}
