//! `/metrics` read by a Prometheus text-format parser, and Harper's analytics
//! operations over the aggregates the server writes each period.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

/// Scrapes `/metrics` as the super user and parses it.
async fn scrape(s: &TestServer) -> prometheus_parse::Scrape {
    let response = s.client.get(s.url("/metrics")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let text = response.text().await.unwrap();
    let lines = text.lines().map(|line| Ok(line.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("Prometheus's text format")
}

/// The value of the sample `name` whose labels include all of `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == name && labels.iter().all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
        .map(|sample| match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(ref buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        })
}

#[tokio::test]
async fn the_metrics_endpoint_counts_requests_storage_writers_and_jobs() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    for id in 1..=3 {
        s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": id}]})).await;
    }
    s.fails(
        json!({"operation": "insert", "database": "dev", "table": "cat", "records": [{"id": 1}]}),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
    s.ok(json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "data": "id\n4\n"})).await;
    let (status, _, _) = s.rest_send(reqwest::Method::GET, "/nothing/here", None, &[]).await;
    assert_eq!(status, 404);
    s.fails(json!({"operation": "make_it_so"}), 400, "Operation 'make_it_so' not found").await;

    let scrape = scrape(&s).await;
    let inserts = [("interface", "operations"), ("path", "insert"), ("method", "POST"), ("status", "200")];
    assert_eq!(value(&scrape, "lyre_requests_total", &inserts), Some(3.0));
    let refused = [("path", "insert"), ("status", "404")];
    assert_eq!(value(&scrape, "lyre_requests_total", &refused), Some(1.0));
    // Names that are no resource or operation are not kept.
    let rest = [("interface", "rest"), ("path", "unknown"), ("method", "GET"), ("status", "404")];
    assert_eq!(value(&scrape, "lyre_requests_total", &rest), Some(1.0));
    assert_eq!(value(&scrape, "lyre_requests_total", &[("path", "nothing")]), None);
    let made_up = [("interface", "operations"), ("path", "unknown"), ("status", "400")];
    assert_eq!(value(&scrape, "lyre_requests_total", &made_up), Some(1.0));
    let durations = value(&scrape, "lyre_request_duration_seconds_count", &[("interface", "operations")]);
    assert!(durations.unwrap_or(0.0) >= 5.0, "{durations:?}");
    let records = value(&scrape, "lyre_table_records", &[("database", "dev"), ("table", "dog")]).unwrap();
    assert!((3.0..=4.0).contains(&records), "{records}");
    assert!(value(&scrape, "lyre_table_size_bytes", &[("table", "dog")]).unwrap() > 0.0);
    assert!(value(&scrape, "lyre_database_size_bytes", &[("database", "dev")]).unwrap() > 0.0);
    assert!(value(&scrape, "lyre_writer_commits_total", &[("database", "dev")]).unwrap() >= 4.0);
    assert!(value(&scrape, "lyre_writer_batch_size_count", &[("database", "dev")]).unwrap() >= 4.0);
    assert_eq!(value(&scrape, "lyre_jobs_started_total", &[]), Some(1.0));
    assert!(value(&scrape, "lyre_process_resident_memory_bytes", &[]).unwrap() > 1e6);

    // Only a super user reads them.
    let anonymous = s.client.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": {}})).await;
    s.ok(json!({"operation": "add_user", "username": "rita", "password": "pw", "role": "reader", "active": true}))
        .await;
    let reader = s.client.get(s.url("/metrics")).basic_auth("rita", Some("pw")).send().await.unwrap();
    assert_eq!(reader.status(), 403);
}

/// Before the first aggregate is written (a minute after a fresh start, by
/// default) the analytics table has no attributes to search by: the operations
/// answer that nothing was recorded, not "unknown attribute".
#[tokio::test]
async fn analytics_operations_answer_before_the_first_aggregate() {
    let s = TestServer::start().await;
    assert_eq!(s.ok(json!({"operation": "describe_metric", "metric": "duration"})).await, json!({}));
    let every = s.ok(json!({"operation": "list_metrics", "metric_types": ["builtin", "custom"]})).await;
    assert_eq!(every, json!(["table-size", "database-size", "resource-usage"]));
    assert_eq!(s.ok(json!({"operation": "get_analytics", "metric": "duration"})).await, json!([]));
}

