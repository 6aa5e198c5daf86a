//! SQL workloads through the Operations API's `sql` operation, over two dynamic
//! tables loaded untimed: `bench.sql_orders` (100,000 orders: id, customer,
//! amount, status, name) and `bench.sql_customers` (10,000 customers: id, region).
//! The same rows and queries run in SQLite in-process (`floor`), the floor any
//! server answering over HTTP stays above.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rand::Rng;
use serde_json::{Value, json};

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::{LoadSpec, RequestFn, run_load};

/// Orders in the dataset.
pub const ORDERS: u64 = 100_000;
/// Customers in the dataset (each has ten orders).
pub const CUSTOMERS: u64 = 10_000;
const STATUSES: [&str; 5] = ["new", "paid", "packed", "shipped", "returned"];
const REGIONS: [&str; 8] = ["north", "south", "east", "west", "center", "coast", "hills", "islands"];

/// Which query a SQL workload sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum SqlKind {
    /// A point lookup by primary key.
    Point,
    /// An indexed range with ORDER BY and LIMIT 20.
    Range,
    /// All 10,000 customers joined to their 100,000 orders on the indexed
    /// `customer`, counted per region.
    Join,
    /// GROUP BY over all 100,000 orders.
    Group,
    /// A LIKE prefix on an indexed attribute (about 110 rows).
    Like,
}

impl SqlKind {
    /// The workload's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            SqlKind::Point => "sql-point",
            SqlKind::Range => "sql-range",
            SqlKind::Join => "sql-join",
            SqlKind::Group => "sql-group",
            SqlKind::Like => "sql-like",
        }
    }

    /// A query of this kind, its constants drawn from `rng`.
    pub fn query(self, rng: &mut impl Rng) -> String {
        match self {
            SqlKind::Point => format!("SELECT * FROM bench.sql_orders WHERE id = {}", rng.random_range(0..ORDERS)),
            SqlKind::Range => {
                let low = rng.random_range(0..9_900);
                format!("SELECT * FROM bench.sql_orders WHERE amount >= {low} ORDER BY amount LIMIT 20")
            }
            SqlKind::Join => "SELECT c.region, COUNT(*) AS orders FROM bench.sql_customers c \
                 INNER JOIN bench.sql_orders o ON o.customer = c.id GROUP BY c.region"
                .to_string(),
            SqlKind::Group => {
                "SELECT status, COUNT(*) AS n, AVG(amount) AS average FROM bench.sql_orders GROUP BY status".to_string()
            }
            SqlKind::Like => format!(
                "SELECT id, amount FROM bench.sql_orders WHERE name LIKE 'order-{}%'",
                rng.random_range(10..100)
            ),
        }
    }
}

/// Order `id`.
pub fn order(id: u64) -> Value {
    // Amounts spread over 0–10,000 with cents, so a range of 20 is a few rows' worth.
    let amount = ((id * 7_919) % 1_000_000) as f64 / 100.0;
    json!({"id": id, "customer": id % CUSTOMERS, "amount": amount, "status": STATUSES[(id % 5) as usize], "name": format!("order-{id}")})
}

/// Customer `id`.
pub fn customer(id: u64) -> Value {
    json!({"id": id, "region": REGIONS[(id % 8) as usize]})
}

/// Loads both tables untimed, unless they already hold the dataset.
pub async fn ensure_loaded(client: &HttpClient) -> anyhow::Result<()> {
    for (table, rows, make) in
        [("sql_orders", ORDERS, order as fn(u64) -> Value), ("sql_customers", CUSTOMERS, customer)]
    {
        let described = client.op(&json!({"operation": "describe_table", "database": "bench", "table": table})).await;
        if described.ok().and_then(|d| d["record_count"].as_u64()) == Some(rows) {
            continue;
        }
        let _ = client.op(&json!({"operation": "drop_table", "database": "bench", "table": table})).await;
        client
            .op(&json!({"operation": "create_table", "database": "bench", "table": table, "primary_key": "id"}))
            .await?;
        for from in (0..rows).step_by(1_000) {
            let batch: Vec<Value> = (from..(from + 1_000).min(rows)).map(make).collect();
            client.op(&json!({"operation": "insert", "database": "bench", "table": table, "records": batch})).await?;
        }
    }
    Ok(())
}

