//! insert, update, upsert, delete: response shapes and all-or-nothing batches.

use serde_json::{Value, json};

use crate::support::TestServer;

async fn dog_table() -> TestServer {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s
}

fn dog(op: &str, records: Value) -> Value {
    json!({"operation": op, "database": "dev", "table": "dog", "records": records})
}

async fn all(s: &TestServer) -> Value {
    s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*"}))
        .await
}

#[tokio::test]
async fn insert_reports_written_skipped_and_new_attributes() {
    let s = dog_table().await;
    let inserted = s
        .ok(dog(
            "insert",
            json!([{"id": 1, "dog_name": "Penny", "age": 5}, {"id": 2, "dog_name": "Kato"}, {"dog_name": "NoId"}]),
        ))
        .await;
    let keys: Vec<&str> = inserted.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["message", "new_attributes", "txn_time", "inserted_hashes", "skipped_hashes"]);
    assert_eq!(inserted["message"], "inserted 3 of 3 records");
    assert_eq!(inserted["new_attributes"], json!(["dog_name", "age"]));
    assert_eq!(inserted["skipped_hashes"], json!([]));
    let generated = inserted["inserted_hashes"][2].as_str().expect("a generated UUID");
    assert_eq!(generated.len(), 36);
    assert_eq!(&inserted["inserted_hashes"].as_array().unwrap()[..2], &[json!(1), json!(2)]);
    assert!(inserted["txn_time"].as_f64().unwrap() > 1.7e12);

    let again = s.ok(dog("insert", json!([{"id": 1, "dog_name": "Dup"}, {"id": 3, "dog_name": "New"}]))).await;
    assert_eq!(again["message"], "inserted 1 of 2 records");
    assert_eq!(again["inserted_hashes"], json!([3]));
    assert_eq!(again["skipped_hashes"], json!([1]));
    assert_eq!(again["new_attributes"], json!([]));

    let found =
        s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1, generated]})).await;
    assert_eq!(found[0]["dog_name"], "Penny", "a skipped duplicate changes nothing");
    assert_eq!(found[1]["id"], generated);
    // Dynamic tables stamp records; client-supplied stamps are ignored.
    assert_eq!(found[0]["__createdtime__"], found[0]["__updatedtime__"]);
    assert_eq!(found[0]["__createdtime__"], inserted["txn_time"]);
    let stamped = s.ok(dog("insert", json!([{"id": 9, "__createdtime__": 5}]))).await;
    let nine = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [9]})).await;
    assert_eq!(nine[0]["__createdtime__"], stamped["txn_time"]);
}

#[tokio::test]
async fn keys_of_every_accepted_type_and_strictness() {
    let s = dog_table().await;
    let inserted = s
        .ok(dog(
            "insert",
            json!([{"id": 1}, {"id": "1"}, {"id": 1.5}, {"id": -7}, {"id": 0}, {"id": ""}, {"id": "abc-def"}]),
        ))
        .await;
    assert_eq!(inserted["inserted_hashes"], json!([1, "1", 1.5, -7, 0, "", "abc-def"]));
    // Numbers sort before strings, numerically.
    let ids: Vec<Value> = all(&s).await.as_array().unwrap().iter().map(|r| r["id"].clone()).collect();
    assert_eq!(ids, [json!(-7), json!(0), json!(1), json!(1.5), json!(""), json!("1"), json!("abc-def")]);
    // "1" and 1 are different keys.
    assert_eq!(
        s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": ["1"]})).await,
        json!([{"id": "1", "__createdtime__": inserted["txn_time"], "__updatedtime__": inserted["txn_time"]}])
    );
}

