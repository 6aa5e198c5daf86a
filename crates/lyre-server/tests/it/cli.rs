//! The command line as a client of a running server: operations, status, stop,
//! restart, and `lyre load` with its pieces.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

/// Runs `lyre` with `args`, without credentials from the environment.
fn lyre(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lyre"))
        .args(args)
        .env_remove("HDB_ADMIN_USERNAME")
        .env_remove("HDB_ADMIN_PASSWORD")
        .env_remove("CLI_TARGET")
        .output()
        .expect("run lyre")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn operations_run_from_the_command_line_with_json_values_and_yaml_or_json_output() {
    let s = TestServer::start().await;
    let target = format!("target=http://127.0.0.1:{}/", s.ops_port);
    let who = [target.as_str(), "username=admin", "password=password"];
    let run = |words: &[&str]| {
        let mut args: Vec<&str> = words.to_vec();
        args.extend_from_slice(&who);
        lyre(&args)
    };
    let created = run(&["create_table", "database=dev", "table=dog", "primary_key=id"]);
    assert!(created.status.success(), "{created:?}");
    assert!(text(&created).contains("successfully created"), "{}", text(&created));
    // Values that read as JSON are JSON (an array of records, a number).
    let inserted = run(&["insert", "database=dev", "table=dog", r#"records=[{"id":1,"age":5},{"id":2}]"#, "json=true"]);
    assert!(inserted.status.success(), "{inserted:?}");
    let answer: Value = serde_json::from_slice(&inserted.stdout).expect("json=true prints JSON");
    assert_eq!(answer["inserted_hashes"], json!([1, 2]));
    let found = run(&[
        "search_by_value",
        "database=dev",
        "table=dog",
        "search_attribute=age",
        "search_value=5",
        r#"get_attributes=["id"]"#,
    ]);
    assert_eq!(text(&found).trim(), "- id: 1", "YAML by default");
    // A refusal prints the server's error and exits non-zero.
    let refused = run(&["describe_table", "database=dev", "table=cat"]);
    assert!(!refused.status.success());
    assert!(text(&refused).contains("Table 'dev.cat' does not exist"), "{}", text(&refused));
    let wrong = lyre(&["describe_all", &target, "username=admin", "password=nope"]);
    assert!(!wrong.status.success());
    let bad = lyre(&["describe_all", &target, "nonsense"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("'nonsense' is not key=value"), "{bad:?}");
}

#[tokio::test]
async fn status_stop_and_restart_act_on_the_server_of_a_root() {
    let mut s = TestServer::start().await;
    let root = s.root().to_str().unwrap().to_string();
    let target = format!("http://127.0.0.1:{}/", s.ops_port);
    let status = lyre(&["status", "--root", &root]);
    assert_eq!(text(&status).trim(), format!("lyre:\n  status: running\n  pid: {}", s.pid()));

    let restarted = lyre(&["restart", "--target", &target, "--username", USER, "--password", PASSWORD]);
    assert!(restarted.status.success(), "{restarted:?}");
    assert_eq!(text(&restarted).trim(), "message: Restarting Lyre. This may take up to 60 seconds.");
    // Back on the same process.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !s.op_request(&json!({"operation": "get_status"})).send().await.is_ok_and(|r| r.status() == 200) {
        assert!(std::time::Instant::now() < deadline, "not back after a restart");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let stopped = lyre(&["stop", "--root", &root]);
    assert!(stopped.status.success(), "{stopped:?}");
    assert_eq!(text(&stopped).trim(), "Stopping Lyre.");
    s.wait_exit();
    assert_eq!(text(&lyre(&["status", "--root", &root])).trim(), "lyre:\n  status: stopped");
    let again = lyre(&["stop", "--root", &root]);
    assert!(!again.status.success());
}

#[tokio::test]
async fn a_csv_file_loads_in_pieces_in_order() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dogs.csv");
    // About 5 MB: two pieces. A quoted newline and a bad row along the way.
    let mut csv = String::from("id,name,note\n");
    let rows = 60_000;
    for id in 1..=rows {
        if id == 7 {
            csv.push_str("7,Seven,\"two\nlines\"\n");
        } else if id == 50_000 {
            csv.push_str("50000,Bad,x,extra\n");
        } else {
            csv.push_str(&format!("{id},dog number {id},{}\n", "n".repeat(60)));
        }
    }
    assert!(csv.len() as u64 > lyre_server::client::load::PIECE_BYTES, "{}", csv.len());
    std::fs::write(&path, &csv).unwrap();
    let target = format!("http://127.0.0.1:{}/", s.ops_port);
    let loaded = lyre(&[
        "load",
        path.to_str().unwrap(),
        "--table",
        "dog",
        "--database",
        "dev",
        "--target",
        &target,
        "--username",
        USER,
        "--password",
        PASSWORD,
    ]);
    assert!(loaded.status.success(), "{loaded:?}");
    assert_eq!(text(&loaded).trim(), format!("loaded {} of {rows} rows into dev.dog", rows - 1));
    let stderr = String::from_utf8_lossy(&loaded.stderr);
    assert!(stderr.contains("rows rejected"), "the bad row is reported: {stderr}");
    let seven = s
        .ok(json!({"operation": "search_by_hash", "database": "dev", "table": "dog", "hash_values": [7, 60000],
        "get_attributes": ["id", "note"]}))
        .await;
    assert_eq!(seven[0]["note"], "two\nlines");
    assert_eq!(seven[1]["id"], 60_000);
    let counted = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await;
    assert_eq!(counted["record_count"], rows - 1);
}
