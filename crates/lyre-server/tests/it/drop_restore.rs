//! The crash-safe database lifecycle (issue 6): drop under churn, leases and 409,
//! crashes at every step, fail-closed markers, symlinks, config drift, handle
//! hygiene, backups and restores.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

fn marker_path(root: &Path, database: &str) -> PathBuf {
    root.join("lifecycle").join(format!("{}.marker", lyre_core::lifecycle::marker::key(database)))
}

async fn seed(s: &TestServer, database: &str, records: usize) {
    s.ok(json!({"operation": "create_table", "database": database, "table": "t", "primary_key": "id"})).await;
    for chunk in (0..records).collect::<Vec<_>>().chunks(1000) {
        let records: Vec<Value> =
            chunk.iter().map(|i| json!({"id": i, "status": format!("s{}", i % 7), "pad": "x".repeat(100)})).collect();
        s.ok(json!({"operation": "insert", "database": database, "table": "t", "records": records})).await;
    }
}

/// Sends an operation that a failpoint makes the server die in; asserts no answer.
async fn crash_on(s: &TestServer, body: Value) {
    let answered = s.op_request(&body).send().await;
    assert!(answered.is_err(), "{body}: the process should have died, it answered {answered:?}");
}

async fn databases(s: &TestServer) -> Vec<String> {
    let all = s.ok(json!({"operation": "describe_all"})).await;
    all.as_object().unwrap().keys().cloned().collect()
}

/// Drop under schema churn: 3 concurrent clients × 8 cycles; the dropped directory
/// never reappears, the name is creatable again, other databases stay listed.
#[tokio::test]
async fn drop_under_schema_churn() {
    let s = Arc::new(TestServer::start().await);
    let dir = s.root().join("database").join("dropme");
    for cycle in 0..8 {
        s.ok(json!({"operation": "create_database", "database": "dropme"})).await;
        s.ok(json!({"operation": "create_table", "database": "dropme", "table": "todo", "primary_key": "id"})).await;
        for a in 0..12 {
            s.ok(json!({"operation": "create_attribute", "database": "dropme", "table": "todo", "attribute": format!("a{a}")}))
                .await;
        }
        s.ok(
            json!({"operation": "insert", "database": "dropme", "table": "todo", "records": [{"id": 1, "a0": cycle}]}),
        )
        .await;
        let churn = {
            let s = s.clone();
            tokio::spawn(async move {
                let table = format!("churn_{cycle}");
                s.ok(json!({"operation": "create_table", "database": "data", "table": table, "primary_key": "id"}))
                    .await;
                s.ok(json!({"operation": "drop_table", "database": "data", "table": table})).await;
            })
        };
        let reader = {
            let s = s.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    // Succeeds or fails cleanly (not found / going away), never 500.
                    let (status, body) = s
                        .op(json!({"operation": "search_by_value", "database": "dropme", "table": "todo", "attribute": "id", "value": "*"}))
                        .await;
                    assert!(matches!(status, 200 | 404 | 409), "{status} {body}");
                }
            })
        };
        let dropper = {
            let s = s.clone();
            tokio::spawn(async move {
                let (status, body) =
                    s.op(json!({"operation": "drop_table", "database": "dropme", "table": "todo"})).await;
                assert!(matches!(status, 200 | 404 | 409), "{status} {body}");
                s.ok(json!({"operation": "drop_database", "database": "dropme"})).await;
            })
        };
        for task in [churn, reader, dropper] {
            task.await.unwrap();
        }
        assert!(!dir.exists(), "cycle {cycle}: the dropped directory is still there");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!dir.exists(), "cycle {cycle}: the dropped directory reappeared");
        assert!(!databases(&s).await.contains(&"dropme".to_string()));
    }
    s.ok(json!({"operation": "create_table", "database": "dropme", "table": "todo", "primary_key": "id"})).await;
    s.ok(json!({"operation": "create_table", "database": "zz-after-dropme", "table": "probe", "primary_key": "id"}))
        .await;
    let listed = databases(&s).await;
    assert!(listed.contains(&"dropme".to_string()) && listed.contains(&"zz-after-dropme".to_string()), "{listed:?}");
    assert!(!marker_path(s.root(), "dropme").exists());
}

