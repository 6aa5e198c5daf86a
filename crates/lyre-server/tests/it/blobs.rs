//! Blobs (issue 20): a `Blob` attribute's value is stored in a file beside the
//! database, uploaded and downloaded as a stream on REST (`/T/<id>.<attr>`), kept
//! across restarts, removed with its record, refused past its size limit with
//! nothing stored, and found by `cleanup_orphan_blobs` when a crash left it behind.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{PASSWORD, TestServer, USER, anonymous_kib, finished_job};

const SCHEMA: &str =
    "type Media @table(database: \"media\") @export {\n  id: ID @primaryKey\n  title: String\n  image: Blob\n}\n";

/// A server with the `Media` table exported, and `env`.
async fn media(env: &[(&str, &str)]) -> TestServer {
    TestServer::start_app(&[("components/media/schema.graphql", SCHEMA)], env).await
}

/// Deterministic bytes that are not all alike (a repeated pattern would hide an
/// offset error).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// PUTs `body` to `path` with `content_type`; the status and answer text.
async fn upload(s: &TestServer, path: &str, body: Vec<u8>, content_type: &str) -> (u16, String) {
    let response = s
        .client
        .put(s.rest(path))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// GETs `path` with `headers`; the response.
async fn download(s: &TestServer, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            match entry.path().is_dir() {
                true => out.extend(files(&entry.path())),
                false => out.push(entry.path()),
            }
        }
    }
    out.sort();
    out
}

/// The blob files of database `media`.
fn blob_files(s: &TestServer) -> Vec<PathBuf> {
    files(&s.root().join("blobs/media"))
}

