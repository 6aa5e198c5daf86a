//! The request envelope: authentication, body formats, malformed input, limits.

use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

async fn raw(s: &TestServer, content_type: Option<&str>, body: Vec<u8>) -> (u16, Value) {
    let mut request = s.client.post(s.url("/")).basic_auth(USER, Some(PASSWORD)).body(body);
    if let Some(ct) = content_type {
        request = request.header("content-type", ct);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test]
async fn the_front_page_answers_without_credentials() {
    let s = TestServer::start().await;
    let page = s.client.get(s.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    // The web console, which loads nothing from anywhere but this server.
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    let text = page.text().await.unwrap();
    assert!(text.contains("<title>Lyre console</title>") && text.contains("/console/app.js"), "{text}");
}

#[tokio::test]
async fn health_answers_without_credentials() {
    let s = TestServer::start().await;
    let response = s.client.get(s.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "HarperDB is running.");
    let other = s.client.get(s.url("/nope")).send().await.unwrap();
    assert_eq!(other.status(), 404);
}

#[tokio::test]
async fn missing_or_wrong_credentials_get_401() {
    let s = TestServer::start().await;
    let body = json!({"operation": "describe_all"}).to_string();
    let none =
        s.client.post(s.url("/")).header("content-type", "application/json").body(body.clone()).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert!(none.headers().get("www-authenticate").is_some());
    assert_eq!(none.json::<Value>().await.unwrap(), json!({"error": "Must login"}));
    for (user, password) in [(USER, "wrong"), ("nobody", PASSWORD)] {
        let wrong = s.client.post(s.url("/")).basic_auth(user, Some(password)).body(body.clone()).send().await.unwrap();
        assert_eq!(wrong.status(), 401);
        assert_eq!(wrong.json::<Value>().await.unwrap(), json!({"error": "Login failed"}));
    }
    for header in ["Basic !!!notbase64!!!", "Basic YWRtaW5wYXNzd29yZA==", "Basic "] {
        let bad = s.client.post(s.url("/")).header("authorization", header).body(body.clone()).send().await.unwrap();
        assert_eq!(bad.status(), 401, "{header}");
    }
    let bearer = s.client.post(s.url("/")).bearer_auth("garbage.token.here").body(body.clone()).send().await.unwrap();
    assert_eq!(bearer.status(), 401);
    assert_eq!(bearer.json::<Value>().await.unwrap(), json!({"error": "invalid token"}));
    // The right credentials still work after failures (and from the cache).
    for _ in 0..2 {
        assert_eq!(s.op(json!({"operation": "describe_all"})).await.0, 200);
    }
}

#[tokio::test]
async fn loopback_requests_may_be_trusted_when_configured() {
    let s = TestServer::start_with(&[("AUTHENTICATION_AUTHORIZELOCAL", "true")]).await;
    // Trusted as the server itself, such a request may drop any user but the last
    // active super user: nobody could log in to manage the server after it.
    let anonymous_op = |body: Value| {
        s.client.post(s.url("/")).header("content-type", "application/json").body(body.to_string()).send()
    };
    let refused = anonymous_op(json!({"operation": "drop_user", "username": USER})).await.unwrap();
    assert_eq!(refused.status(), 400);
    let answer: Value = refused.json().await.unwrap();
    assert_eq!(answer["error"], "This change would leave no active user with a super_user role");
    let response = s
        .client
        .post(s.url("/"))
        .header("content-type", "application/json")
        .body(r#"{"operation":"describe_all"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Credentials of a kind Lyre does not take are not "no credentials": never the
    // trusted loopback user.
    for header in ["Negotiate abc", "Basic ", "Digest username=x"] {
        let refused = s
            .client
            .post(s.url("/"))
            .header("content-type", "application/json")
            .header("authorization", header)
            .body(r#"{"operation":"describe_all"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{header}");
    }
}

#[tokio::test]
async fn malformed_envelopes_get_400_with_the_reason() {
    let s = TestServer::start().await;
    let (status, body) = raw(&s, Some("application/json"), br#"{"operation": "describe_all","#.to_vec()).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().starts_with("Invalid JSON: "), "{body}");
    assert!(body["error"].as_str().unwrap().contains("column"), "the message names the position: {body}");
    assert_eq!(
        raw(&s, Some("application/json"), Vec::new()).await,
        (400, json!({"error": "Body cannot be empty when content-type is set to 'application/json'"}))
    );
    let no_operation = json!({"error": "Request body must include an 'operation' property."});
    for body in [
        r#"[{"operation":"describe_all"}]"#,
        r#"{"database":"dev"}"#,
        r#"{"operation":null}"#,
        "{}",
        r#""describe_all""#,
        "null",
    ] {
        assert_eq!(
            raw(&s, Some("application/json"), body.as_bytes().to_vec()).await,
            (400, no_operation.clone()),
            "{body}"
        );
    }
    assert_eq!(
        raw(&s, Some("application/json"), br#"{"operation":"foo"}"#.to_vec()).await,
        (400, json!({"error": "Operation 'foo' not found"}))
    );
    // Harper's operations Lyre will not offer say so, and why.
    for operation in ["install_node_modules", "set_license", "add_ssh_key", "catchup", "add_node", "cluster_status"] {
        let body = json!({"operation": operation}).to_string().into_bytes();
        let (status, answer) = raw(&s, Some("application/json"), body).await;
        assert_eq!(status, 400, "{operation}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("Lyre does not offer the operation '{operation}': ")), "{message}");
    }
    assert_eq!(raw(&s, Some("application/json"), br#"{"operation":"DESCRIBE_ALL"}"#.to_vec()).await.0, 400);
    assert_eq!(
        raw(&s, Some("application/json"), br#"{"operation":123}"#.to_vec()).await,
        (400, json!({"error": "'operation' must be a string"}))
    );
    assert_eq!(
        raw(&s, Some("application/xml"), b"<op/>".to_vec()).await,
        (415, json!({"error": "Unsupported Media Type: application/xml"}))
    );
    assert_eq!(
        raw(&s, Some("application/json; charset=utf-8"), br#"{"operation":"describe_all"}"#.to_vec()).await,
        (200, json!({}))
    );
    assert_eq!(raw(&s, None, br#"{"operation":"describe_all"}"#.to_vec()).await, (200, json!({})));
    let (status, body) = raw(&s, Some("application/cbor"), vec![0xff, 0xff, 0xff]).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().starts_with("Invalid CBOR"), "{body}");
    let (status, _) = raw(&s, Some("application/x-msgpack"), vec![0xc1]).await;
    assert_eq!(status, 400);
    // Errors read as sentences, and a body is one value: trailing bytes are refused.
    let describe = json!({"operation": "describe_all"});
    let mut cbor = Vec::new();
    ciborium::into_writer(&describe, &mut cbor).unwrap();
    let cut = cbor[..cbor.len() - 2].to_vec();
    cbor.extend_from_slice(&[1, 2, 3]);
    assert_eq!(
        raw(&s, Some("application/cbor"), cut).await,
        (400, json!({"error": "Invalid CBOR: the body ends in the middle of a value"}))
    );
    assert_eq!(
        raw(&s, Some("application/cbor"), cbor).await,
        (400, json!({"error": "Invalid CBOR: 3 bytes follow the value"}))
    );
    let mut msgpack = rmp_serde::to_vec_named(&describe).unwrap();
    msgpack.push(0xc0);
    assert_eq!(
        raw(&s, Some("application/x-msgpack"), msgpack).await,
        (400, json!({"error": "Invalid MessagePack: 1 byte follows the value"}))
    );
    // Deeply nested input is refused, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(raw(&s, Some("application/json"), deep.into_bytes()).await.0, 400);
    // The server is still healthy after all of it.
    assert_eq!(s.op(json!({"operation": "describe_all"})).await.0, 200);
}

#[tokio::test]
async fn oversized_bodies_get_413_and_write_nothing() {
    let s = TestServer::start_with(&[("OPERATIONSAPI_NETWORK_MAXREQUESTBODYSIZE", "10000")]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    let records: Vec<Value> = (0..200).map(|i| json!({"id": i, "pad": "x".repeat(100)})).collect();
    let (status, body) =
        s.op(json!({"operation": "insert", "database": "dev", "table": "t", "records": records})).await;
    assert_eq!(status, 413);
    assert_eq!(body, json!({"error": "Request body too large, maximum size is 10000 bytes"}));
    // Without a declared length (chunked), the limit still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(b"{\"operation\":\"describe_all\",\"pad\":\"".to_vec()), Ok(vec![b'x'; 20_000]), Ok(b"\"}".to_vec())];
    let response = s
        .client
        .post(s.url("/"))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    // The unread rest of the body makes the connection unusable: the client is told.
    assert_eq!(response.headers()["connection"], "close");
    let count = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "t"})).await;
    assert_eq!(count["record_count"], 0);
}

#[tokio::test]
async fn cbor_and_msgpack_bodies_and_responses() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let insert = json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "Penny", "age": 5}]});
    let mut cbor = Vec::new();
    ciborium::into_writer(&insert, &mut cbor).unwrap();
    let (status, body) = raw(&s, Some("application/cbor"), cbor).await;
    assert_eq!((status, body["message"].clone()), (200, json!("inserted 1 of 1 records")));
    let search = json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": ["id", "name", "age"]});
    let msgpack = rmp_serde::to_vec_named(&search).unwrap();
    for accept in ["application/x-msgpack", "application/cbor", "application/json"] {
        let response = s
            .client
            .post(s.url("/"))
            .basic_auth(USER, Some(PASSWORD))
            .header("content-type", "application/x-msgpack")
            .header("accept", accept)
            .body(msgpack.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], accept);
        let bytes = response.bytes().await.unwrap();
        let decoded: Value = match accept {
            "application/x-msgpack" => rmp_serde::from_slice(&bytes).unwrap(),
            "application/cbor" => ciborium::from_reader(&bytes[..]).unwrap(),
            _ => serde_json::from_slice(&bytes).unwrap(),
        };
        assert_eq!(decoded, json!([{"id": 1, "name": "Penny", "age": 5}]), "{accept}");
    }
    // A streamed search in CBOR is an indefinite-length array that decodes whole.
    let response = s
        .client
        .post(s.url("/"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept", "application/cbor")
        .body(json!({"operation": "search_by_value", "database": "dev", "table": "dog", "attribute": "id", "value": "*", "get_attributes": ["name"]}).to_string())
        .send()
        .await
        .unwrap();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes[0], 0x9f);
    assert_eq!(ciborium::from_reader::<Value, _>(&bytes[..]).unwrap(), json!([{"name": "Penny"}]));
    let refused = s
        .client
        .post(s.url("/"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept", "application/xml")
        .body(r#"{"operation":"describe_all"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 406);
}

/// A web page may call the Operations API, as Harper allows by default: a preflight
/// is answered without credentials, responses echo the origin; with
/// `operationsApi.network.cors: false` neither happens.
#[tokio::test]
async fn cross_origin_requests_are_answered_as_configured() {
    for (cors, vars) in [(true, vec![]), (false, vec![("OPERATIONSAPI_NETWORK_CORS", "false")])] {
        let s = TestServer::start_with(&vars).await;
        let preflight = s
            .client
            .request(reqwest::Method::OPTIONS, s.url("/"))
            .header("origin", "http://studio.example")
            .header("access-control-request-method", "POST")
            .send()
            .await
            .unwrap();
        let allowed = |headers: &reqwest::header::HeaderMap| {
            headers.get("access-control-allow-origin").map(|v| v.to_str().unwrap().to_string())
        };
        let answered = s
            .client
            .post(s.url("/"))
            .basic_auth(USER, Some(PASSWORD))
            .header("origin", "http://studio.example")
            .json(&json!({"operation": "describe_all"}))
            .send()
            .await
            .unwrap();
        assert_eq!(answered.status(), 200);
        let health = s.client.get(s.url("/health")).header("origin", "http://studio.example").send().await.unwrap();
        if cors {
            assert_eq!(allowed(health.headers()).as_deref(), Some("http://studio.example"), "every route");
            assert!(health.headers().get_all("vary").iter().any(|v| v == "Origin"));
            assert_eq!(preflight.status(), 200);
            assert_eq!(allowed(preflight.headers()).as_deref(), Some("http://studio.example"));
            assert_eq!(preflight.headers()["access-control-allow-methods"], "POST, GET, PUT, DELETE, PATCH, OPTIONS");
            assert_eq!(preflight.headers()["access-control-allow-credentials"], "true");
            assert_eq!(allowed(answered.headers()).as_deref(), Some("http://studio.example"));
        } else {
            assert_eq!(preflight.status(), 204, "a plain OPTIONS lists the methods");
            assert_eq!(preflight.headers()["allow"], "GET, POST, OPTIONS");
            assert_eq!(allowed(preflight.headers()), None);
            assert_eq!(allowed(answered.headers()), None);
            assert_eq!(allowed(health.headers()), None);
        }
    }
}

/// YAML bodies are read with limits that grow with the body (a large document a JSON
/// body could carry is accepted), and errors stay JSON whatever text format is asked.
#[tokio::test]
async fn yaml_bodies_of_any_size_and_json_errors() {
    let s = TestServer::start().await;
    let ids: Vec<String> = (0..300_000).map(|i| i.to_string()).collect();
    let yaml = format!("operation: describe_all\npadding: [{}]\n", ids.join(","));
    let answered = s
        .client
        .post(s.url("/"))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", "text/yaml")
        .body(yaml)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200, "300,000 nodes: {}", answered.text().await.unwrap());
    for accept in ["text/yaml", "text/plain", "text/csv"] {
        let failed = s
            .client
            .post(s.url("/"))
            .basic_auth(USER, Some(PASSWORD))
            .header("accept", accept)
            .json(&json!({"operation": "describe_table", "database": "nope", "table": "t"}))
            .send()
            .await
            .unwrap();
        assert_eq!(failed.headers()["content-type"], "application/json", "{accept}");
        let body: Value = failed.json().await.unwrap();
        assert!(body["error"].as_str().is_some(), "{accept}: {body}");
    }
}

/// A JSON body is checked for UTF-8 whole: one that is not is refused with the
/// first bad byte named, over the Operations API and REST alike, and nothing of it
/// is written; text of every width (two-, three- and four-byte characters, escapes)
/// is kept exactly.
#[tokio::test]
async fn json_bodies_that_are_not_utf8_are_refused_naming_the_byte() {
    let schema = "type Note @table @export {\n  id: ID @primaryKey\n  text: String\n}\n";
    let s = TestServer::start_app(
        &[("components/Note/config.yaml", crate::rest::SHOP_CONFIG), ("components/Note/schema.graphql", schema)],
        &[],
    )
    .await;
    let mut bad = br#"{"operation":"insert","schema":"data","table":"Note","records":[{"id":"n1","text":"caf"#.to_vec();
    let at = bad.len();
    bad.extend_from_slice(b"\xe9\"}]}");
    let (status, body) = raw(&s, Some("application/json"), bad).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], format!("Invalid JSON: the body is not UTF-8 (at byte {at})"));
    let put = s
        .client
        .put(s.rest("/Note/n2"))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", "application/json")
        .body(b"{\"text\":\"\xff\"}".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 400);
    assert!(put.text().await.unwrap().contains("not UTF-8 (at byte 9)"));
    let (_, found) = s.op(json!({"operation": "search_by_value", "schema": "data", "table": "Note", "search_attribute": "id", "search_value": "*"})).await;
    assert_eq!(found, json!([]), "nothing was written");

    let text = "café ∑ 🎵 \"quoted\" \\ \u{7f}";
    s.ok(json!({"operation": "insert", "schema": "data", "table": "Note", "records": [{"id": "n3", "text": text}]}))
        .await;
    let stored: Value =
        s.client.get(s.rest("/Note/n3")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap().json().await.unwrap();
    assert_eq!(stored["text"], text);
}
