//! search_by_id, search_by_value, search_by_conditions.

use serde_json::{Value, json};

use crate::support::TestServer;

async fn kennel() -> TestServer {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [
        {"id": 1, "name": "Penny", "age": 5, "breed": "Lab"},
        {"id": 2, "name": "Kato", "age": 4, "breed": "Labrador Mix"},
        {"id": 3, "name": "Riley", "age": 7, "breed": "Black Lab"},
        {"id": 4, "name": "Blossom", "age": 12, "breed": "Pit Bull"},
        {"id": 5, "name": "Rosco", "age": 5, "breed": "Shepherd Mix"},
        {"id": 6, "name": "Lab", "age": 9, "breed": "Husky"},
        {"id": 7, "name": "New7", "age": 2, "breed": null},
        {"id": 8, "name": "Legacy", "age": 4, "breed": "Corgi"},
        {"id": 10, "name": "Upsy", "age": 2, "breed": "Lab Mix"}
    ]}))
    .await;
    s
}

fn ids(results: &Value) -> Vec<i64> {
    results.as_array().expect("an array").iter().map(|r| r["id"].as_i64().expect("numeric id")).collect()
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort();
    v
}

async fn conditions(s: &TestServer, extra: Value) -> Value {
    let mut body = json!({"operation": "search_by_conditions", "database": "dev", "table": "dog"});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    s.ok(body).await
}

#[tokio::test]
async fn search_by_id_keeps_request_order_and_projects() {
    let s = kennel().await;
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [3, 99, 1], "get_attributes": ["name", "id"]})).await;
    assert_eq!(found, json!([{"name": "Riley", "id": 3}, {"name": "Penny", "id": 1}]));
    let star = s.ok(json!({"operation": "search_by_hash", "database": "dev", "table": "dog", "hash_values": [7], "get_attributes": ["*"]})).await;
    let keys: Vec<&str> = star[0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "__createdtime__", "__updatedtime__", "name", "age", "breed"]);
    s.fails(
        json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": ["nope"]}),
        400,
        "unknown attribute 'nope'",
    )
    .await;
    s.fails(
        json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": []}),
        400,
        "'get_attributes' must contain at least 1 item",
    )
    .await;
    s.fails(
        json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": "*"}),
        400,
        "'get_attributes' must be an array",
    )
    .await;
    s.fails(json!({"operation": "search_by_id", "database": "dev", "table": "dog"}), 400, "'ids' is required").await;
    s.fails(
        json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [true]}),
        400,
        "'ids' must be strings or numbers",
    )
    .await;
    s.fails(
        json!({"operation": "search_by_id", "database": "dev", "table": "nope", "ids": [1]}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
    assert_eq!(
        s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": []})).await,
        json!([])
    );
}

#[tokio::test]
async fn search_by_value_exact_and_wildcards() {
    let s = kennel().await;
    let by = |attribute: &str, value: Value| json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": attribute, "value": value});
    assert_eq!(ids(&s.ok(by("breed", json!("Lab"))).await), [1]);
    assert_eq!(ids(&s.ok(by("age", json!(5))).await), [1, 5]);
    assert_eq!(ids(&s.ok(by("age", json!("5"))).await), Vec::<i64>::new(), "types are strict");
    assert_eq!(
        ids(&s.ok(by("breed", json!("*"))).await),
        [1, 2, 3, 4, 5, 6, 7, 8, 10],
        "* is every record in key order"
    );
    assert_eq!(ids(&s.ok(by("breed", json!("Lab*"))).await), [1, 10, 2]);
    assert_eq!(sorted(ids(&s.ok(by("breed", json!("*Mix"))).await)), [2, 5, 10]);
    assert_eq!(sorted(ids(&s.ok(by("breed", json!("*ab*"))).await)), [1, 2, 3, 10]);
    assert_eq!(ids(&s.ok(by("id", json!(4))).await), [4], "the primary key is searchable");
    let legacy = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "search_attribute": "name", "search_value": "Kato"})).await;
    assert_eq!(ids(&legacy), [2]);
    let paged = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "limit": 3, "offset": 2})).await;
    assert_eq!(ids(&paged), [3, 4, 5]);
    // Numbers written as text (a client passing on query parameters), as Harper takes them.
    let as_text = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "limit": "3", "offset": " 2"})).await;
    assert_eq!(ids(&as_text), [3, 4, 5]);
    let reversed = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "desc": true, "limit": 2})).await;
    assert_eq!(ids(&reversed), [10, 8]);
    let reverse = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "reverse": true, "limit": 1})).await;
    assert_eq!(ids(&reverse), [10]);
    let by_age = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "sort": {"attribute": "age", "descending": true}, "limit": 3})).await;
    assert_eq!(ids(&by_age), [4, 6, 3]);
    let projected = s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": 1, "get_attributes": ["breed"]})).await;
    assert_eq!(projected, json!([{"breed": "Lab"}]));
    s.fails(by("nope", json!(1)), 400, "unknown attribute 'nope'").await;
    s.fails(
        json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "age"}),
        400,
        "'value' is required",
    )
    .await;
    s.fails(
        json!({"operation": "search_by_value", "database": "dev", "table": "dog", "value": 1}),
        400,
        "'attribute' is required",
    )
    .await;
    s.fails(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "limit": -1}), 400, "'limit' must be a non-negative integer").await;
    s.fails(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "limit": "two"}), 400, "'limit' must be a non-negative integer").await;
}

