//! Databases, tables, attributes, describe, persistence.

use serde_json::json;

use crate::support::TestServer;

#[tokio::test]
async fn databases_are_created_described_and_dropped() {
    let s = TestServer::start().await;
    assert_eq!(
        s.ok(json!({"operation": "create_database", "database": "dev"})).await,
        json!({"message": "database 'dev' successfully created"})
    );
    s.fails(json!({"operation": "create_database", "database": "dev"}), 400, "database 'dev' already exists").await;
    assert_eq!(
        s.ok(json!({"operation": "create_schema", "schema": "legacy"})).await["message"],
        "database 'legacy' successfully created"
    );
    assert_eq!(s.ok(json!({"operation": "describe_all"})).await, json!({"dev": {}, "legacy": {}}));
    assert_eq!(s.ok(json!({"operation": "describe_database", "database": "dev"})).await, json!({}));
    assert_eq!(
        s.ok(json!({"operation": "drop_schema", "schema": "legacy"})).await,
        json!({"message": "successfully deleted 'legacy'"})
    );
    s.fails(json!({"operation": "drop_database", "database": "legacy"}), 404, "database 'legacy' does not exist").await;
    s.fails(json!({"operation": "describe_database", "database": "nope"}), 404, "database 'nope' does not exist").await;
    s.fails(json!({"operation": "drop_database"}), 400, "'database' is required").await;
    s.fails(
        json!({"operation": "create_database", "database": "a/b"}),
        400,
        "'database' names cannot include backticks or forward slashes",
    )
    .await;
    s.fails(json!({"operation": "create_database", "database": ""}), 400, "'database' is not allowed to be empty")
        .await;
    s.fails(json!({"operation": "create_database", "database": 5}), 400, "'database' must be a string").await;
    // The name is free again after a drop.
    s.ok(json!({"operation": "create_database", "database": "legacy"})).await;
}

