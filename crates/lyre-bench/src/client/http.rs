//! A lean HTTP/1.1 client (hyper, pooled keep-alive connections) for the Operations
//! API and the REST interface, so the load generator is not the bottleneck.

use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::target::{READY_TIMEOUT, Target};

/// One request of a workload.
#[derive(Debug, Clone)]
pub enum Call {
    /// `POST /` on the Operations API with this JSON body.
    Op(Bytes),
    /// `GET` a REST path.
    Get(String),
    /// `PUT` a JSON body at a REST path.
    Put(String, Bytes),
    /// `PATCH` a JSON body at a REST path.
    Patch(String, Bytes),
    /// `GET` then `PUT` the same path (YCSB's read-modify-write), timed as one.
    ReadModifyWrite(String, Bytes),
    /// `QUERY` a REST collection with a JSON query body.
    Query(String, Bytes),
}

/// A client for one server.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    ops: Uri,
    rest: String,
    health: Uri,
    auth: (HeaderName, HeaderValue),
}

impl HttpClient {
    /// A client for `target`.
    pub fn new(target: &Target) -> anyhow::Result<Self> {
        let base = target.url.trim_end_matches('/');
        let ops: Uri = format!("{base}/").parse().with_context(|| format!("bad URL {}", target.url))?;
        let health: Uri = format!("{base}/health").parse()?;
        let auth = match &target.auth_header {
            Some(header) => {
                let (name, value) =
                    header.split_once(':').with_context(|| format!("--auth-header {header:?} is not 'name: value'"))?;
                (HeaderName::from_bytes(name.trim().as_bytes())?, HeaderValue::from_str(value.trim())?)
            }
            None => {
                let credentials =
                    base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", target.user, target.password));
                (AUTHORIZATION, HeaderValue::from_str(&format!("Basic {credentials}"))?)
            }
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build(connector);
        Ok(Self { client, ops, rest: target.rest.trim_end_matches('/').to_string(), health, auth })
    }

    async fn request(&self, method: Method, uri: Uri, body: Bytes) -> anyhow::Result<(u16, Bytes)> {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(self.auth.0.clone(), self.auth.1.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let response = self.client.request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Sends one call; returns the last response's status and body.
    pub async fn call(&self, call: &Call) -> anyhow::Result<(u16, Bytes)> {
        match call {
            Call::Op(body) => self.request(Method::POST, self.ops.clone(), body.clone()).await,
            Call::Get(path) => self.request(Method::GET, self.rest_uri(path)?, Bytes::new()).await,
            Call::Put(path, body) => self.request(Method::PUT, self.rest_uri(path)?, body.clone()).await,
            Call::Patch(path, body) => self.request(Method::PATCH, self.rest_uri(path)?, body.clone()).await,
            Call::Query(path, body) => {
                let method = Method::from_bytes(b"QUERY")?;
                self.request(method, self.rest_uri(path)?, body.clone()).await
            }
            Call::ReadModifyWrite(path, body) => {
                let (status, read) = self.request(Method::GET, self.rest_uri(path)?, Bytes::new()).await?;
                if status != 200 {
                    return Ok((status, read));
                }
                self.request(Method::PUT, self.rest_uri(path)?, body.clone()).await
            }
        }
    }

    /// Sends `method` to a REST path (with a JSON body when it is not empty);
    /// returns the status and body.
    pub async fn rest(&self, method: Method, path: &str, body: Bytes) -> anyhow::Result<(u16, Bytes)> {
        self.request(method, self.rest_uri(path)?, body).await
    }

    fn rest_uri(&self, path: &str) -> anyhow::Result<Uri> {
        Ok(format!("{}{path}", self.rest).parse()?)
    }

    /// Sends an operation and fails unless it answers 200; returns the parsed body.
    pub async fn op(&self, body: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let (status, bytes) = self.call(&Call::Op(Bytes::from(body.to_string()))).await?;
        if status != 200 {
            bail!("{} answered {status}: {}", body["operation"], String::from_utf8_lossy(&bytes));
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Waits until the server answers `/health`.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let request = Request::builder().uri(self.health.clone()).body(Full::new(Bytes::new()))?;
            if let Ok(response) = self.client.request(request).await
                && response.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{} did not become ready", self.health);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
