//! The REST interface over a `schema.graphql` application.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

pub const SHOP_SCHEMA: &str = r#"
type Product @table(database: "shop") @export(name: "products") {
  id: ID @primaryKey
  name: String @indexed
  price: Float @indexed
  count: Int
  tags: [String] @indexed
  brandId: ID @indexed
  brand: Brand @relationship(from: brandId)
  details: Details
  createdAt: Long @createdTime
  updatedAt: Long @updatedTime
}
type Details { color: String weight: Float }
type Brand @table(database: "shop") @export {
  id: ID @primaryKey
  name: String @indexed
  products: [Product] @relationship(to: brandId)
}
type Sealed @table(database: "shop") @sealed @export { id: Int @primaryKey name: String! }
type Plain @table(database: "shop") { id: ID @primaryKey }
"#;

pub const SHOP_CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";

/// A server with the shop application and some records.
pub async fn shop() -> TestServer {
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[],
    )
    .await;
    for (id, body) in [("b1", json!({"name": "Acme"})), ("b2", json!({"name": "Globex"}))] {
        assert_eq!(send(&s, Method::PUT, &format!("/Brand/{id}"), Some(body)).await.0, 204);
    }
    let products = [
        (
            "p1",
            json!({"name": "Foo", "price": 10, "count": 5, "tags": ["x", "y"], "brandId": "b1", "details": {"color": "red", "weight": 1.5}}),
        ),
        ("p2", json!({"name": "Bar", "price": 20.5, "count": 1, "tags": ["y"], "brandId": "b2"})),
        ("p3", json!({"name": "Fob", "price": 5.5, "tags": ["x"], "brandId": "b1"})),
        ("p4", json!({"name": "A", "price": 3, "count": 0, "brandId": "b2"})),
        ("p5", json!({"name": "B", "price": 7, "tags": []})),
        ("p6", json!({"name": "hello world ünï", "price": 12, "count": 2})),
    ];
    for (id, body) in products {
        assert_eq!(send(&s, Method::PUT, &format!("/products/{id}"), Some(body)).await.0, 204);
    }
    s
}

/// Sends a REST request with the admin's credentials; returns status, headers, body.
async fn send(
    s: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    s.rest_send(method, path, body.as_ref(), &[]).await
}