#[tokio::test]
async fn tables_have_harpers_describe_shape() {
    let s = TestServer::start().await;
    assert_eq!(
        s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await,
        json!({"message": "table 'dev.dog' successfully created."})
    );
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"}),
        400,
        "Table 'dog' already exists in 'dev'",
    )
    .await;
    // Legacy names, and a table in the default database.
    s.ok(json!({"operation": "create_table", "schema": "dev", "table": "cat", "hash_attribute": "name"})).await;
    s.ok(json!({"operation": "create_table", "table": "plain", "primary_key": "id"})).await;
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await;
    let keys: Vec<&str> = described.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "schema",
            "name",
            "hash_attribute",
            "audit",
            "schema_defined",
            "attributes",
            "db_size",
            "sources",
            "record_count",
            "table_size",
            "db_audit_size"
        ]
    );
    assert_eq!(described["hash_attribute"], "id");
    assert_eq!(described["schema_defined"], false);
    assert_eq!(described["record_count"], 0);
    assert_eq!(
        described["attributes"],
        json!([{"attribute": "id", "is_primary_key": true}, {"attribute": "__createdtime__", "indexed": true}, {"attribute": "__updatedtime__", "indexed": true}])
    );
    s.ok(
        json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "dog_name": "Penny"}]}),
    )
    .await;
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await;
    assert_eq!(described["record_count"], 1);
    assert!(described["last_updated_record"].as_f64().unwrap() > 1.7e12);
    assert_eq!(described["attributes"][3], json!({"attribute": "dog_name", "indexed": true}));
    let db = s.ok(json!({"operation": "describe_schema", "schema": "dev"})).await;
    assert_eq!(db.as_object().unwrap().keys().collect::<Vec<_>>(), ["dog", "cat"]);
    let all = s.ok(json!({"operation": "describe_all"})).await;
    assert!(all["data"]["plain"].is_object());
    assert_eq!(
        s.ok(json!({"operation": "drop_table", "database": "dev", "table": "cat"})).await,
        json!({"message": "successfully deleted table 'dev.cat'"})
    );
    s.fails(
        json!({"operation": "drop_table", "database": "dev", "table": "cat"}),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
    s.fails(
        json!({"operation": "describe_table", "database": "dev", "table": "cat"}),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
}

#[tokio::test]
async fn create_table_validates_its_input() {
    let s = TestServer::start().await;
    s.fails(json!({"operation": "create_table", "database": "dev", "primary_key": "id"}), 400, "'table' is required")
        .await;
    s.fails(json!({"operation": "create_table", "database": "dev", "table": "t"}), 400, "'primary_key' is required")
        .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": 42, "primary_key": "id"}),
        400,
        "'table' must be a string",
    )
    .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "", "primary_key": "id"}),
        400,
        "'table' is not allowed to be empty",
    )
    .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "a/b", "primary_key": "id"}),
        400,
        "'table' names cannot include backticks or forward slashes",
    )
    .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "a/b"}),
        400,
        "'primary_key' names cannot include backticks or forward slashes and cannot be empty",
    )
    .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "k".repeat(201)}),
        400,
        "'primary_key' names cannot be longer than 200 bytes",
    )
    .await;
    // The system database holds Lyre's own tables: clients cannot reshape it.
    let system_change = "the system database's tables cannot be created, dropped or altered";
    for change in [
        json!({"operation": "create_table", "database": "system", "table": "t", "primary_key": "id"}),
        json!({"operation": "drop_table", "database": "system", "table": "hdb_user"}),
        json!({"operation": "create_attribute", "database": "system", "table": "hdb_user", "attribute": "x"}),
        json!({"operation": "drop_attribute", "database": "system", "table": "hdb_user", "attribute": "role"}),
    ] {
        s.fails(change, 400, system_change).await;
    }
    s.ok(json!({"operation": "describe_all"})).await;
    assert_eq!(s.op(json!({"operation": "describe_table", "database": "system", "table": "hdb_user"})).await.0, 200);
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id", "attributes": "x"}),
        400,
        "'attributes' must be an array",
    )
    .await;
    s.fails(
        json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id", "attributes": [5]}),
        400,
        "'attributes[0]' must be of type object",
    )
    .await;
    // Names Harper accepts.
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "has space", "primary_key": "id"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "1abc", "primary_key": "id"})).await;
    // A database that does not exist is created by create_table, as Harper does.
    s.ok(json!({"operation": "create_table", "database": "autodb", "table": "t1", "primary_key": "id"})).await;
    s.ok(json!({"operation": "describe_database", "database": "autodb"})).await;
}

#[tokio::test]
async fn typed_tables_validate_declared_types() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "typed", "primary_key": "id",
        "attributes": [{"name": "id", "type": "Int", "is_primary_key": true}, {"name": "name", "type": "String", "indexed": true}, {"name": "score", "type": "Float"}]}))
        .await;
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "typed"})).await;
    assert_eq!(described["schema_defined"], true);
    assert_eq!(
        described["attributes"],
        json!([{"attribute": "id", "type": "Int", "is_primary_key": true}, {"attribute": "name", "type": "String", "indexed": true}, {"attribute": "score", "type": "Float"}])
    );
    s.fails(
        json!({"operation": "insert", "database": "dev", "table": "typed", "records": [{"id": 1, "name": "ok"}, {"id": "abc", "name": "x"}]}),
        400,
        "Value \"abc\" in property id must be an integer (from -2147483648 to 2147483647)",
    )
    .await;
    s.fails(
        json!({"operation": "insert", "database": "dev", "table": "typed", "records": [{"id": 2, "name": 12345}]}),
        400,
        "Value 12345 in property name must be a string",
    )
    .await;
    // Nothing from the rejected batches was written.
    assert_eq!(s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "typed", "attribute": "id", "value": "*"})).await, json!([]));
    // Integer keys are generated in sequence; undeclared attributes are kept.
    let inserted = s.ok(json!({"operation": "insert", "database": "dev", "table": "typed", "records": [{"name": "a"}, {"name": "b", "extra": true}]})).await;
    assert_eq!(inserted["inserted_hashes"], json!([1, 2]));
    assert_eq!(inserted["new_attributes"], json!([]));
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "typed", "ids": [2]})).await;
    assert_eq!(found, json!([{"id": 2, "name": "b", "extra": true}]));
}

