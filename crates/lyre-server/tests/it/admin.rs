//! Running the server over the API: configuration, restart, status values,
//! `read_log` and `system_information`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::rest::{SHOP_CONFIG, SHOP_SCHEMA};
use crate::support::TestServer;

/// Polls `get_status` until a freshly started process answers (one with no
/// configuration change waiting for a restart).
async fn wait_for_restart(s: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = s.op_request(&json!({"operation": "get_status"})).send().await
            && let Ok(status) = response.json::<Value>().await
            && status["restartRequired"] == false
        {
            return;
        }
        assert!(Instant::now() < deadline, "the server did not come back within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// When the server answering started, as `system_information` says (ms).
async fn started(s: &TestServer) -> i64 {
    let time = s.ok(json!({"operation": "system_information", "attributes": ["time"]})).await;
    time["time"]["process_started"].as_i64().unwrap()
}

#[tokio::test]
async fn a_configuration_change_applies_at_restart_and_nothing_committed_is_lost() {
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[],
    )
    .await;
    let pid = s.pid();
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let config = s.ok(json!({"operation": "get_configuration"})).await;
    assert_eq!(config["http"]["maxRequestBodySize"], 10_000_000, "{config}");
    assert_eq!(config["operationsApi"]["network"]["port"], s.ops_port);

    // A value given as text is read as the key's type; the answer says what
    // waits for a restart, and the old file is kept.
    let set = s.ok(json!({"operation": "set_configuration", "http_maxRequestBodySize": "1000"})).await;
    assert_eq!(
        set["message"],
        "Configuration successfully set. You must restart Lyre for new config settings to take effect."
    );
    assert_eq!(set["restart_required"], json!(["http.maxRequestBodySize"]));
    let backups: Vec<_> = std::fs::read_dir(s.root().join("backup")).unwrap().collect();
    assert_eq!(backups.len(), 1);
    let status = s.ok(json!({"operation": "get_status"})).await;
    assert_eq!(status["restartRequired"], true, "{status}");
    // The running server still takes large bodies.
    let big = json!({"name": "x".repeat(2_000)});
    let (code, _, body) = s.rest_send(reqwest::Method::PUT, "/products/big", Some(&big), &[]).await;
    assert_eq!(code, 204, "{body}");
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 2, "name": "Kato"}]}))
        .await;

    let before = started(&s).await;
    let restarting = s.ok(json!({"operation": "restart"})).await;
    assert_eq!(restarting["message"], "Restarting Lyre. This may take up to 60 seconds.");
    wait_for_restart(&s).await;
    assert_eq!(s.pid(), pid, "the process restarts itself in place");
    assert!(started(&s).await > before, "a restart in place is a new start");
    let kato = s
        .ok(json!({"operation": "search_by_hash", "database": "dev", "table": "dog", "hash_values": [2],
        "get_attributes": ["name"]}))
        .await;
    assert_eq!(kato, json!([{"name": "Kato"}]), "a write committed before the restart is there after it");
    let config = s.ok(json!({"operation": "get_configuration"})).await;
    assert_eq!(config["http"]["maxRequestBodySize"], 1000);
    let (code, body) = s
        .op(json!({"operation": "insert", "database": "dev", "table": "dog",
        "records": [{"id": 3, "note": "x".repeat(2_000)}]}))
        .await;
    assert_eq!(code, 200, "the Operations API keeps its own limit: {body}");
    let (code, _, body) = s.rest_send(reqwest::Method::PUT, "/products/big2", Some(&big), &[]).await;
    assert_eq!(code, 413, "REST bodies are now limited to 1000 bytes: {body}");
}