#[tokio::test]
async fn rest_requests_are_counted_under_the_resource_they_name() {
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    let schema = "type Dog @table(database: \"dev\") @export { id: ID @primaryKey }";
    let s = TestServer::start_app(
        &[("components/dev/config.yaml", config), ("components/dev/schema.graphql", schema)],
        &[],
    )
    .await;
    for (path, status) in [("/Dog/1", 404), ("/Dog/2?x=1", 404), ("/Dog/", 200), ("/Dog", 200)] {
        assert_eq!(s.rest_send(reqwest::Method::GET, path, None, &[]).await.0, status, "{path}");
    }
    let scrape = scrape(&s).await;
    let dog = |status| [("interface", "rest"), ("path", "Dog"), ("method", "GET"), ("status", status)];
    assert_eq!(value(&scrape, "lyre_requests_total", &dog("404")), Some(2.0));
    assert_eq!(value(&scrape, "lyre_requests_total", &dog("200")), Some(2.0));
}

#[tokio::test]
async fn requests_are_aggregated_into_harpers_analytics() {
    let s = TestServer::start_with(&[("ANALYTICS_AGGREGATEPERIOD", "1")]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    for id in 1..=4 {
        s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": id}]})).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let inserts = loop {
        let found = s
            .ok(json!({"operation": "get_analytics", "metric": "duration",
            "conditions": [{"attribute": "path", "value": "insert"}]}))
            .await;
        let count: i64 = found.as_array().unwrap().iter().map(|r| r["count"].as_i64().unwrap_or(0)).sum();
        if count >= 4 {
            break found;
        }
        assert!(Instant::now() < deadline, "no aggregate of the inserts: {found}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let first = &inserts[0];
    assert_eq!(
        (first["metric"].clone(), first["method"].clone(), first["type"].clone()),
        (json!("duration"), json!("POST"), json!("operation"))
    );
    assert_eq!(first["id"], first["time"], "the id is the aggregate's time");
    for stat in ["mean", "median", "p90", "p95", "p99"] {
        assert!(first[stat].as_f64().is_some_and(|ms| ms >= 0.0), "{stat} in {first}");
    }
    assert_eq!(first["period"], 1000);
    // A time window, and a selection of attributes.
    let time = first["time"].as_f64().unwrap();
    let windowed = s
        .ok(json!({"operation": "get_analytics", "metric": "duration", "start_time": time,
        "end_time": time + 1.0, "get_attributes": ["path", "count"]}))
        .await;
    assert!(windowed.as_array().unwrap().iter().all(|r| r.as_object().unwrap().len() == 2), "{windowed}");
    assert!(windowed.as_array().unwrap().iter().any(|r| r["path"] == "insert"), "{windowed}");
    let later = s.ok(json!({"operation": "get_analytics", "metric": "duration", "start_time": time + 3.6e6})).await;
    assert_eq!(later, json!([]));

    // Storage figures are written each period too.
    let sizes = s
        .ok(json!({"operation": "get_analytics", "metric": "table-size",
        "conditions": [{"attribute": "table", "value": "dog"}]}))
        .await;
    assert!(
        sizes.as_array().unwrap().iter().any(|r| r["database"] == "dev" && r["size"].as_i64() > Some(0)),
        "{sizes}"
    );

    assert_eq!(
        s.ok(json!({"operation": "list_metrics"})).await,
        json!(["table-size", "database-size", "resource-usage"])
    );
    let every = s.ok(json!({"operation": "list_metrics", "metric_types": ["builtin", "custom"]})).await;
    for name in ["duration", "success", "table-size"] {
        assert!(every.as_array().unwrap().contains(&json!(name)), "{name} in {every}");
    }
    let described = s.ok(json!({"operation": "describe_metric", "metric": "duration"})).await;
    let attributes: Vec<(String, String)> = described["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_string(), a["type"].as_str().unwrap().to_string()))
        .collect();
    assert!(attributes.contains(&("p95".into(), "number".into())), "{described}");
    assert!(attributes.contains(&("path".into(), "string".into())), "{described}");
    assert_eq!(s.ok(json!({"operation": "describe_metric", "metric": "nothing"})).await, json!({}));
    let unknown: Value = s.ok(json!({"operation": "get_analytics", "metric": "nothing"})).await;
    assert_eq!(unknown, json!([]));
}
