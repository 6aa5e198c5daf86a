//! Jobs: `search_jobs_by_start_date`, `delete_records_before`, and who sees which.

use serde_json::json;

use crate::support::{TestServer, run_job};

#[tokio::test]
async fn jobs_are_found_by_start_date_and_each_user_sees_their_own() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "add_role", "role": "loader", "permission": {"dev": {"tables": {"dog": {
        "read": true, "insert": true, "update": true, "delete": false}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "lou", "password": "pw", "role": "loader", "active": true})).await;
    let before = chrono_now();
    let mine = run_job(
        &s,
        json!({"operation": "csv_data_load", "database": "dev", "table": "dog",
        "data": "id,name\n1,Penny\n"}),
    )
    .await;
    let (status, theirs) = s
        .op_as(
            "lou",
            "pw",
            &json!({"operation": "csv_data_load", "database": "dev", "table": "dog",
            "data": "id,name\n2,Kato\n"}),
        )
        .await;
    assert_eq!(status, 200, "{theirs}");
    let theirs = crate::support::finished_job(&s, theirs["job_id"].as_str().unwrap()).await;
    let after = chrono_now();

    let window = json!({"operation": "search_jobs_by_start_date", "from_date": before, "to_date": after});
    let found = s.ok(window.clone()).await;
    let ids: Vec<&str> = found.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [mine["id"].as_str().unwrap(), theirs["id"].as_str().unwrap()], "{found}");
    let first = &found[0];
    assert_eq!(first["status"], "COMPLETE");
    assert_eq!(first["user"], "admin");
    let start = first["start_datetime"].as_f64().unwrap();
    let converted = first["start_datetime_converted"].as_str().unwrap();
    assert_eq!(lyre_core::parse_iso8601(converted), Some(start), "{first}");
    assert!(first["end_datetime_converted"].is_string(), "{first}");
    // A user who is not a super user sees only their own.
    let (status, own) = s.op_as("lou", "pw", &window).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own.as_array().unwrap().len(), 1, "{own}");
    assert_eq!(own[0]["user"], "lou");
    // Bounds are exclusive, and dates are checked.
    let (status, none) =
        s.op(json!({"operation": "search_jobs_by_start_date", "from_date": after, "to_date": "2999-01-01"})).await;
    assert_eq!((status, none), (200, json!([])));
    s.fails(
        json!({"operation": "search_jobs_by_start_date", "from_date": "yesterday", "to_date": after}),
        400,
        "Invalid 'from' date 'yesterday', must be in ISO-8601 format (YYYY-MM-DD)",
    )
    .await;
    s.fails(
        json!({"operation": "search_jobs_by_start_date", "from_date": before}),
        400,
        "Invalid 'to' date '', must be in ISO-8601 format (YYYY-MM-DD)",
    )
    .await;
}

#[tokio::test]
async fn records_created_before_a_date_are_deleted_as_a_job() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1}, {"id": 2}]})).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let cut = chrono_now();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 3}]})).await;
    // Updating an old record keeps its creation time.
    s.ok(json!({"operation": "update", "database": "dev", "table": "dog", "records": [{"id": 2, "name": "Kato"}]}))
        .await;

    let job =
        run_job(&s, json!({"operation": "delete_records_before", "database": "dev", "table": "dog", "date": cut}))
            .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["type"], "delete_records_before");
    assert_eq!(job["message"], "2 of 2 records successfully deleted");
    let left = s
        .ok(json!({"operation": "search_by_hash", "database": "dev", "table": "dog", "hash_values": [1, 2, 3],
        "get_attributes": ["id"]}))
        .await;
    assert_eq!(left, json!([{"id": 3}]));
    let job =
        run_job(&s, json!({"operation": "delete_files_before", "database": "dev", "table": "dog", "date": cut})).await;
    assert_eq!(job["message"], "No records found to delete", "{job}");

    // A declared table counts by its @createdTime attribute; one without is refused.
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "plain", "primary_key": "id",
        "attributes": [{"name": "id", "type": "Int"}]}))
        .await;
    let job = run_job(
        &s,
        json!({"operation": "delete_records_before", "database": "dev", "table": "plain",
        "date": "2999-01-01"}),
    )
    .await;
    assert_eq!(job["status"], "ERROR", "{job}");
    assert_eq!(
        job["message"],
        "Table must have a '__createdtime__' attribute or @createdTime timestamp defined to perform this operation"
    );

    s.fails(json!({"operation": "delete_records_before"}), 400, "'table' is required. 'date' is required").await;
    s.fails(
        json!({"operation": "delete_records_before", "table": "dog", "date": 5}),
        400,
        "'date' must be a valid date",
    )
    .await;
    s.fails(
        json!({"operation": "delete_records_before", "database": "dev", "table": "dog", "date": "20240102x"}),
        400,
        "'date' must be in ISO 8601 date format",
    )
    .await;
    s.fails(
        json!({"operation": "delete_records_before", "database": "dev", "table": "cat", "date": "2024-01-02"}),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
}

/// Now as ISO 8601 with milliseconds (UTC).
fn chrono_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