#[tokio::test]
async fn attributes_are_created_with_an_index_over_existing_rows_and_dropped() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id",
        "attributes": [{"name": "id", "type": "Int"}]}))
        .await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "t", "records": [{"id": 1, "color": "red"}, {"id": 2, "color": "blue"}, {"id": 3}]})).await;
    assert_eq!(
        s.ok(json!({"operation": "create_attribute", "database": "dev", "table": "t", "attribute": "color"})).await,
        json!({"message": "attribute 'dev.t.color' successfully created."})
    );
    s.fails(
        json!({"operation": "create_attribute", "database": "dev", "table": "t", "attribute": "color"}),
        400,
        "attribute 'color' already exists in dev.t",
    )
    .await;
    s.fails(
        json!({"operation": "create_attribute", "database": "dev", "table": "t"}),
        400,
        "Attribute name is required",
    )
    .await;
    s.fails(
        json!({"operation": "create_attribute", "database": "dev", "table": "nope", "attribute": "x"}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
    // The new index covers rows written before it existed.
    let red = s.ok(json!({"operation": "search_by_conditions", "database": "dev", "table": "t", "conditions": [{"attribute": "color", "comparator": "equals", "value": "red"}]})).await;
    assert_eq!(red, json!([{"id": 1, "color": "red"}]));
    assert_eq!(
        s.ok(json!({"operation": "drop_attribute", "database": "dev", "table": "t", "attribute": "color"})).await,
        json!({"message": "successfully deleted attribute 'color'"})
    );
    // Dropped already: Harper 5 answers success again (Lyre answered 404).
    assert_eq!(
        s.ok(json!({"operation": "drop_attribute", "database": "dev", "table": "t", "attribute": "color"})).await,
        json!({"message": "successfully deleted attribute 'color'"})
    );
    s.fails(
        json!({"operation": "drop_attribute", "database": "dev", "table": "t", "attribute": "id"}),
        400,
        "You cannot drop a hash attribute",
    )
    .await;
    s.fails(
        json!({"operation": "search_by_conditions", "database": "dev", "table": "t", "conditions": [{"attribute": "color", "value": "red"}]}),
        400,
        "unknown attribute 'color'",
    )
    .await;
}

#[tokio::test]
async fn dropping_an_attribute_of_a_dynamic_table_strips_its_values() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "a", "tmp": 1}]})).await;
    s.fails(
        json!({"operation": "drop_attribute", "database": "dev", "table": "dog", "attribute": "__createdtime__"}),
        400,
        "cannot drop internal timestamp attribute: __createdtime__",
    )
    .await;
    s.ok(json!({"operation": "drop_attribute", "database": "dev", "table": "dog", "attribute": "tmp"})).await;
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": ["*"]})).await;
    assert!(found[0].get("tmp").is_none(), "{found}");
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "dog"})).await;
    assert_eq!(described["record_count"], 1);
}

#[tokio::test]
async fn everything_survives_a_restart() {
    let mut s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "cat", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "Penny", "age": 5}, {"id": 2, "name": "Kato", "age": 3}]})).await;
    s.ok(json!({"operation": "drop_table", "database": "dev", "table": "cat"})).await;
    let before = s.ok(json!({"operation": "describe_all"})).await;
    s.restart().await;
    let after = s.ok(json!({"operation": "describe_all"})).await;
    assert_eq!(before["dev"]["dog"]["attributes"], after["dev"]["dog"]["attributes"]);
    assert!(after["dev"].get("cat").is_none());
    let found = s.ok(json!({"operation": "search_by_conditions", "database": "dev", "table": "dog", "conditions": [{"attribute": "age", "comparator": "gt", "value": 4}]})).await;
    assert_eq!(found[0]["name"], "Penny");
    assert_eq!(found.as_array().unwrap().len(), 1);
    // Writes after the restart get the next versions, and credentials still work.
    let inserted = s
        .ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 3, "name": "Riley"}]}))
        .await;
    assert!(inserted["txn_time"].as_f64().unwrap() > before["dev"]["dog"]["last_updated_record"].as_f64().unwrap());
}
