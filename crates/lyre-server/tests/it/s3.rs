//! `import_from_s3` and `export_to_s3` against a real S3-compatible server (moto's,
//! started here; installed with pip on first use when missing), reached through
//! the server's `AWS_ENDPOINT_URL`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestServer, free_port, run_job};

/// A moto S3 server on a free port, stopped when dropped.
struct S3Server {
    child: Child,
    endpoint: String,
}

impl S3Server {
    async fn start() -> S3Server {
        ensure_moto();
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto's S3 server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(&endpoint).await.is_err() {
            assert!(Instant::now() < deadline, "moto's server did not answer within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        S3Server { child, endpoint }
    }

    /// Sends an unsigned request (moto accepts them) to `bucket/key`.
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
        let mut request = reqwest::Client::new().request(method, format!("{}/{path}", self.endpoint));
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.expect("S3 request");
        (response.status().as_u16(), response.bytes().await.expect("S3 body").to_vec())
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs moto's server with pip unless it is importable already.
fn ensure_moto() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let importable = || Command::new("python3").args(["-c", "import moto.server"]).status().is_ok_and(|s| s.success());
    INSTALLED.call_once(|| {
        if !importable() {
            let status = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "moto[server]"])
                .status()
                .expect("run pip");
            assert!(status.success() && importable(), "installing moto[server] with pip failed");
        }
    });
}

fn s3(key: &str) -> Value {
    json!({"aws_access_key_id": "test", "aws_secret_access_key": "test", "bucket": "lyre-test", "key": key,
        "region": "us-east-1"})
}

#[tokio::test]
async fn records_go_to_s3_and_come_back_as_csv_and_json() {
    let s3_server = S3Server::start().await;
    assert_eq!(s3_server.send(reqwest::Method::PUT, "lyre-test", None).await.0, 200);
    let s = TestServer::start_with(&[("AWS_ENDPOINT_URL", &s3_server.endpoint)]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;

    // A CSV object loads as csv_file_load would (typing, rejected lines).
    let csv = "id,name,tags\n1,Penny,\"[\"\"a\"\"]\"\n2,Kato,\n3,Riley,x,extra\n";
    s3_server.send(reqwest::Method::PUT, "lyre-test/in/dogs.csv", Some(csv.into())).await;
    let job = run_job(
        &s,
        json!({"operation": "import_from_s3", "database": "dev", "table": "dog",
        "s3": s3("in/dogs.csv")}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["type"], "import_from_s3");
    let message = job["message"].as_str().unwrap();
    assert!(message.starts_with("successfully loaded 2 of 3 records; 1 rows rejected (line 4:"), "{message}");

    // A JSON object is an array of records; an element that is not one is rejected
    // by its position.
    let records = json!([{"id": 4, "name": "Rex", "meta": {"x": 1}}, 5, {"id": 6, "name": "Bo"}]);
    s3_server.send(reqwest::Method::PUT, "lyre-test/in/dogs.json", Some(records.to_string().into())).await;
    let job = run_job(
        &s,
        json!({"operation": "import_from_s3", "database": "dev", "table": "dog",
        "action": "upsert", "s3": s3("in/dogs.json")}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    let message = job["message"].as_str().unwrap();
    assert!(
        message.starts_with("successfully loaded 2 of 3 records; 1 rows rejected (record 2: not an object"),
        "{message}"
    );
    let rex = s
        .ok(json!({"operation": "search_by_hash", "database": "dev", "table": "dog", "hash_values": [4],
        "get_attributes": ["meta"]}))
        .await;
    assert_eq!(rex, json!([{"meta": {"x": 1}}]));

    // Export: the key gets the format's extension, and the object holds the results.
    let everyone = json!({"operation": "search_by_conditions", "database": "dev", "table": "dog",
        "conditions": [{"attribute": "id", "comparator": "greater_than", "value": 0}], "sort": {"attribute": "id"},
        "get_attributes": ["id", "name"]});
    let job = run_job(
        &s,
        json!({"operation": "export_to_s3", "format": "json", "s3": s3("out/dogs"),
        "search_operation": everyone.clone()}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["result"]["Key"], "out/dogs.json");
    assert!(job["result"]["ETag"].is_string(), "{job}");
    let (status, body) = s3_server.send(reqwest::Method::GET, "lyre-test/out/dogs.json", None).await;
    assert_eq!(status, 200);
    let exported: Value = serde_json::from_slice(&body).unwrap();
    let ids: Vec<i64> = exported.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 4, 6]);
    let job = run_job(
        &s,
        json!({"operation": "export_to_s3", "format": "csv", "s3": s3("out/dogs"),
        "search_operation": everyone}),
    )
    .await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    let (_, body) = s3_server.send(reqwest::Method::GET, "lyre-test/out/dogs.csv", None).await;
    assert_eq!(String::from_utf8(body).unwrap(), "\"id\",\"name\"\n1,\"Penny\"\n2,\"Kato\"\n4,\"Rex\"\n6,\"Bo\"");

    // A missing object ends the job in error, saying so.
    let job = run_job(
        &s,
        json!({"operation": "import_from_s3", "database": "dev", "table": "dog",
        "s3": s3("in/nothing.csv")}),
    )
    .await;
    assert_eq!(job["status"], "ERROR", "{job}");
    assert!(job["message"].as_str().unwrap().contains("The specified key does not exist."), "{job}");
}

#[tokio::test]
async fn a_bad_s3_request_names_every_problem() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let import = |s3: Value| json!({"operation": "import_from_s3", "database": "dev", "table": "dog", "s3": s3});
    s.fails(json!({"operation": "import_from_s3", "database": "dev", "table": "dog"}), 400, "S3 can't be blank").await;
    s.fails(
        import(json!({"bucket": 5, "key": "a.csv", "region": "x"})),
        400,
        "S3 aws access key id can't be blank,S3 aws secret access key can't be blank,S3 bucket must be a 'String' value",
    )
    .await;
    let mut wrong = s3("dogs.xml");
    s.fails(
        import(wrong.clone()),
        400,
        "S3 key must include one of the following valid file extensions - '.csv', '.json'",
    )
    .await;
    wrong["key"] = json!("dogs.csv");
    s.fails(
        json!({"operation": "import_from_s3", "database": "dev", "table": "cat", "s3": wrong}),
        404,
        "Table 'dev.cat' does not exist",
    )
    .await;
}
