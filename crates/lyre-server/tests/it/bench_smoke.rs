//! The benchmark instrument works end to end (tiny sizes; no timing is asserted).

use clap::Parser;
use serde_json::Value;

use crate::support::{PASSWORD, TestServer, USER};

fn cli(s: &TestServer, args: &[&str], json: &std::path::Path) -> lyre_bench::cli::Cli {
    let ops = s.url("");
    let rest = s.rest("");
    let pid = s.pid().to_string();
    let mut argv = vec![
        "lyre-bench",
        "--url",
        &ops,
        "--rest",
        &rest,
        "--user",
        USER,
        "--password",
        PASSWORD,
        "--rounds",
        "1",
        "--settle",
        "0",
        "--pid",
        &pid,
    ];
    argv.extend_from_slice(&["--json", json.to_str().unwrap()]);
    argv.extend_from_slice(args);
    lyre_bench::cli::Cli::parse_from(argv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_report_counts_that_add_up() {
    let s = TestServer::start_app(&[("components/ycsb/schema.graphql", lyre_bench::YCSB_SCHEMA)], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("result.json");
    let runs: [&[&str]; 5] = [
        &["ops-insert", "--records", "300", "--batch", "100", "--concurrency", "2"],
        &["ops-search", "--kind", "value", "--records", "300", "--requests", "50"],
        &["ycsb", "load", "--records", "200", "--concurrency", "4"],
        &["ycsb", "a", "--records", "200", "--operations", "300", "--concurrency", "4"],
        &["ycsb", "e", "--records", "200", "--operations", "100", "--concurrency", "4"],
    ];
    for args in runs {
        let measurements = lyre_bench::cli::run(cli(&s, args, &json)).await.unwrap();
        assert_eq!(measurements.len(), 1, "{args:?}");
        let m = &measurements[0];
        assert_eq!(m.errors, 0, "{args:?}");
        let document: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(document["measurements"][0]["requests"], m.requests, "{args:?}");
        let target = &document["summary"]["targets"][0];
        assert!(target["items_per_sec"]["median"].as_f64().unwrap() > 0.0);
        // The server's CPU per request, and the same split by what its threads do.
        let server = &document["measurements"][0]["server"];
        let by_thread = &server["cpu_us_by_thread"];
        let sum = |parts: &[&str]| -> f64 { parts.iter().map(|p| by_thread[p].as_f64().unwrap()).sum() };
        let named = sum(&["request", "writer", "javascript"]);
        let whole = server["cpu_us_per_request"].as_f64().unwrap();
        // The threads' CPU is within the process's (up to two 10 ms clock ticks of
        // the run: the threads and the process are read a moment apart), and what no
        // named thread spent is other. The bound holds with equality when the two
        // ticks are all there is, so it allows for the division's rounding too.
        let slack = 20_000.0 / m.requests as f64 + 1e-6;
        let parts = named + sum(&["other"]);
        assert!(named <= whole + slack, "{args:?}: {server}");
        assert!(parts >= whole - 1e-6 && parts <= whole + slack, "{args:?}: {server}");
        assert!(target["cpu_us_by_thread"]["request"].as_f64().is_some(), "{args:?}: {target}");
    }
    // Counts add up: 300 inserted in 3 requests; the YCSB load put 200 records.
    let inserted = s.ok(serde_json::json!({"operation": "describe_table", "database": "bench", "table": "ycsb"})).await;
    assert_eq!(inserted["record_count"], 300);
    let loaded =
        s.ok(serde_json::json!({"operation": "describe_table", "database": "ycsb", "table": "usertable"})).await;
    assert!(loaded["record_count"].as_u64().unwrap() >= 200);
}
