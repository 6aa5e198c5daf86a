//! YCSB over REST: the standard core workloads against an exported `usertable`.
//!
//! Records are YCSB's (ten 100-byte fields) under keys `user<hash>`; keys are chosen
//! by a scrambled zipfian distribution (θ = 0.99), "latest" for workload D. Reads are
//! `GET /usertable/<key>`, updates and inserts `PUT /usertable/<key>`, scans
//! `GET /usertable/?id=ge=<key>&limit(<n>)`.
//!
//! | workload | mix |
//! |---|---|
//! | load | insert every record |
//! | A | 50% read, 50% update |
//! | B | 95% read, 5% update |
//! | C | 100% read |
//! | D | 95% read (latest), 5% insert |
//! | E | 95% scan (1–100 records), 5% insert |
//! | F | 50% read, 50% read-modify-write |

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rand::Rng;
use serde_json::{Map, Value};

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::{LoadSpec, one_per_success, run_load};

/// The exported table's URL name.
pub const TABLE: &str = "usertable";

/// The `schema.graphql` that exports the table, for both servers.
pub const SCHEMA: &str = "type usertable @table(database: \"ycsb\") @export {\n  id: ID @primaryKey\n  field0: String\n  field1: String\n  field2: String\n  field3: String\n  field4: String\n  field5: String\n  field6: String\n  field7: String\n  field8: String\n  field9: String\n}\ntype counter @table(database: \"ycsb\") @export {\n  id: ID @primaryKey\n}\n";

/// Which YCSB workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Workload {
    /// Insert every record.
    Load,
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// Read only.
    C,
    /// 95% read of recent records, 5% insert.
    D,
    /// 95% short scan, 5% insert.
    E,
    /// 50% read, 50% read-modify-write.
    F,
}

/// Parameters of a YCSB run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct YcsbParams {
    /// Which workload.
    pub workload: Workload,
    /// Records loaded.
    pub records: u64,
    /// Operations per round (ignored by `load`, which inserts `records`).
    pub operations: u64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// The key of record `n`: YCSB's hashed insert order.
pub fn key(n: u64) -> String {
    format!("user{:020}", fnv64(n))
}

