//! Tokens and sessions through the real binary (issue 12): JWT operation and refresh
//! tokens on both ports, their expiry, refresh and tampering; `login` cookies on both
//! ports for the origin that signed in and no other, `logout`, and sessions across a
//! restart; malformed `Authorization` headers.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

async fn anonymous(s: &TestServer, body: &Value) -> (u16, Value, reqwest::header::HeaderMap) {
    anonymous_from(s, None, body).await
}

/// An operation without credentials, sent as a page of `origin` would send it.
async fn anonymous_from(
    s: &TestServer,
    origin: Option<&str>,
    body: &Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = reqwest::Client::new().post(s.url("/")).header("content-type", "application/json");
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), headers)
}

/// An operation and a REST GET with this `Authorization` or `Cookie` header.
async fn with_header(s: &TestServer, name: &str, value: &str) -> (u16, u16, Value) {
    with_headers(s, &[(name, value)]).await
}

/// An operation and a REST GET with these headers.
async fn with_headers(s: &TestServer, headers: &[(&str, &str)]) -> (u16, u16, Value) {
    let client = reqwest::Client::new();
    let mut op = client.post(s.url("/")).header("content-type", "application/json");
    let mut rest = client.get(s.rest("/nosuchtable/"));
    for (name, value) in headers {
        op = op.header(*name, *value);
        rest = rest.header(*name, *value);
    }
    let op = op.body(json!({"operation": "user_info"}).to_string()).send().await.unwrap();
    let op_status = op.status().as_u16();
    let body: Value = op.json().await.unwrap_or(Value::Null);
    let rest = rest.send().await.unwrap();
    // A logged-in client is told the table does not exist; anyone else, to log in.
    (op_status, rest.status().as_u16(), body)
}

#[tokio::test]
async fn tokens_authenticate_both_ports_and_refresh() {
    let s = TestServer::start().await;
    let (status, tokens, _) =
        anonymous(&s, &json!({"operation": "create_authentication_tokens", "username": USER, "password": PASSWORD}))
            .await;
    assert_eq!(status, 200, "{tokens}");
    let operation = tokens["operation_token"].as_str().unwrap().to_string();
    let refresh = tokens["refresh_token"].as_str().unwrap().to_string();

    let (op, rest, info) = with_header(&s, "authorization", &format!("Bearer {operation}")).await;
    assert_eq!((op, rest), (200, 404), "{info}");
    assert_eq!(info["username"], USER);

    // A refresh token is not an operation token.
    let (op, rest, answer) = with_header(&s, "authorization", &format!("Bearer {refresh}")).await;
    assert_eq!((op, rest), (401, 401), "{answer}");
    assert_eq!(answer["error"], "invalid token");
    // Tampered: one character of the signature changed.
    let mut forged = operation.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let (op, rest, answer) = with_header(&s, "authorization", &format!("Bearer {forged}")).await;
    assert_eq!((op, rest, answer["error"].as_str()), (401, 401, Some("invalid token")));

    // The refresh token buys a new operation token, by body or as the bearer.
    let (status, fresh, _) =
        anonymous(&s, &json!({"operation": "refresh_operation_token", "refresh_token": refresh})).await;
    assert_eq!(status, 200, "{fresh}");
    let fresh_token = fresh["operation_token"].as_str().unwrap();
    assert_eq!(with_header(&s, "authorization", &format!("Bearer {fresh_token}")).await.0, 200);
    let response = reqwest::Client::new()
        .post(s.url("/"))
        .bearer_auth(&refresh)
        .json(&json!({"operation": "refresh_operation_token"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    // Only the latest refresh token does.
    s.ok(json!({"operation": "create_authentication_tokens"})).await;
    let (status, answer, _) =
        anonymous(&s, &json!({"operation": "refresh_operation_token", "refresh_token": refresh})).await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("invalid token")));

    // Wrong credentials.
    let (status, answer, _) =
        anonymous(&s, &json!({"operation": "create_authentication_tokens", "username": USER, "password": "nope"}))
            .await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("invalid credentials")));
    let (status, answer, _) = anonymous(&s, &json!({"operation": "create_authentication_tokens"})).await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("Must login")));
}