#[tokio::test]
async fn a_bad_configuration_change_is_refused_and_the_file_is_unchanged() {
    let s = TestServer::start().await;
    let file = s.root().join("lyre-config.yaml");
    let before = std::fs::read_to_string(&file).unwrap();
    s.fails(
        json!({"operation": "set_configuration", "http_colour": "blue"}),
        400,
        "unknown configuration key 'http_colour'",
    )
    .await;
    s.fails(
        json!({"operation": "set_configuration", "logging_level": "debug", "http_cors": "sometimes"}),
        400,
        "'http_cors' must be a boolean, not string \"sometimes\"",
    )
    .await;
    let (code, body) = s.op(json!({"operation": "set_configuration", "http_port": 70_000})).await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("'http_port' "), "{body}");
    s.fails(
        json!({"operation": "set_configuration"}),
        400,
        "set_configuration needs at least one configuration key, e.g. logging_level",
    )
    .await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    assert!(!s.root().join("backup").exists());
    s.fails(json!({"operation": "restart_service", "service": "everything"}), 400, "Invalid service").await;
    // None of this is for a user who is not a super user.
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": {}})).await;
    s.ok(json!({"operation": "add_user", "username": "rita", "password": "pw", "role": "reader", "active": true}))
        .await;
    for operation in
        ["get_configuration", "set_configuration", "restart", "read_log", "system_information", "get_status"]
    {
        let (code, body) = s.op_as("rita", "pw", &json!({"operation": operation, "logging_level": "info"})).await;
        assert_eq!(code, 403, "{operation}: {body}");
    }
}

#[tokio::test]
async fn status_values_are_set_read_and_cleared() {
    let s = TestServer::start().await;
    assert_eq!(s.ok(json!({"operation": "get_status", "id": "maintenance"})).await, json!({}));
    assert_eq!(s.ok(json!({"operation": "set_status", "id": "maintenance", "status": "draining"})).await, json!({}));
    assert_eq!(s.ok(json!({"operation": "set_status", "status": "up"})).await, json!({}));
    let one = s.ok(json!({"operation": "get_status", "id": "maintenance"})).await;
    assert_eq!((one["id"].clone(), one["status"].clone()), (json!("maintenance"), json!("draining")), "{one}");
    let all = s.ok(json!({"operation": "get_status"})).await;
    let ids: Vec<&str> = all["systemStatus"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["primary", "maintenance"], "{all}");
    assert_eq!(all["restartRequired"], false);
    assert_eq!(s.ok(json!({"operation": "clear_status", "id": "maintenance"})).await, json!({"message": true}));
    assert_eq!(s.ok(json!({"operation": "get_status", "id": "maintenance"})).await, json!({}));

    s.fails(
        json!({"operation": "set_status", "id": "mood", "status": "x"}),
        400,
        "'id' must be one of [primary, maintenance, availability]",
    )
    .await;
    s.fails(json!({"operation": "set_status", "id": "primary"}), 400, "'status' is required").await;
    s.fails(json!({"operation": "set_status", "status": ""}), 400, "'status' is not allowed to be empty").await;
    s.fails(
        json!({"operation": "set_status", "status": "x".repeat(513)}),
        400,
        "'status' length must be less than or equal to 512 characters long",
    )
    .await;
    s.fails(
        json!({"operation": "set_status", "id": "availability", "status": "Maybe"}),
        400,
        "Status \"availability\" only accepts these values: Available, Unavailable",
    )
    .await;
}