#[tokio::test]
async fn every_comparator_and_alias() {
    let s = kennel().await;
    let cases: &[(&[&str], &str, Value, &[i64])] = &[
        (&["equals", "eq", "equal"], "age", json!(5), &[1, 5]),
        (&["not_equal", "ne", "notEqual"], "age", json!(5), &[2, 3, 4, 6, 7, 8, 10]),
        (&["greater_than", "gt", ">", "greaterThan"], "age", json!(5), &[3, 4, 6]),
        (&["greater_than_equal", "ge", ">=", "greaterThanEqual"], "age", json!(5), &[1, 3, 4, 5, 6]),
        (&["less_than", "lt", "<", "lessThan"], "age", json!(5), &[2, 7, 8, 10]),
        (&["less_than_equal", "le", "<=", "lessThanEqual"], "age", json!(5), &[1, 2, 5, 7, 8, 10]),
        (&["between", "..."], "age", json!([4, 7]), &[1, 2, 3, 5, 8]),
        (&["starts_with", "sw", "startsWith"], "breed", json!("Lab"), &[1, 2, 10]),
        (&["ends_with", "ew", "endsWith"], "breed", json!("Mix"), &[2, 5, 10]),
        (&["contains", "ct"], "breed", json!("ab"), &[1, 2, 3, 10]),
        (&["equals"], "breed", Value::Null, &[7]),
        (&["greater_than"], "id", json!(6), &[7, 8, 10]),
        (&["less_than"], "name", json!("L"), &[2, 4]),
    ];
    for (names, attribute, value, expected) in cases {
        for name in *names {
            let found =
                conditions(&s, json!({"conditions": [{"attribute": attribute, "comparator": name, "value": value}]}))
                    .await;
            assert_eq!(sorted(ids(&found)), *expected, "{attribute} {name} {value}");
            let legacy = conditions(
                &s,
                json!({"conditions": [{"search_attribute": attribute, "search_type": name, "search_value": value}]}),
            )
            .await;
            assert_eq!(sorted(ids(&legacy)), *expected, "legacy {attribute} {name} {value}");
        }
    }
    // A condition without a comparator is an equality.
    assert_eq!(ids(&conditions(&s, json!({"conditions": [{"attribute": "name", "value": "Lab"}]})).await), [6]);
    // Cross-type comparisons follow key order: numbers are above booleans, below strings.
    assert_eq!(
        ids(&conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "gt", "value": "5"}]})).await),
        Vec::<i64>::new()
    );
    assert_eq!(
        ids(&conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "gt", "value": true}]})).await)
            .len(),
        9
    );
}

#[tokio::test]
async fn results_come_in_index_order_and_sort_limit_offset_apply() {
    let s = kennel().await;
    let over_five =
        conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "greater_than", "value": 5}]})).await;
    assert_eq!(ids(&over_five), [3, 6, 4], "unsorted results follow the driving index");
    let desc = conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "ge", "value": 2}], "sort": {"attribute": "age", "descending": true}})).await;
    assert_eq!(ids(&desc), [4, 6, 3, 5, 1, 8, 2, 10, 7]);
    let next = conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "ge", "value": 2}], "sort": {"attribute": "age", "next": {"attribute": "id", "descending": true}}})).await;
    assert_eq!(ids(&next), [10, 7, 8, 2, 5, 1, 3, 6, 4]);
    let page = conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "ge", "value": 2}], "sort": {"attribute": "age"}, "offset": 1, "limit": 2})).await;
    assert_eq!(ids(&page), [10, 2]);
    let other_sort = conditions(&s, json!({"conditions": [{"attribute": "breed", "comparator": "starts_with", "value": "Lab"}], "sort": {"attribute": "name"}})).await;
    assert_eq!(ids(&other_sort), [2, 1, 10]);
    let projected =
        conditions(&s, json!({"conditions": [{"attribute": "id", "value": 4}], "get_attributes": ["name", "age"]}))
            .await;
    assert_eq!(projected, json!([{"name": "Blossom", "age": 12}]));
    let none =
        conditions(&s, json!({"conditions": [{"attribute": "age", "comparator": "ge", "value": 2}], "limit": 0})).await;
    assert_eq!(none, json!([]));
}