/// Parameters of a SQL workload.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SqlParams {
    /// Which query.
    pub kind: SqlKind,
    /// Requests per round.
    pub requests: u64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// Counts the rows of an answer, refusing an error or an empty answer (every
/// query of the workloads matches rows).
fn count_rows(status: u16, body: &[u8]) -> Result<u64, String> {
    if status != 200 {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(body)));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match value.as_array().map(Vec::len) {
        Some(0) => Err("no rows".to_string()),
        Some(n) => Ok(n as u64),
        None => Err("not an array".to_string()),
    }
}

/// Timed queries of one kind.
pub async fn run(target: &Target, client: &HttpClient, params: SqlParams, round: usize) -> anyhow::Result<Measurement> {
    let kind = params.kind;
    let request: RequestFn = Arc::new(move |_| {
        let sql = kind.query(&mut rand::rng());
        Call::Op(Bytes::from(json!({"operation": "sql", "sql": sql}).to_string()))
    });
    let spec = LoadSpec {
        workload: kind.name(),
        round,
        requests: params.requests,
        concurrency: params.concurrency,
        request,
        check: Arc::new(count_rows),
    };
    run_load(target, client, spec).await
}

/// The same queries in SQLite in-process over the same rows (with an index on each
/// attribute the queries filter, join or sort on): queries per second, one at a
/// time, per kind.
pub fn floor(requests: u64) -> anyhow::Result<Vec<(SqlKind, f64)>> {
    let conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch(
        "ATTACH DATABASE ':memory:' AS bench;
         CREATE TABLE bench.sql_orders (id INTEGER PRIMARY KEY, customer INTEGER, amount REAL, status TEXT, name TEXT);
         CREATE TABLE bench.sql_customers (id INTEGER PRIMARY KEY, region TEXT);",
    )?;
    {
        let transaction = conn.unchecked_transaction()?;
        let mut insert = transaction.prepare("INSERT INTO bench.sql_orders VALUES (?, ?, ?, ?, ?)")?;
        for id in 0..ORDERS {
            let o = order(id);
            insert.execute(rusqlite::params![
                o["id"].as_i64(),
                o["customer"].as_i64(),
                o["amount"].as_f64(),
                o["status"].as_str(),
                o["name"].as_str()
            ])?;
        }
        drop(insert);
        let mut insert = transaction.prepare("INSERT INTO bench.sql_customers VALUES (?, ?)")?;
        for id in 0..CUSTOMERS {
            let c = customer(id);
            insert.execute(rusqlite::params![c["id"].as_i64(), c["region"].as_str()])?;
        }
        drop(insert);
        transaction.commit()?;
    }
    // LIKE with an index needs SQLite's case-insensitive collation on the column.
    conn.execute_batch(
        "CREATE INDEX bench.orders_customer ON sql_orders (customer);
         CREATE INDEX bench.orders_amount ON sql_orders (amount);
         CREATE INDEX bench.orders_status ON sql_orders (status);
         CREATE INDEX bench.orders_name ON sql_orders (name COLLATE NOCASE);",
    )?;
    let mut rng = rand::rng();
    let mut out = Vec::new();
    for kind in [SqlKind::Point, SqlKind::Range, SqlKind::Join, SqlKind::Group, SqlKind::Like] {
        let count = if matches!(kind, SqlKind::Join | SqlKind::Group) { requests.min(200) } else { requests };
        let started = Instant::now();
        for _ in 0..count {
            let sql = kind.query(&mut rng);
            let mut statement = conn.prepare_cached(&sql)?;
            let rows = statement.query_map([], |_| Ok(()))?.count();
            anyhow::ensure!(rows > 0, "SQLite found no rows for {sql}");
        }
        out.push((kind, count as f64 / started.elapsed().as_secs_f64()));
    }
    Ok(out)
}