fn fnv64(n: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in n.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A record's body: ten 100-byte fields, different for each key and write.
fn body(n: u64, salt: u64) -> Bytes {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(n ^ salt.rotate_left(32));
    let mut fields = Map::new();
    for f in 0..10 {
        let text: String = (0..100).map(|_| char::from(b'a' + rng.random_range(0..26u8))).collect();
        fields.insert(format!("field{f}"), Value::String(text));
    }
    Bytes::from(Value::Object(fields).to_string())
}

/// The record the ceiling server answers with: record 0 as stored (key and fields).
pub fn fixed_record() -> Vec<u8> {
    stored_record(0)
}

/// Record `n` as a server answers a `GET` of it once loaded: its key and fields, as JSON.
pub fn stored_record(n: u64) -> Vec<u8> {
    let mut record: Map<String, Value> = serde_json::from_slice(&body(n, 0)).unwrap_or_default();
    record.insert("id".into(), Value::String(key(n)));
    Value::Object(record).to_string().into_bytes()
}

/// YCSB's zipfian generator over `0..n` (Gray et al., as in YCSB's
/// `ZipfianGenerator`), with the item scrambled by a hash so hot keys spread.
pub struct Zipfian {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipfian {
    /// A generator over `n` items with YCSB's constant θ = 0.99.
    pub fn new(n: u64) -> Self {
        let theta = 0.99;
        let zeta = |count: u64| (1..=count).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n.max(1));
        let zeta2 = zeta(2);
        let eta = (1.0 - (2.0 / n.max(2) as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Self { n: n.max(1), theta, zetan, alpha: 1.0 / (1.0 - theta), eta }
    }

    /// The next rank (0 is the most popular).
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n - 1)
    }

    /// A scrambled item in `0..n`.
    pub fn item(&self, u: f64) -> u64 {
        fnv64(self.rank(u)) % self.n
    }
}

/// Loads `records` records untimed (when the table does not hold them yet).
pub async fn ensure_loaded(
    target: &Target,
    client: &HttpClient,
    records: u64,
    concurrency: usize,
) -> anyhow::Result<()> {
    let (status, bytes) = client.call(&Call::Get(format!("/{TABLE}/{}", key(records - 1)))).await?;
    if status == 200 && !bytes.is_empty() {
        return Ok(());
    }
    let load = YcsbParams { workload: Workload::Load, records, operations: records, concurrency };
    let measured = run(target, client, load, 0).await?;
    anyhow::ensure!(measured.errors == 0, "{}: {} of {records} inserts failed", target.name, measured.errors);
    Ok(())
}

/// Runs one round of `params` against `target`.
pub async fn run(
    target: &Target,
    client: &HttpClient,
    params: YcsbParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    let YcsbParams { workload, records, operations, concurrency } = params;
    let zipf = Arc::new(Zipfian::new(records));
    let inserted = Arc::new(AtomicU64::new(records));
    let salt = round as u64 + 1;
    let requests = if workload == Workload::Load { records } else { operations };
    let request = Arc::new(move |i: u64| -> Call {
        let mut rng = rand::rng();
        let read = |n: u64| Call::Get(format!("/{TABLE}/{}", key(n)));
        let update = |n: u64| Call::Put(format!("/{TABLE}/{}", key(n)), body(n, salt));
        let insert = || {
            let n = inserted.fetch_add(1, Ordering::Relaxed);
            Call::Put(format!("/{TABLE}/{}", key(n)), body(n, salt))
        };
        let hot = |rng: &mut rand::rngs::ThreadRng| zipf.item(rng.random::<f64>());
        let p: f64 = rng.random();
        match workload {
            Workload::Load => Call::Put(format!("/{TABLE}/{}", key(i)), body(i, 0)),
            Workload::A => {
                if p < 0.5 {
                    read(hot(&mut rng))
                } else {
                    update(hot(&mut rng))
                }
            }
            Workload::B => {
                if p < 0.95 {
                    read(hot(&mut rng))
                } else {
                    update(hot(&mut rng))
                }
            }
            Workload::C => read(hot(&mut rng)),
            Workload::D => {
                if p < 0.95 {
                    // "latest": the most recent inserts are the hottest.
                    let newest = inserted.load(Ordering::Relaxed);
                    read(newest.saturating_sub(1 + zipf.rank(rng.random::<f64>())).min(newest - 1))
                } else {
                    insert()
                }
            }
            Workload::E => {
                if p < 0.95 {
                    let start = key(hot(&mut rng));
                    let length = rng.random_range(1..=100);
                    Call::Get(format!("/{TABLE}/?id=ge={start}&limit({length})"))
                } else {
                    insert()
                }
            }
            Workload::F => {
                let n = hot(&mut rng);
                if p < 0.5 { read(n) } else { Call::ReadModifyWrite(format!("/{TABLE}/{}", key(n)), body(n, salt)) }
            }
        }
    });
    let name = match workload {
        Workload::Load => "ycsb-load",
        Workload::A => "ycsb-a",
        Workload::B => "ycsb-b",
        Workload::C => "ycsb-c",
        Workload::D => "ycsb-d",
        Workload::E => "ycsb-e",
        Workload::F => "ycsb-f",
    };
    let check = one_per_success();
    run_load(target, client, LoadSpec { workload: name, round, requests, concurrency, request, check }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_prefers_few_items_and_stays_in_range() {
        let zipf = Zipfian::new(1000);
        let mut counts = vec![0u32; 1000];
        for i in 0..100_000 {
            let u = (i as f64 + 0.5) / 100_000.0;
            counts[zipf.item(u) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        assert!(top10 > 30_000, "the 10 hottest of 1000 keys take {top10} of 100000 draws");
        assert!(counts.iter().filter(|c| **c > 0).count() > 500, "the tail is still visited");
    }

    #[test]
    fn keys_are_stable_and_distinct() {
        assert_eq!(key(7), key(7));
        assert_ne!(key(7), key(8));
        assert_eq!(key(7).len(), 24);
    }
}