#[tokio::test]
async fn nested_groups_and_or() {
    let s = kennel().await;
    let nested = conditions(
        &s,
        json!({"operator": "and", "conditions": [
            {"attribute": "age", "comparator": "between", "value": [4, 7]},
            {"operator": "or", "conditions": [
                {"attribute": "breed", "comparator": "starts_with", "value": "Lab"},
                {"attribute": "name", "comparator": "equals", "value": "Rosco"}
            ]}
        ]}),
    )
    .await;
    assert_eq!(sorted(ids(&nested)), [1, 2, 5]);
    let either = conditions(&s, json!({"operator": "OR", "conditions": [{"attribute": "age", "value": 12}, {"attribute": "breed", "value": "Husky"}]})).await;
    assert_eq!(sorted(ids(&either)), [4, 6]);
    let mixed = conditions(&s, json!({"operator": "or", "conditions": [{"attribute": "age", "value": 12}, {"attribute": "breed", "comparator": "contains", "value": "Mix"}]})).await;
    assert_eq!(sorted(ids(&mixed)), [2, 4, 5, 10], "an OR with an unindexable branch still finds everything");
    let overlapping = conditions(&s, json!({"operator": "or", "conditions": [{"attribute": "age", "comparator": "ge", "value": 5}, {"attribute": "age", "comparator": "le", "value": 5}]})).await;
    assert_eq!(sorted(ids(&overlapping)), [1, 2, 3, 4, 5, 6, 7, 8, 10], "a union returns each record once");
}

#[tokio::test]
async fn malformed_conditions_are_rejected_with_the_reason() {
    let s = kennel().await;
    let base = |extra: Value| {
        let mut body = json!({"operation": "search_by_conditions", "database": "dev", "table": "dog"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    s.fails(
        base(json!({"conditions": [{"attribute": "age", "comparator": "gte", "value": 1}]})),
        400,
        "Unknown query comparator \"gte\"",
    )
    .await;
    s.fails(
        base(json!({"conditions": [{"attribute": "age", "comparator": "between", "value": 5}]})),
        400,
        "'between' on age needs a value of two elements: [low, high]",
    )
    .await;
    s.fails(base(json!({"conditions": [{"attribute": "nope", "value": 1}]})), 400, "unknown attribute 'nope'").await;
    s.fails(base(json!({"conditions": [{"attribute": "age"}]})), 400, "Search condition for age must have a value")
        .await;
    s.fails(base(json!({})), 400, "'conditions' is required").await;
    s.fails(base(json!({"conditions": []})), 400, "'conditions' must contain at least 1 items").await;
    s.fails(base(json!({"conditions": [5]})), 400, "each condition must be an object").await;
    s.fails(
        base(json!({"operator": "xor", "conditions": [{"attribute": "age", "value": 1}]})),
        400,
        "'operator' must be one of [and, or]",
    )
    .await;
    s.fails(
        base(json!({"conditions": [{"attribute": "age", "value": 1}], "sort": {"attribute": "nope"}})),
        404,
        "nope is not a defined attribute",
    )
    .await;
    s.fails(
        base(json!({"conditions": [{"attribute": ["owner", "name"], "value": 1}]})),
        404,
        "owner is not a defined attribute",
    )
    .await;
    s.fails(
        base(json!({"conditions": [{"attribute": ["a", "b", "c", "d", "e", "f", "g", "h"], "value": 1}]})),
        400,
        "an attribute path reaches through at most 6 relationships",
    )
    .await;
    s.fails(json!({"operation": "search_by_conditions", "database": "dev", "table": "nope", "conditions": [{"attribute": "a", "value": 1}]}), 404, "Table 'dev.nope' does not exist").await;
}

#[tokio::test]
async fn large_results_stream_in_chunks() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "bulk", "primary_key": "id"})).await;
    let records: Vec<Value> = (0..3000).map(|i| json!({"id": i, "group": i % 3, "pad": "p".repeat(100)})).collect();
    s.ok(json!({"operation": "insert", "database": "dev", "table": "bulk", "records": records})).await;
    let search =
        json!({"operation": "search_by_value", "database": "dev", "table": "bulk", "attribute": "group", "value": 1});
    let response = s.op_request(&search).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.content_length().is_none(), "a large result is streamed, not buffered");
    let results: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let ids = ids(&results);
    assert_eq!(ids.len(), 1000);
    assert!(ids.iter().all(|i| i % 3 == 1));
}