#[tokio::test]
async fn a_batch_with_one_bad_record_writes_none() {
    let s = dog_table().await;
    let good = json!({"id": 1, "name": "fine"});
    s.fails(dog("insert", json!([good, {"id": true}])), 400, "Invalid primary key type: boolean").await;
    s.fails(dog("insert", json!([good, {"id": {"a": 1}}])), 400, "Invalid primary key type: object").await;
    // An array of strings and numbers is a composite key (as Harper); anything else is not.
    s.fails(dog("insert", json!([good, {"id": [[1], 2]}])), 400, "Invalid primary key type: array").await;
    s.fails(dog("insert", json!([good, {"id": "x".repeat(2000)}])), 400, "Primary key size is too large: 2000").await;
    s.fails(dog("insert", json!([good, 5])), 400, "'records[1]' must be of type object").await;
    s.fails(dog("insert", json!([good, {"": 1}])), 400, "Invalid attribute name: ''").await;
    s.fails(
        dog("insert", json!([good, {"a/b": 1}])),
        400,
        "Attribute names cannot include backticks or forward slashes",
    )
    .await;
    s.fails(dog("insert", json!({"id": 1})), 400, "'records' must be an array").await;
    s.fails(dog("insert", Value::Null), 400, "'records' must be an array").await;
    s.fails(json!({"operation": "insert", "database": "dev", "table": "dog"}), 400, "'records' is required").await;
    s.fails(json!({"operation": "insert", "database": "dev", "records": []}), 400, "'table' is required").await;
    s.fails(
        json!({"operation": "insert", "database": "dev", "table": "nope", "records": []}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
    s.fails(
        json!({"operation": "insert", "database": "nope", "table": "dog", "records": []}),
        404,
        "database 'nope' does not exist",
    )
    .await;
    assert_eq!(all(&s).await, json!([]), "nothing from a rejected batch may be written");
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await;
    assert_eq!(described["attributes"].as_array().unwrap().len(), 3, "no attribute from a rejected batch may appear");
    assert_eq!(s.ok(dog("insert", json!([]))).await["message"], "inserted 0 of 0 records");
}

#[tokio::test]
async fn long_values_nested_objects_and_arrays_are_stored_and_searchable() {
    let s = dog_table().await;
    let long = "y".repeat(5000);
    s.ok(dog(
        "insert",
        json!([{"id": 1, "big": long, "obj": {"a": {"b": [1, 2]}}, "tags": ["x", "y"], "nothing": null}]),
    ))
    .await;
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1]})).await;
    assert_eq!(found[0]["big"], long);
    assert_eq!(found[0]["obj"], json!({"a": {"b": [1, 2]}}));
    let by_long = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "big", "value": long})).await;
    assert_eq!(by_long.as_array().unwrap().len(), 1, "a value longer than an index key still matches exactly");
    let other = format!("{}z", "y".repeat(4999));
    let none = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "big", "value": other})).await;
    assert_eq!(none, json!([]), "two long values sharing an index prefix are told apart");
    let by_tag = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "tags", "value": "y"})).await;
    assert_eq!(by_tag[0]["id"], 1, "arrays are indexed per element");
    let nulls = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "nothing", "value": null})).await;
    assert_eq!(nulls[0]["id"], 1, "null is indexed");
}

#[tokio::test]
async fn update_merges_and_skips_missing_records() {
    let s = dog_table().await;
    s.ok(dog("insert", json!([{"id": 1, "name": "Penny", "age": 5}, {"id": 2, "name": "Kato", "age": 3}]))).await;
    let updated = s.ok(dog("update", json!([{"id": 1, "weight": 35}, {"id": 999, "age": 1}]))).await;
    let keys: Vec<&str> = updated.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["message", "new_attributes", "txn_time", "update_hashes", "skipped_hashes"]);
    assert_eq!(updated["message"], "updated 1 of 2 records");
    assert_eq!(updated["update_hashes"], json!([1]));
    assert_eq!(updated["skipped_hashes"], json!([999]));
    assert_eq!(updated["new_attributes"], json!(["weight"]));
    let one = &s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1]})).await[0];
    assert_eq!((one["name"].clone(), one["age"].clone(), one["weight"].clone()), (json!("Penny"), json!(5), json!(35)));
    assert!(one["__updatedtime__"].as_f64() > one["__createdtime__"].as_f64());
    s.ok(dog("update", json!([{"id": 1, "age": null}]))).await;
    let one = &s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1]})).await[0];
    assert_eq!(one["age"], Value::Null);
    // The old index entry is gone: age 5 no longer finds record 1.
    assert_eq!(
        s.ok(
            json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "age", "value": 5})
        )
        .await,
        json!([])
    );
    s.fails(
        dog("update", json!([{"name": "no id"}])),
        400,
        "a valid hash attribute must be provided with update record, check log for more info",
    )
    .await;
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "nope", "records": []}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
}

