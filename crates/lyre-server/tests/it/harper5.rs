//! Harper 5's semantics where Lyre used to differ (issue 22), through the real
//! binary: query-string grouping around calls, `!=` on absent and array attributes,
//! text matching of numbers, ranges across types, integral floats in integer
//! attributes, absent properties left out, and dropping an absent attribute.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestServer;

const SCHEMA: &str = r#"
type Item @table(database: "h5") @export(name: "items") {
  id: ID @primaryKey
  name: String @indexed
  price: Float @indexed
  qty: Int @indexed
  tags: [String] @indexed
  any: Any @indexed
  note: String
}
"#;

async fn items() -> TestServer {
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    let s =
        TestServer::start_app(&[("components/h5/config.yaml", config), ("components/h5/schema.graphql", SCHEMA)], &[])
            .await;
    let records = [
        ("1", json!({"name": "a", "price": 10.5, "qty": 5, "tags": ["x", "y"], "any": 5})),
        ("2", json!({"name": "b", "qty": 15, "any": "abc", "tags": ["x"]})),
        ("3", json!({"name": "c", "price": 3, "qty": 25, "any": true})),
        ("4", json!({"name": "d", "price": 20, "any": null, "note": "n"})),
    ];
    for (id, body) in records {
        let (status, _, answer) = s.rest_send(Method::PUT, &format!("/items/{id}"), Some(&body), &[]).await;
        assert_eq!(status, 204, "{answer}");
    }
    s
}

/// The ids a REST query finds, sorted.
async fn found(s: &TestServer, query: &str) -> Vec<String> {
    let (status, _, body) = s.rest_send(Method::GET, &format!("/items/?{query}"), None, &[]).await;
    assert_eq!(status, 200, "{query} answered {body}");
    let mut ids: Vec<String> = body
        .as_array()
        .unwrap_or_else(|| panic!("{query}: not an array: {body}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_separator_next_to_a_call_does_not_group_conditions() {
    let s = items().await;
    assert_eq!(found(&s, "limit(10)&price=gt=4|name=b").await, ["1", "2", "4"]);
    assert_eq!(found(&s, "price=gt=4|name=b&limit(10)").await, ["1", "2", "4"]);
    assert_eq!(found(&s, "select(id,name)&price=gt=4|name=b").await, ["1", "2", "4"]);
    assert_eq!(found(&s, "price=gt=4|name=b&").await, ["1", "2", "4"]);
    assert_eq!(found(&s, "price=gt=4&sort(price)&name=a").await, ["1"]);
    // Two different operators between conditions still mix, and are refused, before
    // the term after the mixed separator is read (a syntax error, not a 404).
    let (status, _, body) = s.rest_send(Method::GET, "/items/?name==a&limit(2)&name==b|price>1", None, &[]).await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/items/?name==a&name==b|nosuch=1", None, &[]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("Can not mix operators"), "{body}");
    // A call or group must be followed by a separator.
    for query in ["name==a|limit(2)name==b", "(name==a)name==b"] {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/items/?{query}"), None, &[]).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
    // Chained ranges still chain.
    assert_eq!(found(&s, "qty=gt=1&lt=20").await, ["1", "2"]);
}

#[tokio::test]
async fn not_equal_skips_absent_attributes_and_tests_each_element() {
    let s = items().await;
    assert_eq!(found(&s, "price=ne=10.5").await, ["3", "4"], "2 has no price");
    assert_eq!(found(&s, "price!=10.5").await, ["3", "4"]);
    assert_eq!(found(&s, "tags=ne=x").await, ["1"], "1 has an element other than x; 2 has only x");
    // A DELETE by such a query removes only those.
    let (status, _, _) = s.rest_send(Method::DELETE, "/items/?price=ne=10.5", None, &[]).await;
    assert!(status == 200 || status == 204, "{status}");
    assert_eq!(found(&s, "limit(100)").await, ["1", "2"]);
}

#[tokio::test]
async fn contains_and_ends_with_read_numbers_as_text_and_ranges_cross_types() {
    let s = items().await;
    assert_eq!(found(&s, "qty=ct=5").await, ["1", "2", "3"]);
    assert_eq!(found(&s, "qty=ew=5").await, ["1", "2", "3"]);
    assert_eq!(found(&s, "any=ct=ru").await, ["3"], "true reads as text");
    // null < booleans < numbers < strings; but a null is below no value (Harper 5's
    // index search starts past null).
    assert_eq!(found(&s, "any=gt=number:5").await, ["2"]);
    assert_eq!(found(&s, "any=lt=number:5").await, ["3"]);
    // For `Any`, empty text stays text (Harper's coerceType): it finds no null.
    assert!(found(&s, "any=").await.is_empty());
    let (status, _, sorted) = s.rest_send(Method::GET, "/items/?sort(any)&select(id)", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(sorted, json!(["4", "3", "1", "2"]));
    // An indexed sort walks the records lacking the attribute (2 has no price) first
    // ascending, last descending.
    let (_, _, up) = s.rest_send(Method::GET, "/items/?sort(price)&select(id)", None, &[]).await;
    assert_eq!(up, json!(["2", "3", "1", "4"]));
    let (_, _, down) = s.rest_send(Method::GET, "/items/?sort(-price)&select(id)", None, &[]).await;
    assert_eq!(down, json!(["4", "1", "3", "2"]));
}

#[tokio::test]
async fn a_sort_compares_an_absent_value_as_null() {
    let s = items().await;
    let (status, _, answer) =
        s.rest_send(Method::PUT, "/items/0", Some(&json!({"name": "z", "price": null})), &[]).await;
    assert_eq!(status, 204, "{answer}");
    // 0 (price null) and 2 (no price) tie, so the next key, the id, orders them.
    let (_, _, up) = s.rest_send(Method::GET, "/items/?sort(price,id)&select(id)", None, &[]).await;
    assert_eq!(up, json!(["0", "2", "3", "1", "4"]));
    let (_, _, down) = s.rest_send(Method::GET, "/items/?sort(-price,id)&select(id)", None, &[]).await;
    assert_eq!(down, json!(["4", "1", "3", "0", "2"]));
}

#[tokio::test]
async fn integral_floats_are_integers_and_absent_properties_stay_absent() {
    let s = items().await;
    let (status, _, body) = s.rest_send(Method::PUT, "/items/5", Some(&json!({"name": "e", "qty": -0.0})), &[]).await;
    assert_eq!(status, 204, "{body}");
    let (_, _, five) = s.rest_send(Method::GET, "/items/5", None, &[]).await;
    assert_eq!(five["qty"], json!(0), "stored, and answered as the integer 0: {five}");
    let (status, _, _) = s.rest_send(Method::PUT, "/items/6", Some(&json!({"name": "f", "qty": 5.5})), &[]).await;
    assert_eq!(status, 400);
    // REST select() and `*` searches of a schema-defined table leave out what a record lacks.
    let (_, _, selected) = s.rest_send(Method::GET, "/items/?name=b&select(id,price,note)", None, &[]).await;
    assert_eq!(selected, json!([{"id": "2"}]));
    let star = s
        .ok(json!({"operation": "search_by_id", "database": "h5", "table": "Item", "ids": ["2"], "get_attributes": ["*"]}))
        .await;
    assert_eq!(star[0].get("price"), None, "{star}");
    let named = s
        .ok(json!({"operation": "search_by_id", "database": "h5", "table": "Item", "ids": ["2"], "get_attributes": ["id", "price"]}))
        .await;
    assert_eq!(named, json!([{"id": "2", "price": null}]), "named attributes are forced to null, as Harper's");
}

#[tokio::test]
async fn dropping_an_absent_attribute_succeeds() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    let dropped =
        s.ok(json!({"operation": "drop_attribute", "database": "dev", "table": "t", "attribute": "nosuch"})).await;
    assert_eq!(dropped, json!({"message": "successfully deleted attribute 'nosuch'"}));
    s.fails(
        json!({"operation": "drop_attribute", "database": "dev", "table": "t", "attribute": "id"}),
        400,
        "You cannot drop a hash attribute",
    )
    .await;
    let _: Value = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "t"})).await;
}

