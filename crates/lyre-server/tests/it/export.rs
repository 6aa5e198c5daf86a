//! `export_local`: a search's results written as JSON or CSV to a file, as a job;
//! its refusals; and no partial file when it fails.

use serde_json::{Value, json};

use crate::support::{TestServer, run_job};

/// A dynamic table dev.dog with three records whose attributes differ.
async fn dogs(s: &TestServer) {
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [
        {"id": 1, "name": "Penny", "age": 5},
        {"id": 2, "name": "Kato \"K\"", "tags": ["a", 2], "meta": {"x": 1}},
        {"id": 3, "name": "Riley", "age": 9, "good": true},
    ]}))
    .await;
}

fn search(conditions: Value) -> Value {
    json!({"operation": "search_by_conditions", "database": "dev", "table": "dog", "conditions": conditions,
        "sort": {"attribute": "id"}})
}

#[tokio::test]
async fn an_export_writes_the_searchs_results_as_json_or_csv() {
    let s = TestServer::start().await;
    dogs(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let everyone = search(json!([{"attribute": "id", "comparator": "greater_than", "value": 0}]));

    let job = run_job(
        &s,
        json!({"operation": "export_local", "format": "json", "path": dir.path(),
        "filename": "dogs", "search_operation": everyone.clone()}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["type"], "export_local");
    let path = dir.path().join("dogs.json");
    assert_eq!(job["result"], json!({"message": "Successfully exported JSON locally.", "path": path}));
    assert_eq!(job["message"], format!("Successfully completed job: {}", job["id"].as_str().unwrap()));
    let exported: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let names: Vec<&str> = exported.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Penny", "Kato \"K\"", "Riley"]);
    assert_eq!(exported[1]["meta"], json!({"x": 1}));

    // CSV: every attribute of the table is a column, though the first record lacks
    // some; strings quoted, numbers and booleans bare, nested values as JSON.
    let job = run_job(
        &s,
        json!({"operation": "export_local", "format": "csv", "path": dir.path(),
        "filename": "dogs", "search_operation": everyone}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    let csv = std::fs::read_to_string(dir.path().join("dogs.csv")).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    for column in ["\"id\"", "\"name\"", "\"age\"", "\"tags\"", "\"meta\"", "\"good\""] {
        assert!(header.split(',').any(|c| c == column), "{column} missing from {header}");
    }
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[1].contains("\"Kato \"\"K\"\"\""), "{csv}");
    assert!(rows[1].contains("\"[\"\"a\"\",2]\""), "{csv}");
    assert!(rows[2].contains(",true") || rows[2].starts_with("true"), "{csv}");

    // A selection narrows the columns; an empty result is an empty array.
    let job = run_job(
        &s,
        json!({"operation": "export_local", "format": "json", "path": dir.path(),
        "filename": "none", "search_operation": {"operation": "search_by_value", "database": "dev", "table": "dog",
            "search_attribute": "name", "search_value": "Nobody", "get_attributes": ["id"]}}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(std::fs::read_to_string(dir.path().join("none.json")).unwrap(), "[]");
    // search_by_hash works too, and no temporary file is left behind.
    let job = run_job(
        &s,
        json!({"operation": "export_local", "format": "csv", "path": dir.path(),
        "filename": "two", "search_operation": {"operation": "search_by_hash", "database": "dev", "table": "dog",
            "hash_values": [2], "get_attributes": ["id", "name"]}}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(std::fs::read_to_string(dir.path().join("two.csv")).unwrap(), "\"id\",\"name\"\n2,\"Kato \"\"K\"\"\"");
    let left: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert!(left.iter().all(|name| !name.ends_with(".partial")), "{left:?}");
}

#[tokio::test]
async fn a_bad_export_is_refused_before_a_job_starts() {
    let s = TestServer::start().await;
    dogs(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let good = search(json!([{"attribute": "id", "value": 1}]));
    let export = |changes: Value| {
        let mut body = json!({"operation": "export_local", "format": "json", "path": path,
            "search_operation": good.clone()});
        for (key, value) in changes.as_object().unwrap() {
            if value.is_null() {
                body.as_object_mut().unwrap().remove(key);
            } else {
                body[key] = value.clone();
            }
        }
        body
    };
    s.fails(export(json!({"format": null})), 400, "format missing").await;
    s.fails(export(json!({"format": "xml"})), 400, "format invalid. must be one of the following values: json, csv")
        .await;
    s.fails(export(json!({"path": null})), 400, "path is missing.").await;
    let missing = dir.path().join("nowhere");
    s.fails(export(json!({"path": missing})), 400, &format!("path '{}' does not exist", missing.display())).await;
    s.fails(export(json!({"filename": "../escape"})), 400, "'filename' must be a file name, not '../escape'").await;
    s.fails(export(json!({"search_operation": {"operation": "insert"}})), 400,
        "searchOperation.operation must be one of the following values: search_by_value, search_by_hash, search_by_id, search_by_conditions").await;
    // The search itself is checked at once: an unknown table, an unknown attribute.
    s.fails(
        export(json!({"search_operation": {"operation": "search_by_value", "database": "dev",
        "table": "cat", "search_attribute": "id", "search_value": 1}})),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
    // Only a super user exports (the file is the server's).
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": {"dev": {"tables": {"dog": {
        "read": true, "insert": false, "update": false, "delete": false}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "rita", "password": "pw", "role": "reader", "active": true}))
        .await;
    let (status, body) = s.op_as("rita", "pw", &export(json!({}))).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was written");
}
