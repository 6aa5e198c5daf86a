//! TLS through the real binary (issue 12): HTTPS on both secure ports with the
//! certificate made at first start, and mTLS with a client certificate made here
//! (rcgen), its common name logging the client in.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};

use crate::support::{TestServer, free_port};

struct Secure {
    server: TestServer,
    ops: u16,
    rest: u16,
}

async fn secure(extra: &[(&str, &str)]) -> Secure {
    let (ops, rest) = (free_port(), free_port());
    let (ops_text, rest_text) = (ops.to_string(), rest.to_string());
    let mut env =
        vec![("OPERATIONSAPI_NETWORK_SECUREPORT", ops_text.as_str()), ("HTTP_SECUREPORT", rest_text.as_str())];
    env.extend_from_slice(extra);
    Secure { server: TestServer::start_with(&env).await, ops, rest }
}

/// A client that trusts the server's generated certificate, with `identity` if given.
fn client(s: &TestServer, identity: Option<reqwest::Identity>) -> reqwest::Client {
    let pem = std::fs::read(s.root().join("keys/certificate.pem")).expect("the generated certificate");
    let mut builder = reqwest::Client::builder().tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.build().unwrap()
}

async fn user_info(client: &reqwest::Client, port: u16, basic: bool) -> reqwest::Result<(u16, Value)> {
    let mut request = client.post(format!("https://localhost:{port}/")).json(&json!({"operation": "user_info"}));
    if basic {
        request = request.basic_auth("admin", Some("password"));
    }
    let response = request.send().await?;
    Ok((response.status().as_u16(), response.json().await.unwrap_or(Value::Null)))
}

#[tokio::test]
async fn https_round_trips_on_both_secure_ports_with_a_generated_certificate() {
    let s = secure(&[]).await;
    let https = client(&s.server, None);
    let (status, info) = user_info(&https, s.ops, true).await.unwrap();
    assert_eq!((status, info["username"].as_str()), (200, Some("admin")));
    let rest = https.get(format!("https://localhost:{}/nosuchtable/", s.rest)).basic_auth("admin", Some("password"));
    assert_eq!(rest.send().await.unwrap().status().as_u16(), 404, "REST answers over TLS");
    // The plain ports go on working, and plain HTTP on a secure port gets nowhere.
    assert_eq!(s.server.op(json!({"operation": "user_info"})).await.0, 200);
    let plain = reqwest::Client::new().post(format!("http://127.0.0.1:{}/", s.ops)).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    // The certificate is kept across restarts.
    let before = std::fs::read(s.server.root().join("keys/certificate.pem")).unwrap();
    let mut server = s.server;
    server.restart().await;
    assert_eq!(std::fs::read(server.root().join("keys/certificate.pem")).unwrap(), before);
}

/// A certificate authority: its certificate (PEM) and the issuer that signs with it.
fn authority() -> (String, Issuer<'static, KeyPair>) {
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    ca.distinguished_name.push(DnType::CommonName, "test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    (ca_cert.pem(), Issuer::new(ca, ca_key))
}

/// A client identity for `name` signed by `issuer`.
fn identity(issuer: &Issuer<'static, KeyPair>, name: &str) -> reqwest::Identity {
    let mut leaf = CertificateParams::new(Vec::new()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, issuer).unwrap();
    reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes()).unwrap()
}

#[tokio::test]
async fn a_client_certificate_logs_its_common_name_in() {
    let (ca, issuer) = authority();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let ca_path = ca_file.to_str().unwrap().to_string();
    let s = secure(&[("HTTP_MTLS", "true"), ("TLS_CERTIFICATEAUTHORITY", ca_path.as_str())]).await;

    let with_certificate = client(&s.server, Some(identity(&issuer, "admin")));
    let (status, info) = user_info(&with_certificate, s.ops, false).await.unwrap();
    assert_eq!((status, info["username"].as_str()), (200, Some("admin")), "{info}");
    let rest = with_certificate.get(format!("https://localhost:{}/nosuchtable/", s.rest)).send().await.unwrap();
    assert_eq!(rest.status().as_u16(), 404, "logged in on the REST port too");

    // Without one, a client logs in as before, or is asked to.
    let without = client(&s.server, None);
    assert_eq!(user_info(&without, s.ops, false).await.unwrap().0, 401);
    assert_eq!(user_info(&without, s.ops, true).await.unwrap().0, 200);

    // A certificate naming no user gets no further than a wrong password.
    let (status, answer) =
        user_info(&client(&s.server, Some(identity(&issuer, "nobody"))), s.ops, false).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (401, Some("Login failed")));

    // A certificate from another authority is refused at the handshake.
    let (_, stranger) = authority();
    assert!(user_info(&client(&s.server, Some(identity(&stranger, "admin"))), s.ops, false).await.is_err());
}

#[tokio::test]
async fn harper_s_mtls_object_can_require_a_certificate_that_does_not_log_in() {
    let (ca, issuer) = authority();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let config = format!(
        "http:\n  mtls:\n    required: true\n    user: null\ntls:\n  certificateAuthority: {}\n",
        ca_file.display()
    );
    let (ops, rest) = (free_port(), free_port());
    let (ops_text, rest_text) = (ops.to_string(), rest.to_string());
    let env = [("OPERATIONSAPI_NETWORK_SECUREPORT", ops_text.as_str()), ("HTTP_SECUREPORT", rest_text.as_str())];
    let server = TestServer::start_app(&[("lyre-config.yaml", config.as_str())], &env).await;
    // Required: no certificate, no handshake.
    assert!(user_info(&client(&server, None), ops, true).await.is_err());
    // `user: null`: the certificate admits the client, which still logs in.
    let with_certificate = client(&server, Some(identity(&issuer, "admin")));
    assert_eq!(user_info(&with_certificate, ops, false).await.unwrap().0, 401);
    let (status, info) = user_info(&with_certificate, ops, true).await.unwrap();
    assert_eq!((status, info["username"].as_str()), (200, Some("admin")));
}

/// The status of `GET path` with `cookie`, sent over HTTP/2 (ALPN `h2`), where the
/// host travels as the `:authority` pseudo-header, not a `Host` header.
async fn status_over_http2(s: &TestServer, port: u16, path: &str, cookie: &str) -> u16 {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let certificate = s.root().join("keys/certificate.pem");
    roots.add(rustls_pki_types::CertificateDer::from_pem_file(certificate).unwrap()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the server speaks HTTP/2");
    let io = hyper_util::rt::TokioIo::new(tls);
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(format!("https://localhost:{port}{path}"))
        .header("cookie", cookie)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    response.status().as_u16()
}

/// A page signed in over HTTPS reads over HTTP/2 too: its GETs carry no `Origin`
/// and no `Host` header, and the session cookie is named by the `:authority`.
#[tokio::test]
async fn a_session_signs_in_requests_over_http2() {
    let s = secure(&[]).await;
    let origin = format!("https://localhost:{}", s.ops);
    let login = client(&s.server, None)
        .post(format!("{origin}/"))
        .header("origin", &origin)
        .json(&json!({"operation": "login", "username": "admin", "password": "password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 200);
    let set_cookie = login.headers()["set-cookie"].to_str().unwrap();
    assert!(set_cookie.contains("; SameSite=None; Secure"), "sent cross-site, over TLS only: {set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap();
    assert_eq!(status_over_http2(&s.server, s.ops, "/metrics", cookie).await, 200);
    assert_eq!(status_over_http2(&s.server, s.ops, "/metrics", "x-hdb-session=nope").await, 401);
}
