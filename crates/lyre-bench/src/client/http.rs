//! A lean HTTP/1.1 client for the Operations API (hyper, pooled keep-alive
//! connections), so the load generator is not the bottleneck.

use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::target::{READY_TIMEOUT, Target};

/// A client for one server's Operations API.
#[derive(Clone)]
pub struct OpsClient {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    health: Uri,
    auth: HeaderValue,
}

impl OpsClient {
    /// A client for `target`.
    pub fn new(target: &Target) -> anyhow::Result<Self> {
        let base = target.url.trim_end_matches('/');
        let uri: Uri = format!("{base}/").parse().with_context(|| format!("bad URL {}", target.url))?;
        let health: Uri = format!("{base}/health").parse()?;
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", target.user, target.password));
        let auth = HeaderValue::from_str(&format!("Basic {credentials}"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build(connector);
        Ok(Self { client, uri, health, auth })
    }

    /// Sends one operation body; returns the status and the whole response body.
    pub async fn send(&self, body: Bytes) -> anyhow::Result<(u16, Bytes)> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let response = self.client.request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Sends an operation and fails unless it answers 200; returns the parsed body.
    pub async fn op(&self, body: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let (status, bytes) = self.send(Bytes::from(body.to_string())).await?;
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