/// A query of conditions joined by one operator, with calls placed anywhere among
/// them (each call preceded by `&`, as clients write `a|b&limit(2)`), answers exactly
/// as its canonical form: the conditions, then the calls. Cases are drawn by proptest
/// from a fixed seed and sent to one server.
#[tokio::test]
async fn query_string_arrangements_answer_as_their_canonical_form() {
    use proptest::strategy::{Strategy, ValueTree};
    let s = items().await;
    let conditions = proptest::sample::subsequence(
        vec!["price=gt=4", "name=b", "qty=ge=5", "tags=x", "price=lt=20", "any=ct=b", "qty!=15"],
        1..4,
    );
    let calls = proptest::sample::subsequence(vec!["limit(3)", "sort(-qty,id)", "select(id,name,qty)"], 0..4);
    let case = (conditions, proptest::bool::ANY, calls, proptest::collection::vec(0usize..8, 3));
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..64 {
        let (conditions, or, calls, places) = case.new_tree(&mut runner).unwrap().current();
        let operator = if or { "|" } else { "&" };
        let canonical = std::iter::once(conditions.join(operator))
            .chain(calls.iter().map(|c| c.to_string()))
            .collect::<Vec<_>>()
            .join("&");
        // Calls at the front, between conditions, or at the end.
        let mut terms: Vec<(bool, String)> = conditions.iter().map(|c| (false, c.to_string())).collect();
        for (call, place) in calls.iter().zip(&places) {
            terms.insert(place % (terms.len() + 1), (true, call.to_string()));
        }
        let mut arranged = String::new();
        for (i, (is_call, term)) in terms.iter().enumerate() {
            if i > 0 {
                arranged.push_str(if *is_call { "&" } else { operator });
            }
            arranged.push_str(term);
        }
        let answer = |query: String| {
            let s = &s;
            async move {
                let (status, _, body) = s.rest_send(Method::GET, &format!("/items/?{query}"), None, &[]).await;
                (status, body)
            }
        };
        let (expected, got) = (answer(canonical.clone()).await, answer(arranged.clone()).await);
        assert_eq!(expected.0, 200, "{canonical}: {}", expected.1);
        assert_eq!(got, expected, "{arranged} answered otherwise than {canonical}");
    }
}