/// A held lease (a backup being read slowly) refuses the drop with 409 naming it and
/// changes nothing; once released the drop succeeds.
#[tokio::test]
async fn a_held_lease_refuses_the_drop_then_releases() {
    let s = TestServer::start_with(&[("STORAGE_RELEASETIMEOUT", "500")]).await;
    seed(&s, "held", 40_000).await;
    let mut backup = s.op_request(&json!({"operation": "get_backup", "database": "held"})).send().await.unwrap();
    assert_eq!(backup.status(), 200);
    let first = backup.chunk().await.unwrap().expect("a first chunk");
    assert!(!first.is_empty());
    // The reader stalls; the copy holds its lease.
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "held"})).await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("a backup of 'held' for admin"), "{message}");
    assert!(!marker_path(s.root(), "held").exists(), "a refused drop leaves no marker");
    // A client that gives up before the release timeout: the drop still runs to its
    // end (here the same refusal), instead of being cancelled half-way.
    let impatient = s
        .op_request(&json!({"operation": "drop_database", "database": "held"}))
        .timeout(std::time::Duration::from_millis(100))
        .send()
        .await;
    assert!(impatient.is_err(), "the client should have given up: {impatient:?}");
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    assert!(!marker_path(s.root(), "held").exists(), "an abandoned drop leaves no marker");
    // Nothing changed: still readable and writable.
    s.ok(json!({"operation": "insert", "database": "held", "table": "t", "records": [{"id": -1}]})).await;
    let found = s.ok(json!({"operation": "search_by_id", "database": "held", "table": "t", "ids": [-1, 5]})).await;
    assert_eq!(found.as_array().unwrap().len(), 2);
    // Finish reading: the lease ends, and the drop goes through.
    let mut total = first.len();
    while let Some(chunk) = backup.chunk().await.unwrap() {
        total += chunk.len();
    }
    assert!(total > 4 << 20, "the backup holds the data ({total} bytes)");
    s.ok(json!({"operation": "drop_database", "database": "held"})).await;
    assert!(!s.root().join("database/held").exists());
}

/// A request in flight holds a lease that names it: a drop refused because of it says
/// which request and user hold the database.
#[tokio::test]
async fn a_refused_drop_names_the_requests_in_flight() {
    use tokio::io::AsyncWriteExt;
    let schema = "type Dog @table(database: \"kennel\") @export { id: ID @primaryKey }";
    let s =
        TestServer::start_app(&[("components/kennel/schema.graphql", schema)], &[("STORAGE_RELEASETIMEOUT", "300")])
            .await;
    // A client that sends a PUT's headers and only part of its body: the request is
    // in flight until the body arrives.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", s.http_port)).await.unwrap();
    let auth = base64_basic(USER, PASSWORD);
    let head = format!(
        "PUT /Dog/rex HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{{\"id\""
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "kennel"})).await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains(&format!("PUT /Dog/rex for {USER}")), "{message}");
    drop(slow);
    // Once the client is gone, the drop goes through.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    s.ok(json!({"operation": "drop_database", "database": "kennel"})).await;
}

