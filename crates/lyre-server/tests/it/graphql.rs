//! GraphQL querying (`graphql: true`): `/graphql` on the REST port over the exports.

use serde_json::{Value, json};

use crate::rest::SHOP_SCHEMA;
use crate::support::{self, PASSWORD, TestServer, USER};

const CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\ngraphql: true\n";

/// The shop with two brands and three products.
async fn shop() -> TestServer {
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[],
    )
    .await;
    s.ok(json!({"operation": "upsert", "database": "shop", "table": "Brand", "records": [
        {"id": "b1", "name": "Acme"}, {"id": "b2", "name": "Globex"}]}))
        .await;
    s.ok(json!({"operation": "upsert", "database": "shop", "table": "Product", "records": [
        {"id": "p1", "name": "Foo", "price": 10, "brandId": "b1", "details": {"color": "red", "weight": 1.5}},
        {"id": "p2", "name": "Bar", "price": 20.5, "brandId": "b2"},
        {"id": "p3", "name": "Fob", "price": 5.5, "brandId": "b1"}]}))
        .await;
    s
}

/// POSTs `body` to `/graphql` as the admin with `accept`; status and answer.
async fn post(s: &TestServer, body: Value, accept: Option<&str>) -> (u16, Value) {
    let mut request = s
        .client
        .post(s.rest("/graphql"))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The `data` of a query that must succeed.
async fn data(s: &TestServer, query: &str) -> Value {
    let (status, answer) = post(s, json!({ "query": query }), None).await;
    assert_eq!(status, 200, "{query}: {answer}");
    assert!(answer.get("errors").is_none(), "{answer}");
    answer["data"].clone()
}

/// The one error of a query that must fail: status and error object.
async fn error(s: &TestServer, body: Value, accept: Option<&str>) -> (u16, Value) {
    let (status, answer) = post(s, body, accept).await;
    assert!(answer.get("data").is_none(), "{answer}");
    (status, answer["errors"][0].clone())
}

#[tokio::test]
async fn queries_select_filter_and_follow_relationships() {
    let s = shop().await;
    assert_eq!(
        data(&s, "{ products { id name } }").await,
        json!({"products": [{"id": "p1", "name": "Foo"}, {"id": "p2", "name": "Bar"}, {"id": "p3", "name": "Fob"}]})
    );
    // Arguments are equality conditions; several are all required.
    assert_eq!(
        data(&s, r#"{ products(brandId: "b1", price: 5.5) { id } }"#).await,
        json!({"products": [{"id": "p3"}]})
    );
    // Relationships nest both ways; an object argument reaches through one.
    assert_eq!(
        data(&s, r#"{ products(id: "p1") { name brand { name } } }"#).await,
        json!({"products": [{"name": "Foo", "brand": {"name": "Acme"}}]})
    );
    assert_eq!(
        data(&s, r#"{ Brand(id: "b1") { name products { id } } }"#).await,
        json!({"Brand": [{"name": "Acme", "products": [{"id": "p1"}, {"id": "p3"}]}]})
    );
    assert_eq!(data(&s, r#"{ products(brand: {name: "Globex"}) { id } }"#).await, json!({"products": [{"id": "p2"}]}));
    // Aliases, __typename, a nested object's own selection, null where unset.
    assert_eq!(
        data(
            &s,
            r#"{ cheap: products(id: "p3") { label: name kind: __typename brand { __typename } }
                     first: products(id: "p1") { details { color } count } }"#
        )
        .await,
        json!({
            "cheap": [{"label": "Fob", "kind": "Product", "brand": {"__typename": "Brand"}}],
            "first": [{"details": {"color": "red"}, "count": null}],
        })
    );
    // GET with the query in the URL, variables as JSON.
    let encode =
        |text: &str| percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string();
    let url = format!(
        "/graphql?query={}&variables={}",
        encode("query One($id: ID) { products(id: $id) { name } }"),
        encode(r#"{"id": "p2"}"#)
    );
    let response = s.client.get(s.rest(&url)).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/graphql-response+json; charset=utf-8");
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"data": {"products": [{"name": "Bar"}]}}));
}

#[tokio::test]
async fn variables_operations_and_fragments() {
    let s = shop().await;
    let document = r#"
        query ByBrand($brand: ID!, $price: Float = 10) { products(brandId: $brand, price: $price) { ...Names } }
        query ByName($name: String) { products(name: $name) { ... on Product { id } } }
        query Nested { Brand(id: "b2") { products { ...Deep } } }
        fragment Names on Product { id name }
        fragment Deep on Product { ...Names price }
    "#;
    let run = |operation: &str, variables: Value| json!({"query": document, "operationName": operation, "variables": variables});
    let (status, answer) = post(&s, run("ByBrand", json!({"brand": "b1"})), None).await;
    assert_eq!(
        (status, answer),
        (200, json!({"data": {"products": [{"id": "p1", "name": "Foo"}]}})),
        "the default price"
    );
    let (_, answer) = post(&s, run("ByName", json!({"name": "Bar"})), None).await;
    assert_eq!(answer, json!({"data": {"products": [{"id": "p2"}]}}));
    // Text on a typed attribute is read as its type, as Harper reads it (a price
    // sent as "20.5", in a literal or a variable).
    let (_, answer) = post(&s, run("ByBrand", json!({"brand": "b2", "price": "20.5"})), None).await;
    assert_eq!(answer, json!({"data": {"products": [{"id": "p2", "name": "Bar"}]}}));
    assert_eq!(data(&s, r#"{ products(price: "5.5") { id } }"#).await, json!({"products": [{"id": "p3"}]}));
    let (_, answer) = post(&s, run("Nested", json!({})), None).await;
    assert_eq!(answer, json!({"data": {"Brand": [{"products": [{"id": "p2", "name": "Bar", "price": 20.5}]}]}}));
    let (status, failed) = error(&s, run("ByBrand", json!({})), None).await;
    assert_eq!(status, 400);
    assert_eq!(failed["message"], "Variable $brand is required, but not provided.");
    let (_, failed) = error(&s, json!({"query": document}), None).await;
    assert_eq!(failed["message"], "Operation name is required when there are multiple operations in the document.");
    let (_, failed) = error(&s, run("Nope", json!({})), None).await;
    assert_eq!(failed["message"], "Operation `Nope` not found.");
    // Fragments are not operations: a lone shorthand query may use them.
    let shorthand = r#"{ products(id: "p1") { ...Names } } fragment Names on Product { id name }"#;
    assert_eq!(data(&s, shorthand).await, json!({"products": [{"id": "p1", "name": "Foo"}]}));
    let (status, failed) =
        error(&s, json!({"query": format!("{shorthand} query Other {{ products {{ id }} }}")}), None).await;
    assert_eq!(
        (status, failed["message"].clone()),
        (400, json!("Unnamed operations are only allowed when there is a single operation in the document."))
    );
    let cycle = "query Q { products { ...A } } fragment A on Product { ...B } fragment B on Product { ...A }";
    let (status, failed) = error(&s, json!({"query": cycle}), None).await;
    assert_eq!((status, failed["message"].clone()), (400, json!("Cannot spread fragment \"A\" within itself.")));
    // Fragments that spread each other twice over double at every step.
    let mut fan = String::from("query Q { products { ...F0 } }");
    for i in 0..40 {
        fan.push_str(&format!(" fragment F{i} on Product {{ ...F{next} ...F{next} }}", next = i + 1));
    }
    fan.push_str(" fragment F40 on Product { id }");
    let (status, failed) = error(&s, json!({"query": fan}), None).await;
    assert_eq!((status, failed["message"].clone()), (400, json!("The operation selects more than 10000 fields.")));
    // One relationship under two aliases, each with its own selection; one key twice.
    let (_, answer) =
        post(&s, json!({"query": r#"{ products(id: "p1") { a: brand { id } b: brand { name } } }"#}), None).await;
    assert_eq!(answer, json!({"data": {"products": [{"a": {"id": "b1"}, "b": {"name": "Acme"}}]}}));
    let (_, failed) = error(&s, json!({"query": "{ products { id } products { name } }"}), None).await;
    assert_eq!(failed["message"], "Fields \"products\" conflict: give one of them an alias.");
}

#[tokio::test]
async fn errors_take_graphql_shape_with_their_location() {
    let s = shop().await;
    // A syntax error: 400 by default, 200 when the client accepts plain JSON.
    let (status, failed) = error(&s, json!({"query": "{ products { id "}), None).await;
    assert_eq!(status, 400);
    assert!(failed["message"].as_str().unwrap().starts_with("Syntax Error"), "{failed}");
    assert_eq!(failed["locations"][0]["line"], 1, "{failed}");
    let (status, _) = error(&s, json!({"query": "{ products { id "}), Some("application/json")).await;
    assert_eq!(status, 200);
    // An unknown field, with where it is.
    let (status, failed) = error(&s, json!({"query": "{\n  products {\n    id\n    colour\n  }\n}"}), None).await;
    assert_eq!(status, 400);
    assert_eq!(failed["message"], "Cannot query field \"colour\" on type \"Product\".");
    assert_eq!(failed["locations"], json!([{"line": 4, "column": 5}]));
    let (_, failed) = error(&s, json!({"query": "{ products { brand { nope } } }"}), None).await;
    assert_eq!(failed["message"], "Cannot query field \"nope\" on type \"Brand\".");
    let (status, failed) = error(&s, json!({"query": "{ products }"}), None).await;
    assert_eq!(
        (status, failed["message"].clone()),
        (400, json!("Field \"products\" of type \"[products]\" must have a selection of subfields."))
    );
    let (_, failed) = error(&s, json!({"query": "{ Nothing { id } }"}), None).await;
    assert_eq!(failed["message"], "Resource `Nothing` not found.");
    let (_, failed) = error(&s, json!({"query": "mutation { products { id } }"}), None).await;
    assert_eq!(failed["message"], "Mutations are not supported yet.");
    let (_, failed) = error(&s, json!({"query": "{ products(tags: [\"x\"]) { id } }"}), None).await;
    assert_eq!(failed["message"], "Value type, List, is not supported.");
    // Malformed requests.
    let (status, failed) = error(&s, json!({"variables": {}}), None).await;
    assert_eq!((status, failed["message"].clone()), (400, json!("Request body must contain a `query` field.")));
    let (status, _) = error(&s, json!({"query": "{ products { id } }", "variables": [1]}), None).await;
    assert_eq!(status, 400);
    let put = s.client.put(s.rest("/graphql")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(put.status(), 405);
    assert_eq!(put.headers()["allow"], "GET, POST");
    // Credentials are needed, and roles apply.
    let anonymous = s.client.post(s.rest("/graphql")).body(r#"{"query": "{ products { id } }"}"#).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let refusal: Value = anonymous.json().await.unwrap();
    assert_eq!(refusal, json!({"errors": [{"message": "Must login"}]}), "in GraphQL's shape");
    s.ok(json!({"operation": "add_role", "role": "brands_only", "permission": {"shop": {"tables": {
        "Brand": {"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "b", "password": "pw", "role": "brands_only", "active": true}))
        .await;
    let as_b = |query: &str| {
        s.client.post(s.rest("/graphql")).basic_auth("b", Some("pw")).body(json!({ "query": query }).to_string()).send()
    };
    assert_eq!(as_b("{ Brand { name } }").await.unwrap().status(), 200);
    // A role that reads products but not brands learns nothing of a product's brand.
    s.ok(json!({"operation": "add_role", "role": "products_only", "permission": {"shop": {"tables": {
        "Product": {"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "p", "password": "pw", "role": "products_only", "active": true}))
        .await;
    let nested = s
        .client
        .post(s.rest("/graphql"))
        .basic_auth("p", Some("pw"))
        .body(json!({"query": r#"{ products(id: "p1") { name brand { name } } }"#}).to_string())
        .send()
        .await
        .unwrap();
    let text = nested.text().await.unwrap();
    assert!(!text.contains("Acme"), "a brand the role cannot read leaked: {text}");
    let refused = as_b("{ products { id } }").await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.json::<Value>().await.unwrap()["errors"][0]["message"].is_string());
}

/// A document of nothing but nested braces, well inside the body limit, is
/// refused as a syntax error without the parser keeping an error per token (two
/// megabytes of them once held 1.3 GB).
#[tokio::test]
async fn a_document_of_nested_braces_is_refused_in_bounded_memory() {
    let s = shop().await;
    let peak = || support::status_kib(s.pid(), "VmHWM:");
    // Warm: the first GraphQL request sets up what every later one uses.
    data(&s, r#"{ products(id: "p1") { id } }"#).await;
    let before = peak();
    let braces = format!("{}{}", "{".repeat(1_000_000), "}".repeat(1_000_000));
    let (status, failed) = error(&s, json!({"query": braces}), None).await;
    assert_eq!(status, 400);
    assert!(failed["message"].as_str().unwrap().starts_with("Syntax Error"), "{failed}");
    let grown_mib = peak().saturating_sub(before) / 1024;
    assert!(grown_mib < 100, "the server's peak resident memory grew {grown_mib} MiB");
    assert_eq!(data(&s, r#"{ products(id: "p1") { id } }"#).await, json!({"products": [{"id": "p1"}]}));
}

#[tokio::test]
async fn graphql_is_off_unless_a_component_turns_it_on() {
    let s = TestServer::start_app(
        &[
            ("components/shop/config.yaml", "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n"),
            ("components/shop/schema.graphql", SHOP_SCHEMA),
        ],
        &[],
    )
    .await;
    let response = s
        .client
        .post(s.rest("/graphql"))
        .basic_auth(USER, Some(PASSWORD))
        .body(r#"{"query": "{ products { id } }"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}