#[tokio::test]
async fn the_log_is_read_back_filtered_and_paged() {
    let s = TestServer::start_with(&[("LOGGING_LEVEL", "info")]).await;
    // Reloading the components logs more entries.
    s.ok(json!({"operation": "restart_service", "service": "custom_functions"})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let entries = s.ok(json!({"operation": "read_log", "level": "info"})).await;
        if entries.as_array().unwrap().iter().any(|e| e["message"].as_str().unwrap().contains("Lyre is running")) {
            break entries;
        }
        assert!(Instant::now() < deadline, "no start-up entry in {entries}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let first = entries.as_array().unwrap().iter().find(|e| e["message"].as_str().unwrap().contains("Lyre is running"));
    let first = first.unwrap();
    assert_eq!(first["level"], "info");
    assert_eq!(first["tags"], json!(["lyre_server::listen"]));
    assert!(lyre_core::parse_iso8601(first["timestamp"].as_str().unwrap()).is_some(), "{first}");
    assert!(first["thread"].is_string());

    let running = s.ok(json!({"operation": "read_log", "filter": "Lyre is running", "from": first["timestamp"]})).await;
    assert_eq!(running.as_array().unwrap().len(), 1, "{running}");
    let none = s.ok(json!({"operation": "read_log", "until": "2000-01-01T00:00:00Z"})).await;
    assert_eq!(none, json!([]));
    let all = s.ok(json!({"operation": "read_log"})).await.as_array().unwrap().clone();
    let newest = s.ok(json!({"operation": "read_log", "order": "desc", "limit": 1})).await;
    assert_eq!(newest[0]["timestamp"], all.last().unwrap()["timestamp"]);
    let second = s.ok(json!({"operation": "read_log", "start": 1, "limit": 1})).await;
    assert!(all.len() >= 2, "start-up and the reload logged: {all:?}");
    assert_eq!(second[0], all[1]);
    // A level keeps exactly the entries of that level (the start-up's are info).
    let infos =
        s.ok(json!({"operation": "read_log", "level": "info", "until": all.last().unwrap()["timestamp"]})).await;
    let expected: Vec<&Value> = all.iter().filter(|e| e["level"] == "info").collect();
    assert!(!expected.is_empty());
    // (An entry logged since, in the same millisecond as the last, may follow.)
    let infos = infos.as_array().unwrap();
    assert_eq!(infos.iter().take(expected.len()).collect::<Vec<_>>(), expected);
    assert!(infos.iter().all(|e| e["level"] == "info"), "{infos:?}");

    s.fails(
        json!({"operation": "read_log", "level": "loud"}),
        400,
        "'level' must be one of [notify, fatal, error, warn, info, debug, trace]",
    )
    .await;
    s.fails(json!({"operation": "read_log", "order": "up"}), 400, "'order' must be one of [asc, desc]").await;
    s.fails(json!({"operation": "read_log", "from": "last week"}), 400, "'from' date 'last week' is invalid.").await;
    s.fails(json!({"operation": "read_log", "limit": 0}), 400, "'limit' must be between 1 and 100000").await;
}

#[tokio::test]
async fn system_information_answers_every_part_or_those_asked_for() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1}, {"id": 2}]})).await;
    let all = s.ok(json!({"operation": "system_information"})).await;
    for part in
        ["system", "time", "cpu", "memory", "disk", "network", "harperdb_processes", "table_size", "metrics", "threads"]
    {
        assert!(all.get(part).is_some(), "{part} missing from {all}");
    }
    assert!(all["memory"]["total"].as_u64().unwrap() > 0, "{}", all["memory"]);
    assert!(all["memory"]["rss"].as_u64().unwrap() > 0);
    assert!(all["cpu"]["cores"].as_u64().unwrap() >= 1);
    assert_eq!(all["harperdb_processes"]["core"][0]["pid"], s.pid());
    let dog = all["table_size"].as_array().unwrap().iter().find(|t| t["schema"] == "dev" && t["table"] == "dog");
    assert_eq!(dog.expect("dev.dog in table_size")["record_count"], 2);
    assert_eq!(all["metrics"]["dev"]["tables"]["dog"]["entryCount"], 2);
    assert!(all["threads"].as_array().unwrap().iter().any(|t| t["name"] == "lyre-worker"), "{}", all["threads"]);

    let some = s.ok(json!({"operation": "system_information", "attributes": ["memory", "time", "nonsense"]})).await;
    let keys: Vec<&String> = some.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["time", "memory"]);
    assert!(some["time"]["current"].as_i64().unwrap() > 1_700_000_000_000);
}