/// `user:password` in Basic authentication's base64.
fn base64_basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// A blob file of database `database` (what a `Blob` attribute stores), written
/// straight into its blob root.
fn seed_blob(s: &TestServer, database: &str) -> std::path::PathBuf {
    let file = s.root().join(format!("blobs/{database}/00/0000000000000001"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"blob bytes").unwrap();
    file
}

/// A crash at each step of a drop: the next start finishes it, blob root included.
#[tokio::test]
async fn a_crash_at_any_drop_step_is_finished_at_restart() {
    for step in ["drop-marked", "drop-closed", "drop-remove-blobs", "drop-deleted"] {
        let mut s = TestServer::start_with(&[("LYRE_FAILPOINT", &format!("crash:{step}"))]).await;
        seed(&s, "doomed", 100).await;
        seed(&s, "kept", 10).await;
        seed_blob(&s, "doomed");
        let kept_blob = seed_blob(&s, "kept");
        crash_on(&s, json!({"operation": "drop_database", "database": "doomed"})).await;
        s.wait_exit();
        assert!(marker_path(s.root(), "doomed").exists(), "{step}: the marker survives the crash");
        s.set_env("LYRE_FAILPOINT", None);
        s.start_again().await;
        assert!(!s.root().join("database/doomed").exists(), "{step}: the drop was finished");
        assert!(!s.root().join("blobs/doomed").exists(), "{step}: with its blob root");
        assert!(kept_blob.exists(), "{step}: another database's blobs stay");
        assert!(!marker_path(s.root(), "doomed").exists(), "{step}: the marker is gone");
        let listed = databases(&s).await;
        assert!(!listed.contains(&"doomed".to_string()) && listed.contains(&"kept".to_string()), "{step}: {listed:?}");
        s.ok(json!({"operation": "create_database", "database": "doomed"})).await;
    }
}

/// Config drift: the marker's recorded directory is deleted even after
/// `storage.path` moved; the same-named directory under the new path is untouched.
#[tokio::test]
async fn recovery_deletes_what_the_marker_recorded_not_what_the_config_says() {
    let base = tempfile::tempdir().unwrap();
    let (old, new) = (base.path().join("old"), base.path().join("new"));
    let (old_blobs, new_blobs) = (base.path().join("old-blobs"), base.path().join("new-blobs"));
    let mut s = TestServer::start_with(&[
        ("STORAGE_PATH", old.to_str().unwrap()),
        ("STORAGE_BLOBPATHS", old_blobs.to_str().unwrap()),
        ("LYRE_FAILPOINT", "crash:drop-marked"),
    ])
    .await;
    seed(&s, "dev", 10).await;
    std::fs::create_dir_all(old_blobs.join("dev/00")).unwrap();
    std::fs::write(old_blobs.join("dev/00/0000000000000001"), "a blob").unwrap();
    crash_on(&s, json!({"operation": "drop_database", "database": "dev"})).await;
    s.wait_exit();
    for dir in [&new, &new_blobs] {
        std::fs::create_dir_all(dir.join("dev")).unwrap();
        std::fs::write(dir.join("dev/sentinel.txt"), "unrelated").unwrap();
    }
    s.set_env("LYRE_FAILPOINT", None);
    s.set_env("STORAGE_PATH", Some(new.to_str().unwrap()));
    s.set_env("STORAGE_BLOBPATHS", Some(new_blobs.to_str().unwrap()));
    s.start_again().await;
    assert!(!old.join("dev").exists(), "the recorded directory was deleted");
    assert!(!old_blobs.join("dev").exists(), "the recorded blob root was deleted");
    assert_eq!(std::fs::read_to_string(new.join("dev/sentinel.txt")).unwrap(), "unrelated");
    assert_eq!(std::fs::read_to_string(new_blobs.join("dev/sentinel.txt")).unwrap(), "unrelated");
    assert!(!marker_path(s.root(), "dev").exists());
}

/// A torn or unreadable marker fails closed: the database is not loaded, nothing is
/// deleted, and the refusal is named.
#[tokio::test]
async fn an_unreadable_marker_fails_closed() {
    let mut s = TestServer::start().await;
    seed(&s, "dev", 10).await;
    s.stop("-TERM");
    let marker = marker_path(s.root(), "dev");
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::write(&marker, "dev\ndrop started 2026-11-30T00:00:00.000Z\ntargets 1 {\"datab").unwrap();
    s.start_again().await;
    assert!(s.root().join("database/dev/data.mdb").exists(), "nothing was deleted");
    assert!(!databases(&s).await.contains(&"dev".to_string()));
    let (status, body) = s.op(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1]})).await;
    assert_eq!(status, 409);
    assert!(body["error"].as_str().unwrap().contains("is blocked: its lifecycle marker"), "{body}");
    let status_report = s.ok(json!({"operation": "get_lifecycle_status"})).await;
    assert!(status_report["blocked"]["dev"].as_str().unwrap().contains("unreadable"), "{status_report}");
    let (status, _) = s.op(json!({"operation": "drop_database", "database": "dev"})).await;
    assert_eq!(status, 409, "a blocked database is not dropped on an unreadable marker");
    let (status, _) = s.op(json!({"operation": "create_database", "database": "dev"})).await;
    assert_eq!(status, 409);
    assert!(marker.exists() && s.root().join("database/dev/data.mdb").exists());
}