/// Waits (up to 10 s) until the blob files are exactly `count`; returns them.
async fn settle_to(s: &TestServer, count: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = blob_files(s);
        if found.len() == count || Instant::now() >= deadline {
            assert_eq!(found.len(), count, "{found:?}");
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_uploaded_blob_downloads_with_its_type_ranges_and_the_records_etag() {
    let s = media(&[]).await;
    let image = bytes(3 << 20, 1);
    let (status, text) = upload(&s, "/Media/1.image", image.clone(), "image/png").await;
    assert_eq!(status, 204, "{text}");
    // The record exists now, its other attributes unset, the blob described.
    let (status, _, record) = s.rest_send(reqwest::Method::GET, "/Media/1", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(record["id"], "1");
    assert!(record["image"]["description"].as_str().unwrap().contains("can not be directly serialized"), "{record}");
    let response = download(&s, "/Media/1.image", &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    assert_eq!(response.headers()["content-length"], (3 << 20).to_string().as_str());
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[..]);
    // One byte range.
    let response = download(&s, "/Media/1.image", &[("range", "bytes=1000-1999")]).await;
    assert_eq!(response.status(), 206);
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[1000..2000]);
    // Several ranges: the whole blob, as Harper (which has no ranges) answers any.
    let response = download(&s, "/Media/1.image", &[("range", "bytes=0-9,1000-1999")]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap().len(), 3 << 20);
    // The record's ETag answers a conditional request.
    let response = download(&s, "/Media/1.image", &[("if-none-match", &etag)]).await;
    assert_eq!(response.status(), 304);
    // Writing another attribute leaves the blob as it was (a merge keeps it).
    s.ok(
        json!({"operation": "update", "database": "media", "table": "Media", "records": [{"id": "1", "title": "cat"}]}),
    )
    .await;
    let response = download(&s, "/Media/1.image", &[]).await;
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[..]);
    assert_eq!(blob_files(&s).len(), 1);
    // A property that is not a blob is not there to download: 404.
    let (status, _, _) = s.rest_send(reqwest::Method::GET, "/Media/2.image", None, &[]).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_blob_survives_a_restart_and_goes_with_its_record_or_its_replacement() {
    let mut s = media(&[]).await;
    let first = bytes(200_000, 2);
    assert_eq!(upload(&s, "/Media/a.image", first.clone(), "application/pdf").await.0, 204);
    let written = settle_to(&s, 1).await;
    s.restart().await;
    let response = download(&s, "/Media/a.image", &[]).await;
    assert_eq!(response.headers()["content-type"], "application/pdf");
    assert_eq!(response.bytes().await.unwrap().as_ref(), &first[..]);
    // Replacing the blob frees the old file.
    let second = bytes(100_000, 3);
    assert_eq!(upload(&s, "/Media/a.image", second.clone(), "application/pdf").await.0, 204);
    let replaced = settle_to(&s, 1).await;
    assert_ne!(replaced, written, "the old file went, a new one came");
    assert_eq!(download(&s, "/Media/a.image", &[]).await.bytes().await.unwrap().as_ref(), &second[..]);
    // So does replacing the whole record without it, through the Operations API.
    s.ok(json!({"operation": "upsert", "database": "media", "table": "Media", "records": [{"id": "b", "image": "t".repeat(9_000)}]}))
        .await;
    settle_to(&s, 2).await;
    let (status, _, _) = s.rest_send(reqwest::Method::PUT, "/Media/a", Some(&json!({"title": "no image"})), &[]).await;
    assert_eq!(status, 204);
    settle_to(&s, 1).await;
    // And deleting the record.
    let (status, _, _) = s.rest_send(reqwest::Method::DELETE, "/Media/b", None, &[]).await;
    assert_eq!(status, 200);
    settle_to(&s, 0).await;
}

#[tokio::test]
async fn text_given_for_a_blob_attribute_is_stored_as_a_blob() {
    let s = media(&[]).await;
    // Small text stays in the record (as Harper keeps blobs under 8 KiB) and reads
    // back as itself; large text goes to a file.
    let large = "l".repeat(20_000);
    s.ok(json!({"operation": "insert", "database": "media", "table": "Media", "records": [
        {"id": "small", "image": "hello, blob"}, {"id": "large", "image": large}]}))
        .await;
    assert_eq!(blob_files(&s).len(), 1);
    let types = [("small", "hello, blob", "application/octet-stream"), ("large", large.as_str(), "text/plain")];
    for (id, text, content_type) in types {
        let response = download(&s, &format!("/Media/{id}.image"), &[]).await;
        assert_eq!(response.status(), 200, "{id}");
        assert_eq!(response.headers()["content-type"], content_type, "{id}");
        assert_eq!(response.text().await.unwrap(), text, "{id}");
    }
    let found = s
        .ok(json!({"operation": "search_by_id", "database": "media", "table": "Media", "ids": ["small", "large"], "get_attributes": ["*"]}))
        .await;
    assert_eq!(found[0]["image"], "hello, blob", "{found}");
    assert_eq!(found[1]["image"], "[blob: text/plain, 20000 bytes]", "{found}");
    // A value that is neither text nor bytes is refused, and nothing is stored.
    let (status, answer) = s
        .op(json!({"operation": "insert", "database": "media", "table": "Media", "records": [{"id": "n", "image": 5}]}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("must be a blob"), "{answer}");
    // A write that fails in the writer (its condition does not hold) leaves no file
    // behind: the file is written first, then removed with the failed job.
    let body = json!({"title": "conditional", "image": "n".repeat(10_000)});
    let (status, _, answer) =
        s.rest_send(reqwest::Method::PUT, "/Media/small", Some(&body), &[("if-match", "\"AAAAAAAAAA\"")]).await;
    assert_eq!(status, 412, "{answer}");
    assert_eq!(blob_files(&s).len(), 1);
}

#[tokio::test]
async fn a_copied_record_gets_its_own_copy_of_the_blob() {
    let s = media(&[]).await;
    let image = bytes(40_000, 15);
    assert_eq!(upload(&s, "/Media/1.image", image.clone(), "image/gif").await.0, 204);
    let sql = "INSERT INTO media.Media (id, image) SELECT 'copy', image FROM media.Media WHERE id = '1'";
    let inserted = s.ok(json!({"operation": "sql", "sql": sql})).await;
    assert_eq!(inserted["inserted_hashes"], json!(["copy"]), "{inserted}");
    settle_to(&s, 2).await;
    // Deleting the original frees its file only; the copy still reads.
    let (status, _, _) = s.rest_send(reqwest::Method::DELETE, "/Media/1", None, &[]).await;
    assert_eq!(status, 200);
    settle_to(&s, 1).await;
    let response = download(&s, "/Media/copy.image", &[]).await;
    assert_eq!(response.headers()["content-type"], "image/gif");
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[..]);
    // SQL shows the blob described.
    let rows = s.ok(json!({"operation": "sql", "sql": "SELECT image FROM media.Media"})).await;
    assert!(rows[0]["image"]["description"].is_string(), "{rows}");
}

#[tokio::test]
async fn a_blob_over_the_limit_is_refused_with_nothing_stored() {
    let s = media(&[("STORAGE_MAXBLOBSIZE", "100000")]).await;
    // Declared too long: refused before it is read.
    let (status, text) = upload(&s, "/Media/big.image", bytes(150_000, 4), "image/png").await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("storage.maxBlobSize"), "{text}");
    // Undeclared (chunked): refused once it passes the limit.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..15).map(|i| Ok(bytes(10_000, i))).collect();
    let response = s
        .client
        .put(s.rest("/Media/big.image"))
        .basic_auth(USER, Some(PASSWORD))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let (status, _, _) = s.rest_send(reqwest::Method::GET, "/Media/big", None, &[]).await;
    assert_eq!(status, 404, "no record was made");
    assert_eq!(blob_files(&s), Vec::<PathBuf>::new(), "no file was left");
    // Within the limit it is stored.
    assert_eq!(upload(&s, "/Media/big.image", bytes(90_000, 5), "image/png").await.0, 204);
    assert_eq!(blob_files(&s).len(), 1);
}

#[tokio::test]
async fn a_role_that_may_not_write_the_attribute_stores_nothing() {
    let s = media(&[]).await;
    s.ok(json!({"operation": "add_role", "role": "viewer", "permission": {"media": {"tables": {"Media": {
        "read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "v", "password": "pw", "role": "viewer", "active": true})).await;
    let response = s
        .client
        .put(s.rest("/Media/x.image"))
        .basic_auth("v", Some("pw"))
        .header("content-type", "image/png")
        .body(bytes(50_000, 6))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(blob_files(&s), Vec::<PathBuf>::new());
    // The refusal comes before the body is read: an upload announcing a gigabyte
    // and sending ten bytes is answered at once, not after waiting for the rest.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", s.http_port)).await.unwrap();
    let credentials = crate::support::basic("v", "pw");
    let head = format!(
        "PUT /Media/x.image HTTP/1.1\r\nhost: x\r\nauthorization: {credentials}\r\ncontent-type: image/png\r\ncontent-length: 1000000000\r\n\r\n0123456789"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut answer)).await;
    let read = read.expect("answered without waiting for the body").unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

#[tokio::test]
async fn a_hundred_megabytes_stream_through_in_bounded_memory() {
    let s = media(&[]).await;
    const SIZE: usize = 100 << 20;
    let data = bytes(SIZE, 7);
    let before = anonymous_kib(s.pid());
    assert!(before > 0, "the server's memory is readable from /proc");
    let pid = s.pid();
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(anonymous_kib(pid));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            peak
        })
    };
    let (status, text) = upload(&s, "/Media/huge.image", data.clone(), "video/mp4").await;
    assert_eq!(status, 204, "{text}");
    let mut response = download(&s, "/Media/huge.image", &[]).await;
    assert_eq!(response.status(), 200);
    let mut received = 0usize;
    let mut matches = true;
    while let Some(chunk) = response.chunk().await.unwrap() {
        matches &= data[received..received + chunk.len()] == chunk[..];
        received += chunk.len();
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.await.unwrap();
    assert_eq!(received, SIZE);
    assert!(matches, "the downloaded bytes differ from the uploaded ones");
    // Held whole, the blob alone would add 100 MiB; streamed, a few MiB of buffers.
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(grown_mib < 32, "the server's heap grew {grown_mib} MiB moving a 100 MiB blob");
}

#[tokio::test]
async fn cleanup_removes_only_the_files_no_record_references() {
    let s = media(&[]).await;
    assert_eq!(upload(&s, "/Media/kept.image", bytes(10_000, 8), "image/png").await.0, 204);
    let kept = settle_to(&s, 1).await.remove(0);
    // Files a crash left: one old, one just written (an upload could still be
    // committing it).
    let shard = kept.parent().unwrap();
    let (old, fresh) = (shard.join("00000000000000aa"), shard.join("00000000000000bb"));
    std::fs::write(&old, b"orphan").unwrap();
    std::fs::write(&fresh, b"recent").unwrap();
    for path in [&old, &kept] {
        let aged = std::process::Command::new("touch").args(["-d", "2 hours ago"]).arg(path).status().unwrap();
        assert!(aged.success());
    }
    let started = s.ok(json!({"operation": "cleanup_orphan_blobs", "database": "media"})).await;
    assert_eq!(started["message"], "Orphaned blobs cleanup started, check logs for progress");
    let job = finished_job(&s, started["job_id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert!(job["message"].as_str().unwrap().contains("removed 1 orphaned"), "{job}");
    assert!(!old.exists());
    assert!(fresh.exists() && kept.exists());
    assert_eq!(download(&s, "/Media/kept.image", &[]).await.status(), 200);
    // The database must be named, and exist.
    s.fails(
        json!({"operation": "cleanup_orphan_blobs"}),
        400,
        "Must provide \"database\" name for search for orphaned blobs",
    )
    .await;
    let (status, _) = s.op(json!({"operation": "cleanup_orphan_blobs", "database": "nowhere"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn dropping_the_table_or_the_database_removes_its_blobs() {
    let s = media(&[]).await;
    s.ok(json!({"operation": "create_table", "database": "media", "table": "Other", "primary_key": "id"})).await;
    assert_eq!(upload(&s, "/Media/1.image", bytes(5_000, 9), "image/png").await.0, 204);
    assert_eq!(upload(&s, "/Media/2.image", bytes(5_000, 10), "image/png").await.0, 204);
    settle_to(&s, 2).await;
    let root = s.root().join("blobs/media");
    assert!(root.is_dir());
    s.ok(json!({"operation": "drop_table", "database": "media", "table": "Media"})).await;
    settle_to(&s, 0).await;
    s.ok(json!({"operation": "drop_database", "database": "media"})).await;
    assert!(!root.exists(), "the database's blob directory went with it");
}

/// `get_backup` of database `media` into `path`; the response's content type.
async fn back_up(s: &TestServer, path: &Path) -> String {
    let response = s.op_request(&json!({"operation": "get_backup", "database": "media"})).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    let disposition = response.headers()["content-disposition"].to_str().unwrap().to_string();
    assert!(disposition.contains(if content_type == "application/x-tar" { "media.tar" } else { "media.mdb" }));
    std::fs::write(path, response.bytes().await.unwrap()).unwrap();
    content_type
}

#[tokio::test]
async fn a_backup_carries_the_blobs_and_a_restore_brings_them_back() {
    let mut s = media(&[]).await;
    // A table declaring a Blob is backed up as a tar before its first blob exists (a
    // first blob committed as the backup starts is not left out); a database
    // without blobs is backed up as its data file alone, as it always was.
    s.ok(json!({"operation": "insert", "database": "media", "table": "Media", "records": [{"id": "0", "title": "none"}]}))
        .await;
    assert_eq!(back_up(&s, &s.root().join("early.tar")).await, "application/x-tar");
    s.ok(json!({"operation": "create_table", "database": "plain", "table": "t", "primary_key": "id"})).await;
    let response = s.op_request(&json!({"operation": "get_backup", "database": "plain"})).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    let image = bytes(300_000, 11);
    assert_eq!(upload(&s, "/Media/1.image", image.clone(), "image/jpeg").await.0, 204);
    let backup = s.root().join("media-backup.tar");
    assert_eq!(back_up(&s, &backup).await, "application/x-tar");
    // After the backup: the blob replaced, another record with a blob.
    assert_eq!(upload(&s, "/Media/1.image", bytes(1_000, 12), "image/jpeg").await.0, 204);
    assert_eq!(upload(&s, "/Media/2.image", bytes(2_000, 13), "image/jpeg").await.0, 204);
    settle_to(&s, 2).await;
    let restored = s.ok(json!({"operation": "restore_backup", "database": "media", "backup_file": backup})).await;
    assert!(restored["message"].as_str().unwrap().contains("restored"), "{restored}");
    let response = download(&s, "/Media/1.image", &[]).await;
    assert_eq!(response.headers()["content-type"], "image/jpeg");
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[..]);
    let (status, _, _) = s.rest_send(reqwest::Method::GET, "/Media/2", None, &[]).await;
    assert_eq!(status, 404, "written after the backup");
    assert_eq!(blob_files(&s).len(), 1, "only the backup's blobs are left");
    // A crash while the restored blobs move in is finished at the next start.
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", Some("crash:restore-swap-blobs"));
    s.start_again().await;
    assert_eq!(upload(&s, "/Media/3.image", bytes(3_000, 14), "image/jpeg").await.0, 204);
    let answer =
        s.op_request(&json!({"operation": "restore_backup", "database": "media", "backup_file": backup})).send().await;
    assert!(answer.is_err() || answer.unwrap().status() != 200, "the server died mid-restore");
    s.wait_exit();
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    let response = download(&s, "/Media/1.image", &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap().as_ref(), &image[..]);
    let (status, _, _) = s.rest_send(reqwest::Method::GET, "/Media/3", None, &[]).await;
    assert_eq!(status, 404);
    assert_eq!(blob_files(&s).len(), 1);
    // A tar that is not a backup of ours is refused, and nothing changes.
    let hostile = s.root().join("hostile.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&hostile).unwrap());
    let mut header = tar::Header::new_gnu();
    header.set_size(4);
    header.set_mode(0o600);
    tar.append_data(&mut header, "escape.txt", &b"evil"[..]).unwrap();
    tar.finish().unwrap();
    let (status, answer) =
        s.op(json!({"operation": "restore_backup", "database": "media", "backup_file": hostile})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("neither data.mdb nor a blob"), "{answer}");
    assert_eq!(download(&s, "/Media/1.image", &[]).await.status(), 200);
}