#[tokio::test]
async fn a_dynamic_table_gains_the_attributes_of_records_it_skips() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "a"}]})).await;
    // Skipped (the record exists), but `tags` becomes an attribute, as in Harper.
    let again = s
        .ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "tags": ["x"]}]}))
        .await;
    assert_eq!(again["skipped_hashes"], json!([1]));
    assert_eq!(again["new_attributes"], json!(["tags"]));
    let found = s
        .ok(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "tags", "value": "x", "get_attributes": ["*"]}))
        .await;
    assert_eq!(found, json!([]));
    let star = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": ["*"]})).await;
    assert_eq!(star[0]["tags"], Value::Null, "{star}");
    assert!(star[0].as_object().unwrap().contains_key("tags"), "{star}");
}

#[tokio::test]
async fn arrays_are_composite_primary_keys_ordered_element_by_element() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "pair", "primary_key": "id"})).await;
    let records = json!([
        {"id": [1, "b"], "n": 2}, {"id": [0, "z"], "n": 1}, {"id": [1, "a"], "n": 3}, {"id": [2], "n": 4}, {"id": [1], "n": 5}
    ]);
    let inserted = s.ok(json!({"operation": "insert", "database": "dev", "table": "pair", "records": records})).await;
    assert_eq!(inserted["inserted_hashes"], json!([[1, "b"], [0, "z"], [1, "a"], [2], [1]]));
    let found = s
        .ok(json!({"operation": "search_by_id", "database": "dev", "table": "pair", "ids": [[1, "a"], [9, "x"]], "get_attributes": ["id", "n"]}))
        .await;
    assert_eq!(found, json!([{"id": [1, "a"], "n": 3}]));
    // All records come in key order: element by element, a prefix first.
    let all = s
        .ok(json!({"operation": "search_by_value", "database": "dev", "table": "pair", "attribute": "n", "value": "*", "get_attributes": ["id"]}))
        .await;
    let order: Vec<Value> = all.as_array().unwrap().iter().map(|r| r["id"].clone()).collect();
    assert_eq!(order, [json!([0, "z"]), json!([1]), json!([1, "a"]), json!([1, "b"]), json!([2])]);
    let deleted = s.ok(json!({"operation": "delete", "database": "dev", "table": "pair", "ids": [[1, "a"]]})).await;
    assert_eq!(deleted["deleted_hashes"], json!([[1, "a"]]));
    // An array of anything but strings and numbers is no key.
    let (status, body) =
        s.op(json!({"operation": "insert", "database": "dev", "table": "pair", "records": [{"id": [[1], 2]}]})).await;
    assert_eq!(status, 400, "{body}");
}

/// Issue 22 item 6: the types `create_table` declares are enforced on every write path.
#[tokio::test]
async fn create_table_attribute_types_are_enforced_on_every_write() {
    let s = TestServer::start().await;
    let attributes = json!([{"name": "id", "type": "Int"}, {"name": "age", "type": "Int"}, {"name": "name", "type": "String"}, {"name": "ok", "type": "Boolean"}]);
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "typed", "primary_key": "id", "attributes": attributes})).await;
    let write = |operation: &str, record: Value| json!({"operation": operation, "database": "dev", "table": "typed", "records": [record]});
    s.ok(write("insert", json!({"id": 1, "age": 5, "name": "a", "ok": true}))).await;
    let refusals = [
        (
            "insert",
            json!({"id": 2, "age": "old"}),
            "Value \"old\" in property age must be an integer (from -2147483648 to 2147483647)",
        ),
        ("update", json!({"id": 1, "name": 7}), "Value 7 in property name must be a string"),
        ("upsert", json!({"id": 3, "ok": "yes"}), "Value \"yes\" in property ok must be a boolean"),
        (
            "insert",
            json!({"id": "x"}),
            "Value \"x\" in property id must be an integer (from -2147483648 to 2147483647)",
        ),
    ];
    for (operation, record, message) in refusals {
        s.fails(write(operation, record), 400, message).await;
    }
    let stored = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "typed", "ids": [1, 2, 3], "get_attributes": ["id", "age", "name", "ok"]})).await;
    assert_eq!(stored, json!([{"id": 1, "age": 5, "name": "a", "ok": true}]), "nothing refused was written");
}