/// A database directory that is a symbolic link is refused before anything changes.
#[tokio::test]
async fn a_symlinked_database_is_never_deleted_through() {
    let elsewhere = tempfile::tempdir().unwrap();
    let mut s = TestServer::start().await;
    seed(&s, "linked", 10).await;
    s.stop("-TERM");
    let real = elsewhere.path().join("linked");
    std::fs::rename(s.root().join("database/linked"), &real).unwrap();
    std::os::unix::fs::symlink(&real, s.root().join("database/linked")).unwrap();
    std::fs::write(real.join("sentinel.txt"), "keep me").unwrap();
    s.start_again().await;
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "linked"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is a symbolic link"), "{body}");
    assert_eq!(std::fs::read_to_string(real.join("sentinel.txt")).unwrap(), "keep me");
    assert!(!marker_path(s.root(), "linked").exists());
    let found = s.ok(json!({"operation": "search_by_id", "database": "linked", "table": "t", "ids": [1]})).await;
    assert_eq!(found.as_array().unwrap().len(), 1, "the database still works");
}

/// A blob root that is a symbolic link is refused too, before anything changes.
#[tokio::test]
async fn a_symlinked_blob_root_is_never_deleted_through() {
    let elsewhere = tempfile::tempdir().unwrap();
    let s = TestServer::start().await;
    seed(&s, "linked", 10).await;
    let real = elsewhere.path().join("linked");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("sentinel.txt"), "keep me").unwrap();
    std::fs::create_dir_all(s.root().join("blobs")).unwrap();
    std::os::unix::fs::symlink(&real, s.root().join("blobs/linked")).unwrap();
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "linked"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is a symbolic link"), "{body}");
    assert_eq!(std::fs::read_to_string(real.join("sentinel.txt")).unwrap(), "keep me");
    assert!(s.root().join("database/linked/data.mdb").exists(), "nothing was deleted");
    assert!(!marker_path(s.root(), "linked").exists());
}

/// A failed removal keeps the marker and reports the error; the database stays
/// blocked until a restart finishes the drop.
#[tokio::test]
async fn a_failed_removal_keeps_the_marker() {
    let mut s = TestServer::start_with(&[("LYRE_FAILPOINT", "fail:drop-remove")]).await;
    seed(&s, "stuck", 10).await;
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "stuck"})).await;
    // A failed step of the protocol is an internal fault (500); the reason is logged
    // and named in the lifecycle status.
    assert_eq!(status, 500, "{body}");
    let report = s.ok(json!({"operation": "get_lifecycle_status"})).await;
    assert!(report["blocked"]["stuck"].as_str().unwrap().contains("drop-remove failed"), "{report}");
    assert!(marker_path(s.root(), "stuck").exists(), "the marker stays");
    let (status, _) = s.op(json!({"operation": "describe_database", "database": "stuck"})).await;
    assert_eq!(status, 409, "the half-dropped database is not served");
    let create = json!({"operation": "create_table", "database": "stuck", "table": "again", "primary_key": "id"});
    let (status, body) = s.op(create).await;
    assert_eq!(status, 409, "a blocked database is never reopened by create_table: {body}");
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    assert!(!s.root().join("database/stuck").exists());
    assert!(!marker_path(s.root(), "stuck").exists());
}

