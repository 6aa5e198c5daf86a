//! Shutdown and crashes: acknowledged writes survive, no batch is torn.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

const BATCHES: u64 = 60;
const PER_BATCH: u64 = 50;

/// Sends `BATCHES` inserts of `PER_BATCH` records from 6 concurrent clients; returns
/// the batches acknowledged with 200.
async fn insert_batches(client: reqwest::Client, url: String) -> HashSet<u64> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            loop {
                let batch = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if batch >= BATCHES {
                    return acked;
                }
                let records: Vec<Value> = (0..PER_BATCH)
                    .map(|i| json!({"id": batch * PER_BATCH + i, "batch": batch, "pad": "x".repeat(200)}))
                    .collect();
                let body =
                    json!({"operation": "insert", "database": "dev", "table": "t", "records": records}).to_string();
                let sent = client
                    .post(&url)
                    .basic_auth(USER, Some(PASSWORD))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if let Ok(response) = sent
                    && response.status() == 200
                    && response.text().await.is_ok_and(|t| t.contains(&format!("inserted {PER_BATCH} of {PER_BATCH}")))
                {
                    acked.push(batch);
                }
            }
        }));
    }
    let mut acked = HashSet::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    acked
}

/// Asserts every acknowledged batch is whole and no batch is partly present.
async fn assert_all_or_nothing(s: &TestServer, acked: &HashSet<u64>) {
    let all = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "t", "attribute": "id", "value": "*", "get_attributes": ["id", "batch"]})).await;
    let mut per_batch = std::collections::HashMap::<u64, u64>::new();
    for record in all.as_array().unwrap() {
        *per_batch.entry(record["batch"].as_u64().unwrap()).or_default() += 1;
    }
    for (batch, count) in &per_batch {
        assert_eq!(*count, PER_BATCH, "batch {batch} is torn: {count} of {PER_BATCH} records");
    }
    for batch in acked {
        assert!(per_batch.contains_key(batch), "acknowledged batch {batch} is missing");
    }
    // The index agrees with the records.
    for batch in per_batch.keys().take(5) {
        let found = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "t", "attribute": "batch", "value": batch})).await;
        assert_eq!(found.as_array().unwrap().len() as u64, PER_BATCH);
    }
}

#[tokio::test]
async fn sigterm_during_writes_commits_or_rejects_whole_batches() {
    let mut s = TestServer::start_with(&[("STORAGE_WRITEASYNC", "false")]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    let writer = tokio::spawn(insert_batches(s.client.clone(), s.url("/")));
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert!(s.stop("-TERM"), "a graceful shutdown exits with status 0");
    let acked = writer.await.unwrap();
    s.start_again().await;
    assert_all_or_nothing(&s, &acked).await;
}

#[tokio::test]
async fn kill_9_during_writes_loses_no_acknowledged_batch() {
    let mut s = TestServer::start_with(&[("STORAGE_WRITEASYNC", "false")]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    for round in 0..3 {
        let writer = tokio::spawn(insert_batches(s.client.clone(), s.url("/")));
        tokio::time::sleep(std::time::Duration::from_millis(100 + 40 * round)).await;
        s.stop("-KILL");
        let acked = writer.await.unwrap();
        s.start_again().await;
        assert_all_or_nothing(&s, &acked).await;
        // Start the next round on an empty table.
        s.ok(json!({"operation": "drop_table", "database": "dev", "table": "t"})).await;
        s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    }
}
