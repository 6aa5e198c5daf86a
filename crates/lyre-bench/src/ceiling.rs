//! The ceiling for REST reads: a bare hyper server that answers every request with
//! one fixed YCSB record, doing no lookup, no authentication and no encoding. A REST
//! GET benchmark against it measures the HTTP stack and the load generator alone.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// Serves the fixed record on `port` until the process is stopped.
pub async fn serve(port: u16) -> anyhow::Result<()> {
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await?;
    let record = Bytes::from(crate::workload::ycsb::fixed_record());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let record = record.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let record = record.clone();
                async move {
                    let body = if request.uri().path() == "/health" { Bytes::from_static(b"ok") } else { record };
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(body))
                            .unwrap_or_default(),
                    )
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