/// 50 schema changes leave no handle behind, dropped tables give their storage back
/// (300 distinct names in one database), and the drop then succeeds.
#[tokio::test]
async fn schema_changes_leak_no_handles() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_database", "database": "churn"})).await;
    let baseline =
        s.ok(json!({"operation": "get_lifecycle_status"})).await["databases"]["churn"]["open_handles"].clone();
    for i in 0..50 {
        match i % 3 {
            0 => s.ok(json!({"operation": "create_table", "database": "churn", "table": format!("t{i}"), "primary_key": "id"})).await,
            1 => s.ok(json!({"operation": "create_attribute", "database": "churn", "table": format!("t{}", i - 1), "attribute": "x"})).await,
            _ => s.ok(json!({"operation": "drop_table", "database": "churn", "table": format!("t{}", i - 2)})).await,
        };
    }
    let status = s.ok(json!({"operation": "get_lifecycle_status"})).await;
    assert_eq!(status["databases"]["churn"]["open_handles"], baseline, "{status}");
    assert_eq!(status["databases"]["churn"]["leases"], json!([]));
    for i in 0..300 {
        let table = format!("temp{i}");
        s.ok(json!({"operation": "create_table", "database": "churn", "table": table, "primary_key": "id"})).await;
        s.ok(json!({"operation": "insert", "database": "churn", "table": table, "records": [{"id": i}]})).await;
        s.ok(json!({"operation": "drop_table", "database": "churn", "table": table})).await;
    }
    s.ok(json!({"operation": "create_table", "database": "churn", "table": "temp0", "primary_key": "id"})).await;
    let reused = s.ok(json!({"operation": "search_by_value", "database": "churn", "table": "temp0", "attribute": "id", "value": "*"})).await;
    assert_eq!(reused, json!([]), "a reused slot starts empty");
    s.ok(json!({"operation": "drop_database", "database": "churn"})).await;
}

/// A crash while a restore is still copying the backup in (no database existed
/// before) is undone at the next start: the unchecked copy is never swapped in.
#[tokio::test]
async fn a_crash_while_staging_a_restore_is_undone() {
    let mut s = TestServer::start().await;
    seed(&s, "source", 50).await;
    let file = s.root().join("source.backup");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_lyre"))
        .args(["backup", "--database", "source", "--out", file.to_str().unwrap(), "--root"])
        .arg(s.root())
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", Some("crash:restore-copied"));
    s.start_again().await;
    crash_on(&s, json!({"operation": "restore_backup", "database": "fresh", "backup_file": file.to_str().unwrap()}))
        .await;
    s.wait_exit();
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    assert!(!databases(&s).await.contains(&"fresh".to_string()), "a copy that was never checked was swapped in");
    let leftovers: Vec<_> = std::fs::read_dir(s.root().join("database"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|name| name.contains('`'))
        .collect();
    assert!(leftovers.is_empty(), "restore work areas left behind: {leftovers:?}");
    assert!(!marker_path(s.root(), "fresh").exists());
    // The same restore, uninterrupted, then works.
    s.ok(json!({"operation": "restore_backup", "database": "fresh", "backup_file": file.to_str().unwrap()})).await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "fresh"})).await;
    assert_eq!(report["tables"][0]["records"].as_u64(), Some(50), "{report}");
}