#[tokio::test]
async fn upsert_inserts_or_merges() {
    let s = dog_table().await;
    s.ok(dog("insert", json!([{"id": 2, "name": "Kato", "age": 3}]))).await;
    let upserted =
        s.ok(dog("upsert", json!([{"id": 2, "upserted": true}, {"id": 10, "name": "Upsy"}, {"name": "no id"}]))).await;
    let keys: Vec<&str> = upserted.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["message", "new_attributes", "txn_time", "upserted_hashes"]);
    assert_eq!(upserted["message"], "upserted 3 of 3 records");
    assert_eq!(&upserted["upserted_hashes"].as_array().unwrap()[..2], &[json!(2), json!(10)]);
    let two = &s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [2]})).await[0];
    assert_eq!((two["name"].clone(), two["upserted"].clone()), (json!("Kato"), json!(true)));
    // One batch naming a record twice: the second upsert merges over the first.
    s.ok(dog("upsert", json!([{"id": 3, "name": "Twice", "age": 1}, {"id": 3, "age": 2}]))).await;
    let three = &s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [3]})).await[0];
    assert_eq!((three["name"].clone(), three["age"].clone()), (json!("Twice"), json!(2)), "{three}");
}

#[tokio::test]
async fn delete_reports_deleted_and_skipped_and_cleans_indexes() {
    let s = dog_table().await;
    s.ok(dog("insert", json!([{"id": 100, "tag": "t"}, {"id": 101, "tag": "t"}, {"id": 102, "tag": "t"}]))).await;
    let deleted = s.ok(json!({"operation": "delete", "database": "dev", "table": "dog", "ids": [100, 999]})).await;
    let keys: Vec<&str> = deleted.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["message", "deleted_hashes", "skipped_hashes", "txn_time"]);
    assert_eq!(deleted["message"], "1 of 2 records successfully deleted");
    assert_eq!(deleted["deleted_hashes"], json!([100]));
    assert_eq!(deleted["skipped_hashes"], json!([999]));
    let single = s.ok(json!({"operation": "delete", "database": "dev", "table": "dog", "hash_values": [101]})).await;
    assert_eq!(single["message"], "1 of 1 record successfully deleted");
    let left = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "tag", "value": "t"})).await;
    assert_eq!(left.as_array().unwrap().iter().map(|r| r["id"].clone()).collect::<Vec<_>>(), [json!(102)]);
    s.fails(json!({"operation": "delete", "database": "dev", "table": "dog"}), 400, "'ids' is required").await;
    s.fails(json!({"operation": "delete", "database": "dev", "table": "dog", "ids": 5}), 400, "'ids' must be an array")
        .await;
    s.fails(
        json!({"operation": "delete", "database": "dev", "table": "dog", "ids": [true]}),
        400,
        "Invalid primary key type: boolean",
    )
    .await;
    s.fails(
        json!({"operation": "delete", "database": "dev", "table": "nope", "ids": [1]}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
    assert_eq!(
        s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await["record_count"],
        1
    );
}

#[tokio::test]
async fn generated_integer_keys_pass_over_keys_the_batch_names() {
    let s = TestServer::start().await;
    let attributes = json!([{"name": "id", "type": "Int", "is_primary_key": true}, {"name": "name", "type": "String"}]);
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "n", "primary_key": "id", "attributes": attributes})).await;
    let records = json!([{"name": "a"}, {"id": 2, "name": "b"}, {"name": "c"}, {"id": 1, "name": "d"}]);
    let inserted = s.ok(json!({"operation": "insert", "database": "dev", "table": "n", "records": records})).await;
    assert_eq!(inserted["inserted_hashes"], json!([3, 2, 4, 1]), "{inserted}");
    let names = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "n", "ids": [1, 2, 3, 4], "get_attributes": ["name"]})).await;
    assert_eq!(names, json!([{"name": "d"}, {"name": "b"}, {"name": "a"}, {"name": "c"}]));
}