/// PUTs raw `body` bytes declared as `content_type`; returns the status.
async fn put_raw(s: &TestServer, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> u16 {
    let response = s
        .client
        .put(s.rest(path))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

async fn get(s: &TestServer, path: &str) -> Value {
    let (status, _, body) = send(s, Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path} answered {body}");
    body
}

fn ids(results: &Value) -> Vec<String> {
    results
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {results}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn url_forms() {
    let s = shop().await;
    let description = get(&s, "/products").await;
    assert_eq!(
        (description["records"].clone(), description["name"].clone(), description["database"].clone()),
        (json!("./"), json!("Product"), json!("shop"))
    );
    assert_eq!(
        description["attributes"][0],
        json!({"type": "ID", "name": "id", "isPrimaryKey": true, "attribute": "id"})
    );
    // As Harper's schema describes them: arrays by their elements, relationships
    // by the table they lead to.
    let described = |name: &str| {
        let found = description["attributes"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned();
        found.unwrap_or_else(|| panic!("{name} is not described: {description}"))
    };
    assert_eq!(
        described("tags"),
        json!({"type": "array", "elements": {"type": "String"}, "name": "tags", "indexed": {}, "attribute": "tags"})
    );
    assert_eq!(described("brand"), json!({"type": "Brand", "name": "brand", "relationship": {"from": "brandId"}}));
    let brands = get(&s, "/Brand").await;
    let products = brands["attributes"].as_array().unwrap().iter().find(|a| a["name"] == "products").cloned();
    assert_eq!(
        products,
        Some(
            json!({"type": "array", "elements": {"type": "Product"}, "name": "products", "relationship": {"to": "brandId"}})
        )
    );
    assert_eq!(ids(&get(&s, "/products/").await), ["p1", "p2", "p3", "p4", "p5", "p6"]);
    let p1 = get(&s, "/products/p1").await;
    assert_eq!((p1["name"].clone(), p1["details"]["color"].clone()), (json!("Foo"), json!("red")));
    assert!(p1["createdAt"].as_i64().unwrap() > 1_700_000_000_000 && p1["createdAt"] == p1["updatedAt"]);
    let (status, headers, body) = send(&s, Method::GET, "/products/nope", None).await;
    assert_eq!((status, body), (404, json!("")));
    assert_eq!(headers["content-length"], "0");
    assert_eq!(get(&s, "/products/p1.name").await, json!("Foo"));
    assert_eq!(get(&s, "/products/p1.tags").await, json!(["x", "y"]));
    assert_eq!(get(&s, "/products/p1.brand").await["name"], "Acme", "a relationship is a property");
    assert_eq!(send(&s, Method::GET, "/products/p4.tags", None).await.0, 404, "an absent property is 404");
    assert_eq!(get(&s, "/products/p1/").await, json!([]), "a prefix of a scalar key matches nothing");
    assert_eq!(get(&s, "/Brand/b1").await, json!({"id": "b1", "name": "Acme"}));
    for path in ["/nosuch/", "/Plain/", "/Product/", "/", "/brand/b1"] {
        let (status, _, body) = send(&s, Method::GET, path, None).await;
        assert_eq!((status, body), (404, json!("Not found\n")), "{path}");
    }
    // Keys are coerced by the primary key's type.
    assert_eq!(send(&s, Method::PUT, "/Sealed/7", Some(json!({"name": "seven"}))).await.0, 204);
    assert_eq!(get(&s, "/Sealed/7").await, json!({"id": 7, "name": "seven"}));
    // A key that cannot have the declared type is refused, as Harper refuses it.
    for (method, path) in
        [(Method::GET, "/Sealed/abc"), (Method::GET, "/Sealed/abc.name"), (Method::DELETE, "/Sealed/abc")]
    {
        let (status, _, body) = send(&s, method, path, None).await;
        assert_eq!(
            (status, body),
            (400, json!("ClientError: Invalid value for attribute id: \"abc\", expecting Int")),
            "{path}"
        );
    }
    // Percent-encoded keys, and a key with a slash.
    assert_eq!(send(&s, Method::PUT, "/products/a%2Fb%20c", Some(json!({"name": "Slash"}))).await.0, 204);
    assert_eq!(get(&s, "/products/a%2Fb%20c").await["id"], "a/b c");
    assert_eq!(get(&s, "/products/a/b%20c").await["name"], "Slash");
}

#[tokio::test]
async fn methods_and_status_codes() {
    let s = shop().await;
    // PUT replaces the whole record; the URL's key wins.
    assert_eq!(
        send(&s, Method::PUT, "/products/w1", Some(json!({"id": "other", "name": "Writer", "price": 30, "count": 3})))
            .await
            .0,
        204
    );
    let w1 = get(&s, "/products/w1").await;
    assert_eq!(send(&s, Method::GET, "/products/other", None).await.0, 404);
    // PUT on the collection writes an array of records in one transaction: one bad
    // record (a string price) and none is written.
    let batch = json!([{"id": "c1", "name": "One", "price": 1}, {"id": "c2", "name": "Two", "price": "dear"}]);
    let (status, _, body) = send(&s, Method::PUT, "/products/", Some(batch)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("price"), "the error names the attribute: {body}");
    assert_eq!(send(&s, Method::GET, "/products/c1", None).await.0, 404, "the good record was not written either");
    let (status, _, body) = send(&s, Method::PUT, "/products/", Some(json!([{"id": null, "name": "null key"}]))).await;
    assert_eq!((status, body.to_string().contains("'id'")), (400, true), "{body}");
    let (status, _, body) = send(&s, Method::PUT, "/products/", Some(json!([{"id": "c3"}, {"name": "no key"}]))).await;
    assert_eq!((status, body.to_string().contains("'id'")), (400, true), "{body}");
    assert_eq!(send(&s, Method::GET, "/products/c3", None).await.0, 404);
    let batch = json!([{"id": "c1", "name": "One", "price": 1}, {"id": "c2", "name": "Two", "price": 2}]);
    assert_eq!(send(&s, Method::PUT, "/products/", Some(batch)).await.0, 204);
    assert_eq!(get(&s, "/products/c2").await["price"], 2.0);
    let log = s.ok(json!({"operation": "read_audit_log", "database": "shop", "table": "Product"})).await;
    let last = log.as_array().and_then(|entries| entries.last()).cloned().unwrap_or_default();
    assert_eq!(last["hash_values"], json!(["c1", "c2"]), "one logged transaction: {last}");
    // The same key twice in one array: the later record replaces the earlier one, and
    // the record keeps a unique version (an ETag).
    let batch = json!([{"id": "c4", "name": "first", "price": 1}, {"id": "c4", "name": "second"}]);
    assert_eq!(send(&s, Method::PUT, "/products/", Some(batch)).await.0, 204);
    let (status, headers, c4) = send(&s, Method::GET, "/products/c4", None).await;
    assert_eq!((status, &c4["name"], c4.get("price")), (200, &json!("second"), None), "{c4}");
    assert!(headers.contains_key("etag"), "{headers:?}");
    assert_eq!(send(&s, Method::DELETE, "/products/c4", None).await.0, 200);

    assert_eq!(send(&s, Method::PUT, "/products/w1", Some(json!({"name": "Writer", "price": 32}))).await.0, 204);
    let replaced = get(&s, "/products/w1").await;
    assert!(replaced.get("count").is_none(), "PUT removes properties it does not name: {replaced}");
    assert_eq!(replaced["createdAt"], w1["createdAt"], "@createdTime survives a replace");
    assert!(replaced["updatedAt"].as_i64() >= w1["updatedAt"].as_i64());
    // A time stamp the server sets cannot be incremented.
    let (status, _, body) =
        send(&s, Method::PATCH, "/products/p1", Some(json!({"updatedAt": {"__op__": "add", "value": 1}}))).await;
    assert_eq!((status, body), (400, json!("ClientError: updatedAt: cannot add to a time stamp the server sets")));
    // PATCH merges at the top level; nested objects are replaced whole.
    assert_eq!(
        send(&s, Method::PATCH, "/products/p1", Some(json!({"price": 11, "details": {"weight": 5}}))).await.0,
        204
    );
    let p1 = get(&s, "/products/p1").await;
    assert_eq!(
        (p1["price"].clone(), p1["name"].clone(), p1["details"].clone()),
        (json!(11), json!("Foo"), json!({"weight": 5}))
    );
    // POST creates, answering 201, the key in Location and the body.
    let (status, headers, body) =
        send(&s, Method::POST, "/products/", Some(json!({"name": "Posted", "price": 2.25}))).await;
    assert_eq!(status, 201);
    let id = body.as_str().expect("the new key").to_string();
    assert_eq!(headers["location"], id.as_str());
    assert_eq!(get(&s, &format!("/products/{id}")).await["name"], "Posted");
    let (status, _, body) = send(&s, Method::POST, "/products/", Some(json!({"id": "p1", "name": "Dup"}))).await;
    assert_eq!((status, body), (409, json!("ClientError: Record already exists")));
    let (status, headers, _) = send(&s, Method::POST, "/products/p1", Some(json!({}))).await;
    assert_eq!(status, 405);
    assert!(headers["allow"].to_str().unwrap().contains("GET"));
    // DELETE answers true, found or not; a query deletes its matches.
    assert_eq!(send(&s, Method::DELETE, "/products/w1", None).await.2, json!(true));
    assert_eq!(send(&s, Method::GET, "/products/w1", None).await.0, 404);
    assert_eq!(send(&s, Method::DELETE, "/products/w1", None).await.2, json!(true));
    assert_eq!(send(&s, Method::DELETE, "/products/?price=lt=6", None).await.2, json!(true));
    assert_eq!(sorted(ids(&get(&s, "/products/").await)).len(), 4, "A (3), Fob (5.5) and Posted (2.25) deleted");
    let (status, headers, _) = send(&s, Method::OPTIONS, "/products/p1", None).await;
    assert_eq!(status, 204);
    assert_eq!(headers["allow"], "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE, QUERY, COPY, MOVE");
    assert_eq!(send(&s, Method::TRACE, "/products/p1", None).await.2, json!("HarperDB is the terminating server"));
    let propfind = Method::from_bytes(b"PROPFIND").unwrap();
    let (status, _, body) = send(&s, propfind, "/products/p1", None).await;
    assert_eq!((status, body), (501, json!("ServerError: Method PROPFIND is not recognized")));
    let brew = Method::from_bytes(b"BREW").unwrap();
    let (status, _, body) = send(&s, brew, "/products/p1", None).await;
    assert_eq!((status, body), (418, json!("ClientError: HarperDB is short and stout and can't brew coffee")));
    let head = s.client.head(s.rest("/products/p2")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert!(head.headers().get("etag").is_some());
    assert!(head.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn query_operators() {
    let s = shop().await;
    let q = |query: &str| format!("/products/?{query}");
    let cases: &[(&str, &[&str])] = &[
        ("name=Foo", &["p1"]),
        ("name==Foo", &["p1"]),
        ("name===Foo", &["p1"]),
        ("price=10", &["p1"]),
        ("price==10", &["p1"]),
        ("price=eq=10", &["p1"]),
        ("price!=10", &["p2", "p3", "p4", "p5", "p6"]),
        ("price=ne=10", &["p2", "p3", "p4", "p5", "p6"]),
        ("price>10", &["p2", "p6"]),
        ("price=gt=10", &["p2", "p6"]),
        ("price>=10", &["p1", "p2", "p6"]),
        ("price=ge=10", &["p1", "p2", "p6"]),
        ("price<5.5", &["p4"]),
        ("price=lt=5.5", &["p4"]),
        ("price<=5.5", &["p3", "p4"]),
        ("price=le=5.5", &["p3", "p4"]),
        ("name=sw=Fo", &["p1", "p3"]),
        ("name==Fo*", &["p1", "p3"]),
        ("name=ew=oo", &["p1"]),
        ("name=ct=o", &["p1", "p3", "p6"]),
        ("price=gt=5&price=lt=11", &["p1", "p3", "p5"]),
        ("price=gt=5&lt=11", &["p1", "p3", "p5"]),
        ("price>5&price<11", &["p1", "p3", "p5"]),
        ("name==A|name==B", &["p4", "p5"]),
        ("(name==A|name==B)&price>5", &["p5"]),
        ("[name==A|name==B]&price>5", &["p5"]),
        ("price>5&(name==A|name==B)", &["p5"]),
        ("tags==y", &["p1", "p2"]),
        ("count==null", &[]),
        ("count=2", &["p6"]),
        ("count>=number:2", &["p1", "p6"]),
        ("name==string:A", &["p4"]),
        ("name=hello%20world%20%C3%BCn%C3%AF", &["p6"]),
        ("name=hello+world+%C3%BCn%C3%AF", &["p6"]),
        ("brand.name==Acme", &["p1", "p3"]),
        ("brand.name=sw=Glo", &["p2", "p4"]),
        ("id=gt=p4", &["p5", "p6"]),
    ];
    for (query, expected) in cases {
        assert_eq!(sorted(ids(&get(&s, &q(query)).await)), *expected, "?{query}");
    }
    // A relationship seen from the other side.
    let brands = get(&s, "/Brand/?products.name==Bar").await;
    assert_eq!(ids(&brands), ["b2"]);
    // Several levels: products whose brand makes a product named Fob.
    assert_eq!(sorted(ids(&get(&s, "/products/?brand.products.name==Fob").await)), ["p1", "p3"]);
    assert_eq!(ids(&get(&s, "/Brand/?products.brand.name==Globex").await), ["b2"]);
    let (status, _, body) = send(&s, Method::GET, "/products/?brand.products.nosuch==1", None).await;
    assert_eq!((status, body), (404, json!("HdbError: nosuch is not a defined attribute")));
}

/// As Harper 5 reads them: a null is below or unequal to no value (its index
/// search starts past null); `+` is a plus in a path and in a query Harper's
/// parser reads (one with `==`, a group, a call...), a space only in plain form
/// parameters; `null` and the empty text are null for a typed attribute.
#[tokio::test]
async fn nulls_plus_signs_and_typed_nulls_read_as_harper_reads_them() {
    let s = shop().await;
    let put = json!({"name": "C++", "price": null, "count": null});
    assert_eq!(send(&s, Method::PUT, "/products/p7", Some(put)).await.0, 204);
    assert_eq!(send(&s, Method::PUT, "/products/a+b", Some(json!({"name": "plus"}))).await.0, 204);
    let q = |query: &str| format!("/products/?{query}");
    let cases: &[(&str, &[&str])] = &[
        ("price<5.5", &["p4"]),
        ("price=lt=5.5", &["p4"]),
        ("price<=5.5", &["p3", "p4"]),
        ("price!=10", &["p2", "p3", "p4", "p5", "p6"]),
        ("price=ne=10&name=ne=A", &["p2", "p3", "p5", "p6"]),
        ("price==null", &["p7"]),
        ("price!=null", &["p1", "p2", "p3", "p4", "p5", "p6"]),
        ("count=null", &["p7"]),
        ("count=", &["p7"]),
        ("count=$2", &["p6"]),
        ("name==C++", &["p7"]),
        ("name=C++&select(id,name)", &["p7"]),
        ("name=plus", &["a+b"]),
        ("name=hello+world+%C3%BCn%C3%AF", &["p6"]),
    ];
    for (query, expected) in cases {
        assert_eq!(sorted(ids(&get(&s, &q(query)).await)), *expected, "?{query}");
    }
    assert_eq!(get(&s, "/products/a+b").await["name"], "plus");
    assert_eq!(get(&s, "/products/a%2Bb").await["name"], "plus");
    assert_eq!(send(&s, Method::GET, "/products/a%20b", None).await.0, 404);
    let below = json!({"operation": "search_by_conditions", "database": "shop", "table": "Product",
        "get_attributes": ["id"], "conditions": [{"attribute": "price", "comparator": "less_than", "value": 5.5}]});
    assert_eq!(s.ok(below).await, json!([{"id": "p4"}]));
}

const NOTES_SCHEMA: &str = r#"
type Note @table(database: "notes") @export {
  id: ID @primaryKey
  title: String
  count: Int
  tag: Any
  contentType: String
  data: Any
}
"#;

/// As Harper 5 reads a REST write's body: a form as its fields (strings; a field
/// given twice an array), curl's JSON labelled as a form still JSON, and a body of
/// any other media type, or of none that is not JSON, kept as `{contentType,
/// data}`, which a read answers as the content it was.
#[tokio::test]
async fn forms_and_bodies_of_other_media_types_are_kept_as_harper_keeps_them() {
    let s = TestServer::start_app(
        &[("components/notes/config.yaml", SHOP_CONFIG), ("components/notes/schema.graphql", NOTES_SCHEMA)],
        &[],
    )
    .await;
    let form = "application/x-www-form-urlencoded";
    assert_eq!(put_raw(&s, "/Note/f1", form, "title=Hello+there%21&tag=a&tag=b").await, 204);
    assert_eq!(get(&s, "/Note/f1").await, json!({"id": "f1", "title": "Hello there!", "tag": ["a", "b"]}));
    // Form fields are text: an Int refuses one, as Harper's validation does.
    assert_eq!(put_raw(&s, "/Note/f2", form, "count=3").await, 400);
    let patch = s.client.patch(s.rest("/Note/f1")).basic_auth(USER, Some(PASSWORD)).header("content-type", form);
    assert_eq!(patch.body("title=Changed").send().await.unwrap().status(), 204);
    assert_eq!(get(&s, "/Note/f1").await, json!({"id": "f1", "title": "Changed", "tag": ["a", "b"]}));
    assert_eq!(put_raw(&s, "/Note/f3", form, r#"{"title": "curl -d"}"#).await, 204);
    assert_eq!(get(&s, "/Note/f3").await, json!({"id": "f3", "title": "curl -d"}));

    let raw = |path: &str| s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD)).send();
    let bytes = vec![0u8, 1, 2, 255];
    for (id, media, body) in [
        ("h1", Some("text/html; charset=utf-8"), b"<p>hi</p>".to_vec()),
        ("b1", Some("application/octet-stream"), bytes.clone()),
        ("x1", Some("application/xml"), b"<a/>".to_vec()),
        ("c1", Some("text/csv"), b"a,b\n1,2\n".to_vec()),
        ("n1", None, b"plain words".to_vec()),
    ] {
        let mut put = s.client.put(s.rest(&format!("/Note/{id}"))).basic_auth(USER, Some(PASSWORD));
        if let Some(media) = media {
            put = put.header("content-type", media);
        }
        assert_eq!(put.body(body.clone()).send().await.unwrap().status(), 204, "{id}");
        let answer = raw(&format!("/Note/{id}")).await.unwrap();
        assert_eq!(answer.status(), 200, "{id}");
        // The media type without its parameters, as Harper keeps it.
        let expected = media.map_or("application/octet-stream", |m| m.split(';').next().unwrap_or(m));
        assert_eq!(answer.headers()["content-type"], expected, "{id}");
        assert!(answer.headers().contains_key("etag"), "{id}");
        // What a client stored runs no script with the reader's session.
        assert_eq!(answer.headers()["content-security-policy"], "sandbox", "{id}");
        assert_eq!(answer.headers()["x-content-type-options"], "nosniff", "{id}");
        assert_eq!(answer.bytes().await.unwrap().as_ref(), &body[..], "{id}");
    }
    // Without a type, a JSON value is still JSON (a property's number).
    let put = s.client.put(s.rest("/Note/f3.count")).basic_auth(USER, Some(PASSWORD)).body("42");
    assert_eq!(put.send().await.unwrap().status(), 204);
    assert_eq!(get(&s, "/Note/f3").await["count"], 42);
    // Its properties still read one by one.
    assert_eq!(get(&s, "/Note/h1?select(contentType,id)").await, json!({"contentType": "text/html", "id": "h1"}));
}

/// A form is held to one request's memory as a JSON body is: its memory (a bound
/// from its number of fields) is asked for before it is built, and refused with 413.
#[tokio::test]
async fn a_form_past_one_requests_memory_is_refused() {
    let files = [("components/notes/config.yaml", SHOP_CONFIG), ("components/notes/schema.graphql", NOTES_SCHEMA)];
    let s = TestServer::start_app(&files, &[("HTTP_MAXREQUESTMEMORY", "262144")]).await;
    // 60 KB of 30,000 fields: some megabytes once built.
    let status = put_raw(&s, "/Note/big", "application/x-www-form-urlencoded", "a&".repeat(30_000)).await;
    assert_eq!(status, 413);
    assert_eq!(send(&s, Method::GET, "/Note/big", None).await.0, 404, "nothing was written");
    assert_eq!(put_raw(&s, "/Note/small", "application/x-www-form-urlencoded", "title=ok").await, 204);
}

#[tokio::test]
async fn select_sort_limit() {
    let s = shop().await;
    assert_eq!(
        get(&s, "/products/?price>=10&select(name,price)&sort(-price)").await,
        json!([{"name": "Bar", "price": 20.5}, {"name": "hello world ünï", "price": 12}, {"name": "Foo", "price": 10}])
    );
    assert_eq!(
        get(&s, "/products/?price>=10&select(name)&sort(price)").await,
        json!(["Foo", "hello world ünï", "Bar"])
    );
    assert_eq!(
        get(&s, "/products/?price>=10&select([name,price])&sort(price)").await,
        json!([["Foo", 10], ["hello world ünï", 12], ["Bar", 20.5]])
    );
    assert_eq!(get(&s, "/products/?name==Foo&select(name,)").await, json!([{"name": "Foo"}]));
    assert_eq!(
        get(&s, "/products/?name==Foo&select(name,brand{name})").await,
        json!([{"name": "Foo", "brand": {"name": "Acme"}}])
    );
    assert_eq!(
        get(&s, "/products/?name==Foo&select(name,details{color})").await,
        json!([{"name": "Foo", "details": {"color": "red"}}])
    );
    assert_eq!(
        get(&s, "/products/?name==Foo&select(details{color})").await,
        json!([{"color": "red"}]),
        "one field: bare values"
    );
    // Harper 5 leaves out what the record lacks (4.7 answered `"nosuch": null`).
    assert_eq!(get(&s, "/products/?name==Foo&select($id,nosuch)").await, json!([{"$id": "p1"}]));
    assert_eq!(get(&s, "/products/?name==Foo&select([$id,nosuch])").await, json!([["p1", null]]));
    assert_eq!(
        get(&s, "/Brand/b1?select(name,products{name})").await,
        json!({"name": "Acme", "products": [{"name": "Foo"}, {"name": "Fob"}]})
    );
    // Relationships inside relationships.
    assert_eq!(
        get(&s, "/products/p1?select(brand{name,products{name}})").await,
        json!({"name": "Acme", "products": [{"name": "Foo"}, {"name": "Fob"}]})
    );
    assert_eq!(
        get(&s, "/Brand/b1?select(name,products{name,brand{name}})").await,
        json!({"name": "Acme", "products": [{"name": "Foo", "brand": {"name": "Acme"}}, {"name": "Fob", "brand": {"name": "Acme"}}]})
    );
    assert_eq!(ids(&get(&s, "/products/?sort(price)&limit(2)").await), ["p4", "p3"]);
    assert_eq!(ids(&get(&s, "/products/?sort(price)&limit(1,3)").await), ["p3", "p5"]);
    assert_eq!(get(&s, "/products/?limit(0)").await, json!([]));
    assert_eq!(ids(&get(&s, "/products/?sort(+name,-price)&limit(3)").await), ["p4", "p5", "p2"]);
    assert_eq!(
        ids(&get(&s, "/products/?count>=0&sort(-count)&limit(2)").await),
        ["p1", "p6"],
        "sorting on an unindexed attribute works too"
    );
    assert_eq!(
        ids(&get(&s, "/products/?sort(-count)&limit(2)").await),
        ["p1", "p6"],
        "records lacking the attribute sort first ascending, last descending (Harper 5)"
    );
    assert_eq!(ids(&get(&s, "/products/?sort(count)&limit(2)").await), ["p3", "p5"]);
    // By a related record's attribute, as Harper sorts (`rel.attr`, through relationships).
    assert_eq!(
        get(&s, "/products/?sort(brand.name)&select(id,brand{name})").await,
        json!([
            {"id": "p5", "brand": null}, {"id": "p6", "brand": null},
            {"id": "p1", "brand": {"name": "Acme"}}, {"id": "p3", "brand": {"name": "Acme"}},
            {"id": "p2", "brand": {"name": "Globex"}}, {"id": "p4", "brand": {"name": "Globex"}}
        ])
    );
    assert_eq!(
        ids(&get(&s, "/products/?(brandId==b1|brandId==b2)&sort(-brand.name,-price)").await),
        ["p2", "p4", "p1", "p3"]
    );
    assert_eq!(
        ids(&get(&s, "/Brand/?sort(products.name)").await),
        ["b2", "b1"],
        "the first related record's (Bar before Foo)"
    );
    assert_eq!(
        ids(&get(&s, "/products/?brandId==b1&sort(brand.products.brand.name,id)").await),
        ["p1", "p3"],
        "through several relationships"
    );
    for bad in ["/products/?sort(brand.nope)", "/products/?sort(nope.name)", "/products/?sort(name.x)"] {
        let (status, _, body) = send(&s, Method::GET, bad, None).await;
        let attribute = bad.split(['(', ')']).nth(1).unwrap();
        assert_eq!((status, body), (404, json!(format!("HdbError: {attribute} is not a defined attribute"))), "{bad}");
    }
}

#[tokio::test]
async fn malformed_queries_are_rejected_with_the_position() {
    let s = shop().await;
    let cases: &[(&str, u16, &str)] = &[
        ("nosuch==1", 404, "HdbError: nosuch is not a defined attribute"),
        ("nosuch", 404, "HdbError: nosuch is not a defined attribute"),
        ("name%7Bx%7D", 404, "HdbError: name{x} is not a defined attribute"),
        ("sort(nosuch)", 404, "HdbError: nosuch is not a defined attribute"),
        ("details.color==red", 400, "ClientError: Unable to query by attribute [\"details\",\"color\"]"),
        ("price=gt=abc", 400, "ClientError: Invalid value for attribute price: \"abc\", expecting Float"),
        ("name=zz=1", 400, "ClientError: Unknown query comparator \"zz\""),
    ];
    for (query, status, message) in cases {
        let (got, _, body) = send(&s, Method::GET, &format!("/products/?{query}"), None).await;
        assert_eq!((got, body), (*status, json!(message)), "?{query}");
    }
    assert_eq!(get(&s, "/products/?name").await, json!([]), "a bare attribute matches nothing, as in Harper");
    for (query, fragment) in [
        ("name==A&name==B|price>1", "Can not mix operators within a condition grouping at position 15"),
        ("name=zzz=1", "invalid FIQL operator zzz at position 4"),
        ("limit(1,2,3)", "limit must have 1 or 2 arguments at position 0"),
        ("group-by(name)", "group by is not implemented yet"),
        ("foo(1)", "unknown query function call foo"),
        ("(name==A", "expected ')'"),
        ("&&name==A", "no comparison specified before '&'"),
        ("name==F*o*", "a wildcard is only allowed at the end"),
    ] {
        let (got, _, body) = send(&s, Method::GET, &format!("/products/?{query}"), None).await;
        assert_eq!(got, 400, "?{query} answered {body}");
        assert!(body.as_str().unwrap().contains(fragment), "?{query} answered {body}");
    }
    // Nesting is bounded (it once overflowed the stack and killed the process).
    let nested = |depth: usize| format!("{}name==Foo{}", "(".repeat(depth), ")".repeat(depth));
    assert_eq!(send(&s, Method::GET, &format!("/products/?{}&select(name)", nested(64)), None).await.2, json!(["Foo"]));
    for query in [nested(5_000), "(".repeat(10_000), "[".repeat(10_000)] {
        let (got, _, body) = send(&s, Method::GET, &format!("/products/?{query}"), None).await;
        assert_eq!(got, 400, "{body}");
        assert!(body.as_str().unwrap().contains("nested deeper than 64 levels"), "{body}");
    }
    // A select follows at most 6 levels: each relationship level multiplies the reads.
    let chain = |depth: usize| format!("select(brand{}name{})", "{products{brand".repeat(depth), "}}".repeat(depth));
    assert_eq!(send(&s, Method::GET, &format!("/products/p1?{}", chain(2)), None).await.0, 200);
    for query in [chain(3), chain(100)] {
        let (got, _, body) = send(&s, Method::GET, &format!("/products/?{query}"), None).await;
        assert_eq!(got, 400, "{body}");
        assert!(body.as_str().unwrap().contains("select fields nested deeper than 6 levels"), "{body}");
    }
    let long_path = format!("/products/?{}name==x", "brand.products.".repeat(4));
    let (got, _, body) = send(&s, Method::GET, &long_path, None).await;
    assert_eq!(got, 400, "{body}");
    assert!(body.as_str().unwrap().contains("relationship path nested deeper than 6 levels"), "{body}");
    assert_eq!(send(&s, Method::GET, "/products/p1?".to_string().as_str(), None).await.0, 200, "still serving");
}

#[tokio::test]
async fn content_types_and_extensions() {
    let s = shop().await;
    let fetch = |path: String, accept: &'static str| {
        let request = s.client.get(s.rest(&path)).basic_auth(USER, Some(PASSWORD)).header("accept", accept);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
            (status, content_type, response.bytes().await.unwrap())
        }
    };
    let (status, content_type, bytes) = fetch("/products/p1".into(), "application/cbor").await;
    assert_eq!((status, content_type.as_deref()), (StatusCode::OK, Some("application/cbor")));
    assert_eq!(ciborium::from_reader::<Value, _>(&bytes[..]).unwrap()["name"], "Foo");
    let (_, _, bytes) = fetch("/products/?price>=10".into(), "application/cbor").await;
    assert_eq!((bytes[0], bytes[bytes.len() - 1]), (0x9f, 0xff), "an indefinite-length CBOR array");
    assert_eq!(ciborium::from_reader::<Value, _>(&bytes[..]).unwrap().as_array().unwrap().len(), 3);
    let (_, content_type, bytes) = fetch("/products/?price>=10&sort(price)".into(), "application/x-msgpack").await;
    assert_eq!(content_type.as_deref(), Some("application/x-msgpack"));
    let mut reader = &bytes[..];
    let mut names = Vec::new();
    while !reader.is_empty() {
        let record: Value = rmp_serde::from_read(&mut reader).unwrap();
        names.push(record["name"].as_str().unwrap().to_string());
    }
    assert_eq!(names, ["Foo", "hello world ünï", "Bar"], "MessagePack collections are concatenated values");
    let (_, content_type, bytes) =
        fetch("/products/?price>=10&sort(price)&select(name,price,tags)".into(), "text/csv").await;
    assert_eq!(content_type.as_deref(), Some("text/csv"));
    let mut csv = csv::Reader::from_reader(&bytes[..]);
    assert_eq!(csv.headers().unwrap(), vec!["name", "price", "tags"]);
    let rows: Vec<Vec<String>> = csv.records().map(|r| r.unwrap().iter().map(str::to_string).collect()).collect();
    assert_eq!(rows[0], ["Foo", "10", "[\"x\",\"y\"]"]);
    assert_eq!(rows.len(), 3);
    for (path, expected) in [
        ("/products/p1.json", "application/json"),
        ("/products/p1.cbor", "application/cbor"),
        ("/products/p1.msgpack", "application/x-msgpack"),
        ("/products/p1.csv", "text/csv"),
    ] {
        let (status, content_type, _) = fetch(path.into(), "application/json").await;
        assert_eq!((status, content_type.as_deref()), (StatusCode::OK, Some(expected)), "{path}");
    }
    let (status, _, _) = fetch("/products/p1".into(), "application/xml").await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    // Bodies in CBOR and MessagePack.
    let mut cbor = Vec::new();
    ciborium::into_writer(&json!({"name": "Cbor", "price": 1.5}), &mut cbor).unwrap();
    assert_eq!(put_raw(&s, "/products/c1", "application/cbor", cbor).await, 204);
    let msgpack = rmp_serde::to_vec_named(&json!({"name": "Msgpack", "price": 2.5})).unwrap();
    assert_eq!(put_raw(&s, "/products/m1", "application/x-msgpack", msgpack).await, 204);
    assert_eq!(get(&s, "/products/?price<3&sort(price)&select(name)").await, json!(["Cbor", "Msgpack"]));
    // YAML both ways, as Harper serves and reads it (a collection is one sequence).
    let yaml = "name: Yaml\nprice: 2.75\ntags: [a, \"b: c\", y, on]\n"; // YAML 1.2: y, on are strings
    assert_eq!(put_raw(&s, "/products/y1", "text/yaml", yaml).await, 204);
    let (status, content_type, bytes) = fetch("/products/y1".into(), "text/yaml").await;
    assert_eq!((status, content_type.as_deref()), (StatusCode::OK, Some("text/yaml; charset=utf-8")));
    let record: Value = serde_saphyr::from_slice(&bytes).unwrap();
    assert_eq!(
        (&record["name"], &record["price"], &record["tags"]),
        (&json!("Yaml"), &json!(2.75), &json!(["a", "b: c", "y", "on"]))
    );
    let (_, _, bytes) = fetch("/products/?price<3&sort(price)&select(name,price)".into(), "text/yaml").await;
    let records: Value = serde_saphyr::from_slice(&bytes).unwrap();
    assert_eq!(
        records,
        json!([{"name": "Cbor", "price": 1.5}, {"name": "Msgpack", "price": 2.5}, {"name": "Yaml", "price": 2.75}])
    );
    let (_, _, bytes) = fetch("/products/?price>1000".into(), "text/yaml").await;
    assert_eq!(serde_saphyr::from_slice::<Value>(&bytes).unwrap(), json!([]));
    assert_eq!(put_raw(&s, "/products/y2", "text/yaml", "name: [unclosed").await, 400);
    // Plain text: a property as its text (as Harper), anything else as JSON.
    for (path, expected) in
        [("/products/p1.name", "Foo"), ("/products/p1.price", "10"), ("/products/p1.tags", r#"["x","y"]"#)]
    {
        let (status, content_type, bytes) = fetch(path.into(), "text/plain").await;
        assert_eq!(
            (status, content_type.as_deref(), &bytes[..]),
            (StatusCode::OK, Some("text/plain; charset=utf-8"), expected.as_bytes())
        );
    }
    let (_, _, bytes) = fetch("/products/?name==Foo&select(id)".into(), "text/plain").await;
    assert_eq!(&bytes[..], br#"["p1"]"#);
    // Aliases that would expand to 9^10 nodes are refused, not expanded.
    let mut laughs = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
    for (prev, name) in ('a'..='i').zip('b'..='j') {
        laughs += &format!("{name}: &{name} [{}]\n", vec![format!("*{prev}"); 9].join(","));
    }
    laughs += "name: *j\n";
    assert_eq!(put_raw(&s, "/products/y3", "text/yaml", laughs).await, 400);
}

#[tokio::test]
async fn etags_and_conditional_gets() {
    let s = shop().await;
    let (_, headers, _) = send(&s, Method::GET, "/products/p1", None).await;
    let tag = headers["etag"].to_str().unwrap().to_string();
    assert_eq!(tag.len(), 12, "a quoted 10-character ETag: {tag}");
    assert!(!headers.contains_key("last-modified"), "only when the component asks for it");
    let p1 = get(&s, "/products/p1").await;
    // Harper's encoding of the version, which @updatedTime (Long) shows in whole ms.
    assert!(p1["updatedAt"].as_i64().is_some());
    let conditional = s
        .client
        .get(s.rest("/products/p1"))
        .basic_auth(USER, Some(PASSWORD))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(conditional.status(), 304);
    assert_eq!(conditional.headers()["etag"], tag.as_str());
    assert!(conditional.bytes().await.unwrap().is_empty());
    // A property carries its record's ETag, and is not modified while the record is not.
    let (status, headers, _) = s.rest_send(Method::GET, "/products/p1.name", None, &[("if-none-match", &tag)]).await;
    assert_eq!((status, &headers["etag"]), (304, &tag.parse().unwrap()));
    // A relationship's value is other records: the record's ETag says nothing of them.
    let (status, headers, brand) =
        s.rest_send(Method::GET, "/products/p1.brand", None, &[("if-none-match", &tag)]).await;
    assert_eq!((status, headers.get("etag"), &brand["name"]), (200, None, &json!("Acme")));
    send(&s, Method::PATCH, "/products/p1", Some(json!({"price": 99}))).await;
    let (status, _, name) = s.rest_send(Method::GET, "/products/p1.name", None, &[("if-none-match", &tag)]).await;
    assert_eq!((status, name), (200, json!("Foo")));
    let changed = s
        .client
        .get(s.rest("/products/p1"))
        .basic_auth(USER, Some(PASSWORD))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    assert_ne!(changed.headers()["etag"], tag.as_str());
    let (_, headers, _) = send(&s, Method::GET, "/products/", None).await;
    assert!(headers.get("etag").is_none(), "collections carry no ETag");
}

#[tokio::test]
async fn compression_above_the_threshold() {
    let s = shop().await;
    for i in 0..200 {
        send(&s, Method::PUT, &format!("/products/z{i}"), Some(json!({"name": format!("bulk {i}"), "price": i}))).await;
    }
    for encoding in ["br", "gzip"] {
        let response = s
            .client
            .get(s.rest("/products/"))
            .basic_auth(USER, Some(PASSWORD))
            .header("accept-encoding", encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["content-encoding"], encoding);
    }
    let small = s
        .client
        .get(s.rest("/products/p1.name"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept-encoding", "br")
        .send()
        .await
        .unwrap();
    assert!(small.headers().get("content-encoding").is_none(), "small bodies are sent as they are");
}

/// GETs `path` with the admin's credentials and `headers`: the status, the response
/// headers but `date` (sorted), and the body's bytes, to compare two answers whole.
async fn answer_of(
    s: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
) -> (reqwest::StatusCode, Vec<(String, String)>, bytes::Bytes) {
    let mut request = s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let mut kept: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| *name != "date")
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    kept.sort();
    (status, kept, response.bytes().await.unwrap())
}

#[tokio::test]
async fn a_request_naming_no_encoding_gets_what_the_compression_layer_would_send() {
    let s = shop().await;
    for i in 0..50 {
        send(&s, Method::PUT, &format!("/products/y{i}"), Some(json!({"name": format!("bulk {i}"), "price": i}))).await;
    }
    // A static file above the threshold carries no Vary of its own.
    let config = format!("{SHOP_CONFIG}static:\n  files: 'web/**'\n");
    s.ok(json!({"operation": "set_component_file", "project": "shop", "file": "web/big.txt", "payload": "x".repeat(5000)})).await;
    s.ok(json!({"operation": "set_component_file", "project": "shop", "file": "config.yaml", "payload": config})).await;
    // Without Accept-Encoding the request skips the compression layer; with
    // `identity` it goes through it. Everything but the date must be the same.
    let fetch = |path: &'static str, extra: Option<(&'static str, &'static str)>, identity: bool| {
        let mut headers: Vec<(&'static str, &'static str)> = extra.into_iter().collect();
        if identity {
            headers.push(("accept-encoding", "identity"));
        }
        let s = &s;
        async move { answer_of(s, path, &headers).await }
    };
    let etag = s.rest_send(Method::GET, "/products/p1", None, &[]).await.1["etag"].to_str().unwrap().to_string();
    let etag: &'static str = Box::leak(etag.into_boxed_str());
    for (path, extra) in [
        ("/products/", None),
        ("/products/p1", None),
        ("/products/p1.name", None),
        ("/products/p1", Some(("if-none-match", etag))),
        ("/products/nope", None),
        ("/products/?price=lt=3", Some(("accept", "application/cbor"))),
        ("/big.txt", None),
    ] {
        let plain = fetch(path, extra, false).await;
        let through_layer = fetch(path, extra, true).await;
        assert_eq!((plain.0, &plain.1), (through_layer.0, &through_layer.1), "{path} {extra:?}");
        assert!(plain.2 == through_layer.2, "{path} {extra:?}: the bodies differ");
    }
    let (_, listed, _) = fetch("/products/", None, false).await;
    assert!(
        listed.iter().any(|(n, v)| n == "vary" && v.to_ascii_lowercase().contains("accept-encoding")),
        "{listed:?}"
    );
    let (_, file, _) = fetch("/big.txt", None, false).await;
    assert!(file.contains(&("vary".to_string(), "accept-encoding".to_string())), "{file:?}");
}

#[tokio::test]
async fn authentication_and_validation() {
    let s = shop().await;
    let none = s.client.get(s.rest("/products/p1")).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert!(none.headers().get("www-authenticate").is_some());
    assert_eq!(none.json::<Value>().await.unwrap(), json!("AccessViolation: Must login"));
    let wrong = s.client.get(s.rest("/products/p1")).basic_auth(USER, Some("nope")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(wrong.json::<Value>().await.unwrap(), json!({"error": "Login failed"}));
    let cases = [
        ("/products/v1", json!({"price": "abc"}), "ClientError: Value \"abc\" in property price must be a number"),
        ("/products/v1", json!({"tags": "x"}), "ClientError: Value \"x\" in property tags must be an array"),
        (
            "/products/v1",
            json!({"details": {"weight": "heavy"}}),
            "ClientError: Value \"heavy\" in property details.weight must be a number",
        ),
        (
            "/products/v1",
            json!({"count": 1.5}),
            "ClientError: Value 1.5 in property count must be an integer (from -2147483648 to 2147483647)",
        ),
        (
            "/Sealed/1",
            json!({"name": "x", "extra": 1}),
            "ClientError: Property extra is not allowed: table Sealed is sealed",
        ),
        ("/Sealed/1", json!({"other": 1}), "ClientError: Property other is not allowed: table Sealed is sealed"),
        ("/Sealed/2", json!({}), "ClientError: Property name is required"),
    ];
    for (path, body, message) in cases {
        let (status, _, answer) = send(&s, Method::PUT, path, Some(body.clone())).await;
        assert_eq!((status, answer), (400, json!(message)), "{body}");
    }
    assert_eq!(send(&s, Method::GET, "/products/v1", None).await.0, 404, "nothing was written");
    assert_eq!(put_raw(&s, "/products/v2", "application/json", "{\"name\": ").await, 400, "malformed JSON");
    assert_eq!(put_raw(&s, "/products/v2", "application/json", "[1,2]").await, 400, "not an object");
}

#[tokio::test]
async fn oversized_rest_bodies_get_413() {
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[("HTTP_MAXREQUESTBODYSIZE", "1000")],
    )
    .await;
    let (status, _, body) = send(&s, Method::PUT, "/products/big", Some(json!({"name": "x".repeat(2000)}))).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(send(&s, Method::GET, "/products/big", None).await.0, 404);
}

#[tokio::test]
async fn openapi_describes_the_exports_for_super_users() {
    let s = shop().await;
    let document = get(&s, "/openapi").await;
    assert_eq!(document["openapi"], "3.0.3");
    assert!(document["paths"]["/products/{id}"]["get"].is_object());
    assert!(document["paths"]["/Brand/"]["post"].is_object());
    assert!(document["paths"].get("/Plain/").is_none(), "unexported tables are not described");
    assert_eq!(document["components"]["schemas"]["products"]["properties"]["price"], json!({"type": "number"}));
    assert_eq!(s.client.get(s.rest("/openapi")).send().await.unwrap().status(), 401);
    for method in [Method::POST, Method::DELETE, Method::from_bytes(b"FOO").unwrap()] {
        let (status, headers, _) = send(&s, method.clone(), "/openapi", None).await;
        assert_eq!((status, headers.get("allow").map(|v| v.to_str().unwrap())), (405, Some("GET, HEAD")), "{method}");
    }
    assert_eq!(send(&s, Method::HEAD, "/openapi", None).await.0, 200);
}

#[tokio::test]
async fn last_modified_when_the_component_asks_for_it() {
    let config = "rest:\n  lastModified: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    let schema = "type Note @table(database: \"notes\") @export {\n  id: ID @primaryKey\n  text: String\n  at: Long @updatedTime\n}\n";
    let s = TestServer::start_app(
        &[("components/notes/config.yaml", config), ("components/notes/schema.graphql", schema)],
        &[],
    )
    .await;
    assert_eq!(send(&s, Method::PUT, "/Note/n1", Some(json!({"text": "hi"}))).await.0, 204);
    let (status, headers, note) = send(&s, Method::GET, "/Note/n1", None).await;
    assert_eq!(status, 200);
    let header = headers["last-modified"].to_str().unwrap();
    let stated = httpdate::parse_http_date(header).unwrap();
    let written = std::time::UNIX_EPOCH + std::time::Duration::from_millis(note["at"].as_u64().unwrap());
    // An HTTP date has whole seconds.
    let gap = written.duration_since(stated).unwrap_or_default();
    assert!(gap < std::time::Duration::from_secs(1), "{header} for a write at {note}");
    let (_, headers, _) = send(&s, Method::GET, "/Note/n1.text", None).await;
    assert_eq!(headers["last-modified"].to_str().unwrap(), header);
}

/// A plain TCP connection to a local port, giving up on reads after 5 s.
fn raw_connection(port: u16) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    stream
}

/// Sends `head`, then (after a pause, as a separate packet) `body` on `stream`, and
/// reads one response: its status line and body length.
fn exchange(stream: &mut std::net::TcpStream, head: &str, body: &[u8]) -> (String, usize) {
    use std::io::{BufRead, BufReader, Read, Write};
    stream.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    stream.write_all(body).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut content = vec![0; length];
    reader.read_exact(&mut content).unwrap();
    (status.trim().to_string(), content.len())
}

#[tokio::test]
async fn requests_whose_body_is_not_read_keep_their_connection() {
    use std::io::{Read, Write};
    let s = shop().await;
    let s = std::sync::Arc::new(s);
    let server = s.clone();
    tokio::task::spawn_blocking(move || {
        let mut stream = raw_connection(server.http_port);
        let auth = "Authorization: Basic YWRtaW46cGFzc3dvcmQ=";
        let head = format!("GET /products/ HTTP/1.1\r\nHost: a\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n");
        // A body on a GET, arriving after the headers: read and ignored.
        let (status, length) = exchange(&mut stream, &head, br#"{"name":"x"} "#);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(length > 100, "the whole collection: {length} bytes");
        // The connection still serves the next request, also after answers given
        // before any body was read: wrong credentials, an unknown path.
        let body = br#"{"name":"late"}"#;
        let length = body.len();
        let head = format!("PUT /products/p9 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic eDp5\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(&mut stream, &head, body).0, "HTTP/1.1 401 Unauthorized");
        let head = format!("POST /nowhere/ HTTP/1.1\r\nHost: a\r\n{auth}\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(&mut stream, &head, body).0, "HTTP/1.1 404 Not Found");
        let head = format!("POST /products/p1 HTTP/1.1\r\nHost: a\r\n{auth}\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(&mut stream, &head, body).0, "HTTP/1.1 405 Method Not Allowed");
        let head = format!("GET /products/p1 HTTP/1.1\r\nHost: a\r\n{auth}\r\n\r\n");
        assert_eq!(exchange(&mut stream, &head, b"").0, "HTTP/1.1 200 OK");
        // The same on the Operations API.
        let mut ops = raw_connection(server.ops_port);
        let body = br#"{"operation":"describe_all"}"#;
        let length = body.len();
        let head = format!("POST / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic eDp5\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(&mut ops, &head, body).0, "HTTP/1.1 401 Unauthorized");
        let head = format!("POST / HTTP/1.1\r\nHost: a\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n");
        assert_eq!(exchange(&mut ops, &head, body).0, "HTTP/1.1 200 OK");
        // A client waiting for `100 Continue` is answered without being asked for its
        // body, and the connection closes.
        let head = "PUT /products/p9 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic eDp5\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n";
        let mut fresh = raw_connection(server.http_port);
        fresh.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = fresh.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    })
    .await
    .unwrap();
}

/// curl sends `<`, `>` and `"` in a query as they are (browsers and most client
/// libraries percent-encode them); Harper takes both, and so does Lyre, on one
/// kept-alive connection with pipelined requests, without touching bodies.
#[tokio::test]
async fn raw_comparison_characters_in_urls_work_as_curl_sends_them() {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let s = shop().await;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let body = r#"{"name": "say \"hi\" <b>", "price": 1}"#;
    let requests = [
        format!(
            "PUT /products/raw HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        format!(
            "GET /products/?price<6&select(id)&sort(+id) HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n\r\n"
        ),
        format!(
            "GET /products/?price>=12&select(id)&sort(+id) HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n\r\n"
        ),
        format!(
            "GET /products/?name==say%20\"hi\"%20%3Cb%3E&select(id) HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\nConnection: close\r\n\r\n"
        ),
    ];
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", s.http_port)).await.unwrap();
    conn.write_all(requests.concat().as_bytes()).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    // Each response: status line, headers, then its body up to the next response.
    let responses: Vec<(&str, &str)> =
        answer.split("HTTP/1.1 ").skip(1).map(|r| (&r[..3], r.split("\r\n\r\n").nth(1).unwrap_or_default())).collect();
    assert_eq!(
        responses,
        [("204", ""), ("200", r#"["p3","p4","raw"]"#), ("200", r#"["p2","p6"]"#), ("200", r#"["raw"]"#)],
        "{answer}"
    );
    // The body's characters were stored as sent.
    assert_eq!(get(&s, "/products/raw").await["name"], "say \"hi\" <b>");
}

/// CORS as configured: a preflight is answered (200, as Harper, before any
/// credentials are asked for), and responses echo the request's origin; with
/// `http.cors: false` neither happens.
#[tokio::test]
async fn cors_as_configured() {
    let s = shop().await;
    let preflight = |s: &TestServer| {
        s.client
            .request(Method::OPTIONS, s.rest("/products/p1"))
            .header("origin", "http://example.com")
            .header("access-control-request-method", "PUT")
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let answer = preflight(&s).await.unwrap();
    assert_eq!(answer.status(), 200);
    let headers = answer.headers();
    assert_eq!(headers["access-control-allow-origin"], "http://example.com");
    assert_eq!(headers["access-control-allow-credentials"], "true");
    assert_eq!(headers["access-control-allow-methods"], "POST, GET, PUT, DELETE, PATCH, OPTIONS");
    assert_eq!(headers["access-control-allow-headers"], "Accept, Content-Type, Authorization");
    let (status, headers, _) =
        s.rest_send(Method::GET, "/products/p1", None, &[("origin", "http://example.com")]).await;
    assert_eq!((status, &headers["access-control-allow-origin"]), (200, &"http://example.com".parse().unwrap()));
    assert!(s.rest_send(Method::GET, "/products/p1", None, &[]).await.1.get("access-control-allow-origin").is_none());

    let closed = TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[("HTTP_CORS", "false")],
    )
    .await;
    let answer = preflight(&closed).await.unwrap();
    assert!(answer.headers().get("access-control-allow-origin").is_none(), "{:?}", answer.headers());
    let (_, headers, _) = closed.rest_send(Method::GET, "/products/", None, &[("origin", "http://example.com")]).await;
    assert!(headers.get("access-control-allow-origin").is_none());
}

/// A relationship is computed from the related records: a write that sets it is
/// refused, as Harper refuses it, and nothing is stored.
#[tokio::test]
async fn a_relationship_cannot_be_written() {
    let s = shop().await;
    let body = json!({"name": "V", "brandId": "b1", "brand": {"name": "Fake"}});
    let (status, _, answer) = send(&s, Method::PUT, "/products/v22", Some(body.clone())).await;
    assert_eq!(
        (status, answer),
        (400, json!("ClientError: Computed property brand may not be directly assigned a value"))
    );
    assert_eq!(send(&s, Method::GET, "/products/v22", None).await.0, 404);
    s.fails(
        json!({"operation": "insert", "database": "shop", "table": "Product", "records": [{"id": "v23", "brand": null}]}),
        400,
        "Computed property brand may not be directly assigned a value",
    )
    .await;
}

/// A whole-record `GET` is served from the stored bytes without decoding them; a
/// `select` of every attribute goes the general way (decode, project, encode). Both
/// must answer the same bytes in every format, for values of every kind.
#[tokio::test]
async fn a_whole_record_reads_as_the_projection_of_all_its_attributes() {
    let s = shop().await;
    let tricky = [
        json!({"name": "quote \" backslash \\ slash / tab \t nl \n bell \u{7} del \u{7f}", "price": 1e300}),
        json!({"name": "ünïcødé ✓ 😀", "price": -0.0, "wide": -9007199254740993i64, "ratio": 0.1}),
        json!({"name": "nested", "extra": {"a": [1, 2.5, {"b": null}], "c": true}, "tags": [], "empty": {}, "count": 1}),
        json!({"name": "", "price": 4.0, "widest": 9223372036854775807i64, "big": 1.7976931348623157e308}),
    ];
    for (n, body) in tricky.into_iter().enumerate() {
        assert_eq!(send(&s, Method::PUT, &format!("/products/t{n}"), Some(body)).await.0, 204);
    }
    // A counter: the record is rewritten by the writer's merge.
    let add = json!({"count": {"__op__": "add", "value": 3}});
    assert_eq!(send(&s, Method::PATCH, "/products/t2", Some(add)).await.0, 204);
    for id in ["p1", "p2", "p6", "t0", "t1", "t2", "t3"] {
        let whole = get(&s, &format!("/products/{id}")).await;
        let names: Vec<&str> = whole.as_object().expect("a record").keys().map(String::as_str).collect();
        let select = format!("select({})", names.join(","));
        for accept in ["application/json", "application/cbor", "application/x-msgpack", "text/yaml", "text/csv"] {
            let fetch = |path: String| {
                let request = s.client.get(s.rest(&path)).basic_auth(USER, Some(PASSWORD)).header("accept", accept);
                async move {
                    let response = request.send().await.expect("request");
                    assert_eq!(response.status(), 200, "{path} as {accept}");
                    response.bytes().await.expect("body")
                }
            };
            let fast = fetch(format!("/products/{id}")).await;
            let general = fetch(format!("/products/{id}?{select}")).await;
            assert_eq!(fast, general, "GET /products/{id} as {accept}");
        }
    }
}

/// A panic while answering a REST request is a 500 in Harper's error shape, and the
/// server keeps serving (the REST port has no router layer to catch it: its service
/// does).
#[tokio::test]
async fn a_panicking_read_is_a_500_and_the_server_lives() {
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[("LYRE_FAILPOINT", "panic:read-record")],
    )
    .await;
    for _ in 0..2 {
        let (status, _, body) = send(&s, Method::GET, "/products/p1", None).await;
        assert_eq!(status, 500);
        assert!(body.to_string().contains("internal error"), "{body}");
    }
    assert_eq!(send(&s, Method::GET, "/products/", None).await.0, 200, "other requests are served");
    assert_eq!(s.client.get(s.url("/health")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn one_query_model_answers_rest_query_search_and_search_by_conditions_alike() {
    let s = shop().await;
    // (REST query string, the same as a query object's conditions)
    let cases = [
        ("brandId==b1", json!([{"attribute": "brandId", "comparator": "equals", "value": "b1"}]), json!("and")),
        (
            "price=gt=5&price=lt=12",
            json!([{"attribute": "price", "comparator": "greater_than", "value": 5},
                   {"attribute": "price", "comparator": "less_than", "value": 12}]),
            json!("and"),
        ),
        (
            "name==Foo|name==Bar",
            json!([{"attribute": "name", "comparator": "equals", "value": "Foo"},
                   {"attribute": "name", "comparator": "equals", "value": "Bar"}]),
            json!("or"),
        ),
        (
            "brand.name==Globex",
            json!([{"attribute": ["brand", "name"], "comparator": "equals", "value": "Globex"}]),
            json!("and"),
        ),
    ];
    for (query_string, conditions, operator) in cases {
        let (status, _, rest) =
            send(&s, Method::GET, &format!("/products/?{query_string}&select(id,name)&sort(+id)"), None).await;
        assert_eq!(status, 200, "{query_string}: {rest}");
        assert!(!rest.as_array().unwrap().is_empty(), "{query_string} finds something");
        let object = json!({"conditions": conditions, "operator": operator, "select": ["id", "name"], "sort": {"attribute": "id"}});
        let (status, _, by_query) =
            send(&s, Method::from_bytes(b"QUERY").unwrap(), "/products/", Some(object.clone())).await;
        assert_eq!((status, &by_query), (200, &rest), "QUERY {object}");
        let mut operation = object.as_object().unwrap().clone();
        operation.extend([("database".into(), json!("shop")), ("table".into(), json!("Product"))]);
        operation.insert("operation".into(), json!("search"));
        assert_eq!(s.ok(Value::Object(operation.clone())).await, rest, "search {object}");
        operation.insert("operation".into(), json!("search_by_conditions"));
        operation.insert("get_attributes".into(), operation["select"].clone());
        operation.remove("select");
        assert_eq!(s.ok(Value::Object(operation)).await, rest, "search_by_conditions {object}");
    }
    // An attribute the table does not define: 404, as for a query string.
    let (status, _, body) = send(&s, Method::GET, "/products/?colour=red", None).await;
    assert_eq!((status, body), (404, json!("HdbError: colour is not a defined attribute")));
    let nested = json!({"conditions": [{"operator": "or", "conditions": [
        {"attribute": "name", "value": "Foo"}, {"attribute": "colour", "value": "red"}]}]});
    let (status, _, body) = send(&s, Method::from_bytes(b"QUERY").unwrap(), "/products/", Some(nested)).await;
    assert_eq!((status, body), (404, json!("HdbError: colour is not a defined attribute")));
}

#[tokio::test]
async fn get_attributes_reach_through_relationships() {
    let s = shop().await;
    let by_conditions = |get_attributes: Value| {
        json!({"operation": "search_by_conditions", "database": "shop", "table": "Product", "get_attributes": get_attributes,
               "conditions": [{"attribute": "id", "comparator": "equals", "value": "p1"}]})
    };
    // A relationship by name is its whole record; `{name, select}` picks from it.
    let whole = s.ok(by_conditions(json!(["name", "brand"]))).await;
    assert_eq!(whole[0]["name"], "Foo");
    assert_eq!((whole[0]["brand"]["id"].clone(), whole[0]["brand"]["name"].clone()), (json!("b1"), json!("Acme")));
    let picked = s.ok(by_conditions(json!(["name", "count", {"name": "brand", "select": ["name"]}]))).await;
    assert_eq!(picked, json!([{"name": "Foo", "count": 5, "brand": {"name": "Acme"}}]));
    s.fails(by_conditions(json!(["name", "nothing_here"])), 400, "unknown attribute 'nothing_here'").await;
    // The other way round, a list; and by id.
    let brand = s
        .ok(json!({"operation": "search_by_id", "database": "shop", "table": "Brand", "ids": ["b2"],
                   "get_attributes": ["name", {"name": "products", "select": ["id"]}]}))
        .await;
    assert_eq!(brand, json!([{"name": "Globex", "products": [{"id": "p2"}, {"id": "p4"}]}]));
    // Unknown names and malformed entries are refused.
    let (status, answer) = s.op(by_conditions(json!(["name", {"name": "nope", "select": ["x"]}]))).await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = s.op(by_conditions(json!(["name", {"select": ["x"]}]))).await;
    assert_eq!((status, answer["error"].as_str().unwrap().contains("get_attributes")), (400, true), "{answer}");
}

#[tokio::test]
async fn a_query_naming_one_record_answers_as_the_streamed_search_does() {
    let s = shop().await;
    // `id==p1` is answered on the request thread; `id=ge=p1&id=le=p1` finds the same
    // record through a streamed search. Same status, headers and bytes, in every format.
    for accept in ["application/json", "application/cbor", "application/x-msgpack", "text/csv", "application/yaml"] {
        for select in ["", "&select(name,brand{name})", "&select(name)"] {
            let bounded = format!("/products/?id==p1{select}");
            let streamed = format!("/products/?id=ge=p1&id=le=p1{select}");
            let headers = [("accept", accept)];
            let (one, all) = (answer_of(&s, &bounded, &headers).await, answer_of(&s, &streamed, &headers).await);
            assert_eq!(one.0, 200, "{accept} {select}");
            assert_eq!(one, all, "{accept} {select}");
            assert!(!one.2.is_empty());
        }
    }
    let (status, _, missing) = send(&s, Method::GET, "/products/?id==nope", None).await;
    assert_eq!((status, missing), (200, json!([])));
    let (status, _, unknown) = send(&s, Method::GET, "/products/?id==p1&nosuch==1", None).await;
    assert_eq!((status, unknown), (404, json!("HdbError: nosuch is not a defined attribute")));
}