/// A backup taken under write load restores to a consistent database, through the
/// operation and through `lyre restore`; a crash mid-restore is finished at start.
#[tokio::test]
async fn backups_under_load_restore_consistently() {
    let mut s = TestServer::start().await;
    seed(&s, "live", 2_000).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (client, url, stop) = (s.client.clone(), s.url("/"), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let body = json!({"operation": "upsert", "database": "live", "table": "t", "records": [
                    {"id": i % 2_500, "status": format!("w{}", i % 5)}, {"id": 10_000 + i, "status": "new"}]});
                let _ = client
                    .post(&url)
                    .basic_auth(USER, Some(PASSWORD))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                i += 1;
            }
            i
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let backup = s.op_request(&json!({"operation": "get_backup", "database": "live"})).send().await.unwrap();
    assert_eq!(backup.status(), 200);
    assert_eq!(backup.headers()["content-type"], "application/octet-stream");
    let bytes = backup.bytes().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes > 0);
    let file = s.root().join("live.backup");
    std::fs::write(&file, &bytes).unwrap();

    s.ok(json!({"operation": "restore_backup", "database": "copy", "backup_file": file.to_str().unwrap()})).await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "copy"})).await;
    assert_eq!(report["consistent"], true, "{report}");
    let restored = report["tables"][0]["records"].as_u64().unwrap();
    assert!(restored >= 2_000, "the backup holds at least the seeded records ({restored})");
    let live = s.ok(json!({"operation": "check_consistency", "database": "live"})).await;
    assert!(restored <= live["tables"][0]["records"].as_u64().unwrap());

    // Over an existing database, with a crash in the middle of the swap: the next
    // start completes the restore.
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", Some("crash:restore-swap"));
    s.start_again().await;
    crash_on(&s, json!({"operation": "restore_backup", "database": "live", "backup_file": file.to_str().unwrap()}))
        .await;
    s.wait_exit();
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "live"})).await;
    assert_eq!(report["consistent"], true, "{report}");
    assert_eq!(report["tables"][0]["records"].as_u64().unwrap(), restored, "the restored copy is in place");

    // The command line: refused while the server runs, then works offline.
    let root = s.root().to_path_buf();
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lyre")).args(args).arg("--root").arg(&root).output().unwrap()
    };
    let refused = cli(&["restore", "--database", "third", "--from", file.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("a server is running"), "{refused:?}");
    let copy = s.root().join("cli.backup");
    let backed_up = cli(&["backup", "--database", "live", "--out", copy.to_str().unwrap()]);
    assert!(backed_up.status.success(), "{backed_up:?}");
    s.stop("-TERM");
    let restored_cli = cli(&["restore", "--database", "third", "--from", copy.to_str().unwrap()]);
    assert!(restored_cli.status.success(), "{restored_cli:?}");
    s.start_again().await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "third"})).await;
    assert_eq!((report["consistent"].clone(), report["tables"][0]["records"].as_u64()), (json!(true), Some(restored)));
    // Not a backup at all: refused (the client's mistake, 400) before anything changes.
    std::fs::write(&file, b"not a database").unwrap();
    let (status, body) =
        s.op(json!({"operation": "restore_backup", "database": "live", "backup_file": file.to_str().unwrap()})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is not a usable Lyre database backup"), "{body}");
    let report = s.ok(json!({"operation": "check_consistency", "database": "live"})).await;
    assert_eq!(report["tables"][0]["records"].as_u64(), Some(restored), "the live database is unchanged");
}

