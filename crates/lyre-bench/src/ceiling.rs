//! The ceiling for REST requests: a bare hyper server that answers every `GET` with
//! one fixed YCSB record, doing no lookup, no authentication and no encoding, and
//! every other request (a `PUT` or `PATCH`) with `204 No Content` once its body is
//! read, storing nothing. A REST benchmark against it measures the HTTP stack and the
//! load generator alone: no server answers the same requests with less.
//!
//! A `QUERY` (a vector search) has its JSON body read and parsed, as a server
//! must to learn the target, and is answered with ten fixed ids: the HTTP stack's
//! bound for vector queries of that size.
//!
//! With `--lookup N` it first stores the first `N` YCSB records, as the JSON a server
//! answers, in an LMDB environment of its own, and answers `GET /usertable/<key>`
//! by looking the key up there (404 when absent): the HTTP stack plus LMDB's own
//! lookup, the least any server that keeps records in LMDB spends on a read.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// The answer to every `QUERY`.
const TEN_IDS: &str = r#"[{"id":"v0"},{"id":"v1"},{"id":"v2"},{"id":"v3"},{"id":"v4"},{"id":"v5"},{"id":"v6"},{"id":"v7"},{"id":"v8"},{"id":"v9"}]"#;

/// Serves the fixed record (or, with `lookup`, that many records from LMDB) on
/// `port` until the process is stopped.
pub async fn serve(port: u16, lookup: Option<u64>) -> anyhow::Result<()> {
    let store = lookup.map(Lookup::load).transpose()?.map(std::sync::Arc::new);
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await?;
    let record = Bytes::from(crate::workload::ycsb::fixed_record());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (record, store) = (record.clone(), store.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let (record, store) = (record.clone(), store.clone());
                async move {
                    if request.method().as_str() == "QUERY" {
                        let body = http_body_util::BodyExt::collect(request.into_body()).await;
                        let parsed =
                            body.ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.to_bytes()).ok());
                        let answer = if parsed.is_some() { TEN_IDS } else { "[]" };
                        let response = Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(answer.as_bytes())));
                        return Ok::<_, Infallible>(response.unwrap_or_default());
                    }
                    if request.method() != hyper::Method::GET {
                        // A write: its body read whole (as a server must), nothing kept.
                        let _ = http_body_util::BodyExt::collect(request.into_body()).await;
                        let response = Response::builder().status(204).body(Full::new(Bytes::new()));
                        return Ok::<_, Infallible>(response.unwrap_or_default());
                    }
                    let path = request.uri().path();
                    let body = match (&store, path) {
                        (_, "/health") => Some(Bytes::from_static(b"ok")),
                        (None, _) => Some(record),
                        (Some(store), path) => store.get(path.strip_prefix("/usertable/").unwrap_or(path)),
                    };
                    let response = match body {
                        Some(body) => {
                            Response::builder().header("content-type", "application/json").body(Full::new(body))
                        }
                        None => Response::builder().status(404).body(Full::new(Bytes::new())),
                    };
                    Ok::<_, Infallible>(response.unwrap_or_default())
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// YCSB records in an LMDB environment of the ceiling's own, keyed by their keys.
struct Lookup {
    env: heed::Env<heed::WithoutTls>,
    records: heed::Database<'static, heed::types::Bytes, heed::types::Bytes>,
    _dir: tempfile::TempDir,
}

impl Lookup {
    /// Stores the first `records` YCSB records, in one write transaction.
    fn load(records: u64) -> anyhow::Result<Lookup> {
        let dir = tempfile::tempdir()?;
        // SAFETY: the environment lives in a directory of its own that nothing else
        // opens, and it is opened once, so no other mapping of it exists.
        let mut options = heed::EnvOpenOptions::new().read_txn_without_tls();
        options.map_size(1 << 30).max_dbs(1);
        let env = unsafe { options.open(dir.path())? };
        let wtxn = env.write_txn()?;
        let db: heed::Database<'static, heed::types::Bytes, heed::types::Bytes> = env
            .create_databases_and_commit(wtxn, |opener, txn| {
                let db = opener.create_database(txn, Some("records"))?;
                Ok::<_, heed::Error>(heed::CommitOrAbort::<_, ()>::Commit(db))
            })?
            .unwrap_commit();
        let mut txn = env.write_txn()?;
        for n in 0..records {
            let key = crate::workload::ycsb::key(n);
            db.put(&mut txn, key.as_bytes(), &crate::workload::ycsb::stored_record(n))?;
        }
        txn.commit()?;
        Ok(Lookup { env, records: db, _dir: dir })
    }

    /// The stored record under `key`, copied out of its snapshot.
    fn get(&self, key: &str) -> Option<Bytes> {
        let txn = self.env.read_txn().ok()?;
        self.records.get(&txn, key.as_bytes()).ok().flatten().map(Bytes::copy_from_slice)
    }
}