#[tokio::test]
async fn tokens_expire_and_survive_a_restart() {
    let mut s = TestServer::start().await;
    let short = s.ok(json!({"operation": "create_authentication_tokens", "expires_in": 1})).await;
    let long = s.ok(json!({"operation": "create_authentication_tokens"})).await;
    let bearer = |t: &Value, k: &str| format!("Bearer {}", t[k].as_str().unwrap());
    assert_eq!(with_header(&s, "authorization", &bearer(&short, "operation_token")).await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (op, rest, answer) = with_header(&s, "authorization", &bearer(&short, "operation_token")).await;
    assert_eq!((op, rest, answer["error"].as_str()), (401, 401, Some("token expired")));
    // The key is kept: a token issued before a restart still works after it.
    s.restart().await;
    assert_eq!(with_header(&s, "authorization", &bearer(&long, "operation_token")).await.0, 200);
}

#[tokio::test]
async fn a_login_session_works_on_both_ports_until_logout_and_across_a_restart() {
    let mut s = TestServer::start().await;
    // A page of one origin signs in; the browser sends its origin with the cookie.
    let page = "http://app.example:8080";
    let (status, answer, headers) =
        anonymous_from(&s, Some(page), &json!({"operation": "login", "username": USER, "password": PASSWORD})).await;
    assert_eq!((status, answer["message"].as_str()), (200, Some("Login successful")));
    let set_cookie = headers.get("set-cookie").unwrap().to_str().unwrap().to_string();
    assert!(set_cookie.starts_with("app_example_8080-hdb-session="), "{set_cookie}");
    assert!(set_cookie.contains("HttpOnly") && set_cookie.ends_with("; SameSite=Lax"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let from_page = [("cookie", cookie.as_str()), ("origin", page)];

    let (op, rest, info) = with_headers(&s, &from_page).await;
    assert_eq!((op, rest, info["username"].as_str()), (200, 404, Some(USER)), "the session logs in on both ports");
    s.restart().await;
    let (op, rest, info) = with_headers(&s, &from_page).await;
    assert_eq!((op, rest), (200, 404), "the session outlives a restart: {info}");

    // The browser sends the cookie with another origin's requests too (another site's
    // form, another port's page, a sandboxed frame): they are not signed in by it.
    for other in ["http://evil.example", "http://app.example:8081", "null"] {
        let (op, rest, answer) = with_headers(&s, &[("cookie", cookie.as_str()), ("origin", other)]).await;
        assert_eq!((op, rest), (401, 401), "a request from {other}: {answer}");
    }
    let (op, rest, _) = with_header(&s, "cookie", &cookie).await;
    assert_eq!((op, rest), (401, 401), "without an origin the host names the cookie, and it is another");

    let response = reqwest::Client::new()
        .post(s.url("/"))
        .header("cookie", &cookie)
        .header("origin", page)
        .json(&json!({"operation": "logout"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let cleared = response.headers().get("set-cookie").unwrap().to_str().unwrap();
    assert!(cleared.starts_with("app_example_8080-hdb-session=;"), "{cleared}");
    let (op, rest, _) = with_headers(&s, &from_page).await;
    assert_eq!((op, rest), (401, 401), "logged out");

    // A wrong password starts no session.
    let (status, answer, headers) =
        anonymous(&s, &json!({"operation": "login", "username": USER, "password": "x"})).await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("Login failed")));
    assert!(headers.get("set-cookie").is_none());
}

/// A page served by Lyre signs in on its own port: its POSTs carry its origin, its
/// GETs (reads, event streams) carry none and the host names the same cookie. A
/// request without an origin that the browser says another site or port made (a
/// link followed, an image fetched) is not signed in by the cookie it carries.
#[tokio::test]
async fn a_pages_own_requests_are_signed_in_and_another_sites_are_not() {
    let s = TestServer::start().await;
    let own = s.url("");
    let own = own.trim_end_matches('/');
    let (status, _, headers) =
        anonymous_from(&s, Some(own), &json!({"operation": "login", "username": USER, "password": PASSWORD})).await;
    assert_eq!(status, 200);
    let cookie = headers.get("set-cookie").unwrap().to_str().unwrap().split(';').next().unwrap().to_string();
    let get = |fetch_site: Option<&'static str>| {
        let mut request = reqwest::Client::new().get(s.url("/metrics")).header("cookie", &cookie);
        if let Some(site) = fetch_site {
            request = request.header("sec-fetch-site", site);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(None).await, 200, "a GET without an origin, as a script sends it");
    assert_eq!(get(Some("same-origin")).await, 200, "the page's own GET");
    assert_eq!(get(Some("none")).await, 200, "an address typed in");
    assert_eq!(get(Some("cross-site")).await, 401, "another site's link or image");
    assert_eq!(get(Some("same-site")).await, 401, "another port's page");
    let (op, _, info) = with_headers(&s, &[("cookie", cookie.as_str()), ("origin", own)]).await;
    assert_eq!((op, info["username"].as_str()), (200, Some(USER)), "the page's POST");
}

#[tokio::test]
async fn sessions_expire() {
    let s = TestServer::start_with(&[("AUTHENTICATION_SESSIONTIMEOUT", "1s")]).await;
    let (_, _, headers) = anonymous(&s, &json!({"operation": "login", "username": USER, "password": PASSWORD})).await;
    let cookie = headers.get("set-cookie").unwrap().to_str().unwrap().split(';').next().unwrap().to_string();
    assert_eq!(with_header(&s, "cookie", &cookie).await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(with_header(&s, "cookie", &cookie).await.0, 401);
}

#[tokio::test]
async fn malformed_authorization_headers_answer_401() {
    let s = TestServer::start().await;
    let values: [&[u8]; 8] =
        [b"Bearer", b"Bearer ", b"Bearer a.b", b"Basic !!!", b"Basic Zm9v", b"Digest x", b"", b"Bearer \xff\xfe"];
    for value in values {
        let header = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        let value = String::from_utf8_lossy(value);
        let response = reqwest::Client::new()
            .post(s.url("/"))
            .header("authorization", header.clone())
            .json(&json!({"operation": "user_info"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "ops with {value:?}");
        let (status, _, _) = s.rest_send(Method::GET, "/nosuchtable/", None, &[]).await;
        assert_eq!(status, 404, "the admin still gets through");
        let rest = reqwest::Client::new().get(s.rest("/x/")).header("authorization", header).send().await.unwrap();
        assert_eq!(rest.status().as_u16(), 401, "rest with {value:?}");
    }
}

#[tokio::test]
async fn a_dropped_or_switched_off_user_s_token_and_session_stop_at_once() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "add_role", "role": "r", "permission": {}})).await;
    for name in ["gone", "off"] {
        s.ok(json!({"operation": "add_user", "username": name, "password": "pw", "role": "r", "active": true})).await;
    }
    let mut credentials = Vec::new();
    for name in ["gone", "off"] {
        let (_, tokens, _) =
            anonymous(&s, &json!({"operation": "create_authentication_tokens", "username": name, "password": "pw"}))
                .await;
        let (_, _, headers) = anonymous(&s, &json!({"operation": "login", "username": name, "password": "pw"})).await;
        let cookie = headers.get("set-cookie").unwrap().to_str().unwrap().split(';').next().unwrap().to_string();
        let bearer = format!("Bearer {}", tokens["operation_token"].as_str().unwrap());
        assert_eq!(with_header(&s, "authorization", &bearer).await.0, 200, "{name}'s token works");
        assert_eq!(with_header(&s, "cookie", &cookie).await.0, 200, "{name}'s session works");
        credentials.push((bearer, cookie));
    }
    s.ok(json!({"operation": "drop_user", "username": "gone"})).await;
    s.ok(json!({"operation": "alter_user", "username": "off", "active": false})).await;
    for (bearer, cookie) in &credentials {
        assert_eq!(with_header(&s, "authorization", bearer).await.0, 401, "{bearer}");
        assert_eq!(with_header(&s, "cookie", cookie).await.0, 401, "{cookie}");
    }
    // A user made again under the dropped name does not inherit its sessions.
    s.ok(json!({"operation": "add_user", "username": "gone", "password": "new", "role": "r", "active": true})).await;
    assert_eq!(with_header(&s, "cookie", &credentials[0].1).await.0, 401);
}

#[tokio::test]
async fn a_password_change_or_a_user_made_again_ends_the_tokens_issued_before() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "add_role", "role": "r", "permission": {}})).await;
    s.ok(json!({"operation": "add_user", "username": "ann", "password": "pw", "role": "r", "active": true})).await;
    let issue = |password: &'static str| {
        let s = &s;
        async move {
            let body = json!({"operation": "create_authentication_tokens", "username": "ann", "password": password});
            let (status, tokens, _) = anonymous(s, &body).await;
            assert_eq!(status, 200, "{tokens}");
            tokens
        }
    };
    let refresh_with =
        |tokens: &Value| json!({"operation": "refresh_operation_token", "refresh_token": tokens["refresh_token"]});
    let bearer = |tokens: &Value| format!("Bearer {}", tokens["operation_token"].as_str().unwrap());

    let before = issue("pw").await;
    assert_eq!(with_header(&s, "authorization", &bearer(&before)).await.0, 200);
    // A role change keeps the tokens (the role is looked up on every request)...
    s.ok(json!({"operation": "add_role", "role": "r2", "permission": {}})).await;
    s.ok(json!({"operation": "alter_user", "username": "ann", "role": "r2"})).await;
    assert_eq!(with_header(&s, "authorization", &bearer(&before)).await.0, 200);
    // ...a password change ends them, operation and refresh tokens alike.
    s.ok(json!({"operation": "alter_user", "username": "ann", "password": "changed"})).await;
    assert_eq!(with_header(&s, "authorization", &bearer(&before)).await.0, 401);
    assert_eq!(anonymous(&s, &refresh_with(&before)).await.0, 401);
    let after = issue("changed").await;
    assert_eq!(with_header(&s, "authorization", &bearer(&after)).await.0, 200);

    // Dropped and made again with the same name and password: a new user.
    s.ok(json!({"operation": "drop_user", "username": "ann"})).await;
    s.ok(json!({"operation": "add_user", "username": "ann", "password": "changed", "role": "r", "active": true})).await;
    assert_eq!(with_header(&s, "authorization", &bearer(&after)).await.0, 401);
    assert_eq!(with_header(&s, "authorization", &bearer(&issue("changed").await)).await.0, 200);
}

#[tokio::test]
async fn expired_sessions_nobody_presents_again_are_removed() {
    let s = TestServer::start_with(&[("AUTHENTICATION_SESSIONTIMEOUT", "1s")]).await;
    let (status, _, _) = anonymous(&s, &json!({"operation": "login", "username": USER, "password": PASSWORD})).await;
    assert_eq!(status, 200);
    let stored = || async {
        let found = s
            .ok(json!({"operation": "search_by_value", "database": "system", "table": "hdb_session",
                "search_attribute": "id", "search_value": "*", "get_attributes": ["id"]}))
            .await;
        found.as_array().map_or(0, Vec::len)
    };
    // Hidden from reads once expired, and gone from storage after the sweep.
    let started = std::time::Instant::now();
    while stored().await > 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the expired session is still stored");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