/// Seed 002 scenario 21: a marker write that fails (the staged write, or the
/// directory fsync after the rename) fails the drop and leaves no marker, torn or
/// whole; the database is untouched. A marker already in force is never superseded:
/// a drop over another operation's marker is refused and the marker stays byte for
/// byte.
#[tokio::test]
async fn a_failing_marker_write_leaves_no_marker_and_changes_nothing() {
    for step in ["marker-write", "marker-dir-sync"] {
        let s = TestServer::start_with(&[("LYRE_FAILPOINT", &format!("fail:{step}"))]).await;
        seed(&s, "dev", 10).await;
        let (status, body) = s.op(json!({"operation": "drop_database", "database": "dev"})).await;
        assert_eq!(status, 500, "{step}: {body}");
        let lifecycle = s.root().join("lifecycle");
        let left: Vec<String> = std::fs::read_dir(&lifecycle)
            .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        assert!(left.iter().all(|name| !name.contains("marker")), "{step}: markers left behind: {left:?}");
        let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1, 2]})).await;
        assert_eq!(found.as_array().unwrap().len(), 2, "{step}: the database still serves");
        assert!(s.root().join("database/dev/data.mdb").exists());
    }
    // A restore's marker in force (its swap failed): a drop does not supersede it.
    let mut s = TestServer::start_with(&[("LYRE_FAILPOINT", "fail:restore-swap")]).await;
    seed(&s, "dev", 10).await;
    let file = s.root().join("dev.backup");
    let backup = s.op_request(&json!({"operation": "get_backup", "database": "dev"})).send().await.unwrap();
    std::fs::write(&file, backup.bytes().await.unwrap()).unwrap();
    let restore = json!({"operation": "restore_backup", "database": "dev", "backup_file": file.to_str().unwrap()});
    let (status, body) = s.op(restore.clone()).await;
    assert_eq!(status, 500, "{body}");
    let marker = marker_path(s.root(), "dev");
    let before = std::fs::read(&marker).expect("the restore's marker stays");
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "dev"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(std::fs::read(&marker).unwrap(), before, "the marker is byte for byte what it was");
    // Scenario 22: neither may a restore run over it until a restart settles it.
    let (status, body) = s.op(restore).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(std::fs::read(&marker).unwrap(), before);
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    assert!(!marker.exists(), "the restart settled the restore");
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1]})).await;
    assert_eq!(found.as_array().unwrap().len(), 1);
}

/// Seed 002 scenario 22: a drop while a restore of the same database is running is
/// refused at once (409), and so is a restore over an unfinished drop.
#[tokio::test]
async fn drops_and_restores_of_one_database_exclude_each_other() {
    let s = Arc::new(TestServer::start_with(&[("STORAGE_RELEASETIMEOUT", "3000")]).await);
    seed(&s, "dev", 40_000).await;
    let file = s.root().join("dev.backup");
    let backup = s.op_request(&json!({"operation": "get_backup", "database": "dev"})).send().await.unwrap();
    std::fs::write(&file, backup.bytes().await.unwrap()).unwrap();
    // A slow reader holds the database, so the restore waits for it (up to 3 s).
    let mut held = s.op_request(&json!({"operation": "get_backup", "database": "dev"})).send().await.unwrap();
    assert!(!held.chunk().await.unwrap().expect("a first chunk").is_empty());
    let restoring = {
        let s = s.clone();
        let file = file.clone();
        tokio::spawn(async move {
            s.op(json!({"operation": "restore_backup", "database": "dev", "backup_file": file.to_str().unwrap()})).await
        })
    };
    // The restore is under way once its marker is published.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !marker_path(s.root(), "dev").exists() {
        assert!(std::time::Instant::now() < deadline, "the restore never started");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let (status, body) = s.op(json!({"operation": "drop_database", "database": "dev"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is in progress"), "{body}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "refused at once, not after the restore");
    drop(held);
    let (status, body) = restoring.await.unwrap();
    assert!(status == 200 || status == 409, "{status} {body}");
    // An unfinished drop (its removal failed) blocks a restore until it is settled.
    let s = TestServer::start_with(&[("LYRE_FAILPOINT", "fail:drop-remove")]).await;
    seed(&s, "gone", 10).await;
    let (status, _) = s.op(json!({"operation": "drop_database", "database": "gone"})).await;
    assert_eq!(status, 500);
    let (status, body) =
        s.op(json!({"operation": "restore_backup", "database": "gone", "backup_file": file.to_str().unwrap()})).await;
    assert_eq!(status, 409, "{body}");
    assert!(marker_path(s.root(), "gone").exists(), "the drop's marker stays");
}
