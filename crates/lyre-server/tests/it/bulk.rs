//! CSV loads (`csv_data_load`, `csv_file_load`) as jobs: typing, rejected rows,
//! actions, errors, permissions, and memory while a large file loads.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestServer, anonymous_kib, finished_job, run_job as load, status_kib};

/// The records of dev.`table`, in id order.
async fn records(s: &TestServer, table: &str) -> Value {
    let found = s
        .ok(json!({"operation": "search_by_value", "database": "dev", "table": table, "search_attribute": "id",
            "search_value": "*", "get_attributes": ["*"]}))
        .await;
    let mut rows = found.as_array().cloned().unwrap_or_default();
    rows.sort_by_key(|row| row["id"].as_i64());
    for row in &mut rows {
        if let Some(record) = row.as_object_mut() {
            record.remove("__createdtime__");
            record.remove("__updatedtime__");
        }
    }
    Value::Array(rows)
}

#[tokio::test]
async fn a_csv_loads_with_harpers_typing_and_rejects_bad_lines_by_number() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    // A byte-order mark, a quoted field across two lines, JSON in cells, a leading
    // zero, an exponent, an empty cell, a line with an extra field, a blank line.
    let data = "\u{feff}id,name,age,good,tags,meta,zip,part,note\n\
        1,Penny,5,true,\"[\"\"a\"\",\"\"b\"\"]\",\"{\"\"x\"\":1}\",02134,1e5,\"two\nlines\"\n\
        2,Kato,4.5,FALSE,[],{},90210,7,\n\
        3,Riley,7,null,x,y,z,w,v,extra\n\
        \n\
        4,Rex,-3,true,,,00000,0.5e1,plain\n";
    let job = load(&s, json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "data": data})).await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["type"], "csv_data_load");
    let message = job["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "successfully loaded 3 of 4 records; 1 rows rejected (line 5: 10 fields where the header names 9)"
        ),
        "{message}"
    );
    let found = records(&s, "dog").await;
    let rows = found.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{found}");
    let penny = &rows[0];
    assert_eq!(penny["name"], "Penny");
    assert_eq!(penny["age"], 5);
    assert_eq!(penny["good"], true);
    assert_eq!(penny["tags"], json!(["a", "b"]));
    assert_eq!(penny["meta"], json!({"x": 1}));
    assert_eq!(penny["zip"], "02134", "a leading zero keeps the text");
    assert_eq!(penny["part"], "1e5", "an exponent keeps the text");
    assert_eq!(penny["note"], "two\nlines");
    let kato = &rows[1];
    assert_eq!(kato["age"], 4.5);
    assert_eq!(kato["good"], false);
    assert_eq!(kato["tags"], json!([]));
    // An empty cell leaves the attribute out (a search shows it as null).
    assert_eq!(kato["note"], Value::Null, "{kato}");
    let rex = &rows[2];
    assert_eq!(rex["id"], 4);
    assert_eq!(rex["age"], -3);
    assert_eq!(rex["zip"], "00000");
    assert_eq!(rex["part"], 5.0);
}

#[tokio::test]
async fn declared_types_take_the_text_and_refused_values_reject_their_row() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "place", "primary_key": "id",
        "attributes": [{"name": "id", "type": "Int"}, {"name": "zip", "type": "String"}, {"name": "people", "type": "Int"},
            {"name": "open", "type": "Boolean"}]}))
    .await;
    let data = "id,zip,people,open\n1,02134,12,TRUE\n2,90210,many,false\n3,10001,7,False\n";
    let job = load(&s, json!({"operation": "csv_data_load", "database": "dev", "table": "place", "data": data})).await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    let message = job["message"].as_str().unwrap();
    assert!(message.starts_with("successfully loaded 2 of 3 records; 1 rows rejected (line 3: "), "{message}");
    assert!(message.contains("people"), "the refusal names the attribute: {message}");
    let found = records(&s, "place").await;
    assert_eq!(
        found,
        json!([{"id": 1, "zip": "02134", "people": 12, "open": true}, {"id": 3, "zip": "10001", "people": 7, "open": false}])
    );
}

#[tokio::test]
async fn actions_insert_update_and_upsert_as_harper() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "Penny", "age": 5}]}))
        .await;
    // Insert skips an existing key (Harper's count leaves skipped rows out), update
    // merges into existing records and skips missing ones, upsert writes both.
    for (action, data, message) in [
        ("insert", "id,name\n1,Other\n2,Kato\n", "successfully loaded 1 of 1 records"),
        ("update", "id,name\n1,Pen\n9,Nobody\n", "successfully loaded 1 of 1 records"),
        ("upsert", "id,name\n2,Kato2\n3,Riley\n", "successfully loaded 2 of 2 records"),
    ] {
        let request =
            json!({"operation": "csv_data_load", "action": action, "database": "dev", "table": "dog", "data": data});
        assert_eq!(load(&s, request).await["message"], message, "{action}");
    }
    let names: Vec<Value> = records(&s, "dog").await.as_array().unwrap().iter().map(|r| r["name"].clone()).collect();
    assert_eq!(names, [json!("Pen"), json!("Kato2"), json!("Riley")]);
    let penny = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1], "get_attributes": ["age"]})).await;
    assert_eq!(penny, json!([{"age": 5}]), "update kept the attributes the CSV did not name");
}

#[tokio::test]
async fn bad_requests_and_documents_that_are_not_csv() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.fails(json!({"operation": "csv_data_load", "database": "dev", "table": "dog"}), 400, "'data' is required").await;
    s.fails(
        json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "action": "replace", "data": "id\n1\n"}),
        400,
        "'action' must be insert, update or upsert, not 'replace'",
    )
    .await;
    let (status, _) =
        s.op(json!({"operation": "csv_data_load", "database": "dev", "table": "cat", "data": "id\n1\n"})).await;
    assert_eq!(status, 404, "an unknown table");
    let (status, answer) = s
        .op(json!({"operation": "csv_file_load", "database": "dev", "table": "dog", "file_path": "/nonexistent/x.csv"}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("/nonexistent/x.csv"), "{answer}");
    // No header row, or a header that is not text: the job fails and says why.
    let job = load(&s, json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "data": ""})).await;
    assert_eq!(job["status"], "ERROR");
    assert!(job["message"].as_str().unwrap().contains("needs a header row"), "{job}");
    let job =
        load(&s, json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "data": "id,,x\n1,2,3\n"}))
            .await;
    assert_eq!(job["status"], "ERROR");
    assert!(job["message"].as_str().unwrap().contains("column 2 is empty"), "{job}");
    // A header alone: nothing to load, as Harper says it.
    let job =
        load(&s, json!({"operation": "csv_data_load", "database": "dev", "table": "dog", "data": "id,name\n"})).await;
    assert_eq!(job["status"], "COMPLETE");
    assert_eq!(job["message"], "No records parsed from csv file.");
}

#[tokio::test]
async fn a_file_loads_for_a_super_user_only_and_other_loads_need_write_permission() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let file = s.root().join("dogs.csv");
    std::fs::write(&file, "id,name\n1,Penny\n2,Kato\n").unwrap();
    let request = json!({"operation": "csv_file_load", "database": "dev", "table": "dog", "file_path": file});
    let job = load(&s, request.clone()).await;
    assert_eq!(job["message"], "successfully loaded 2 of 2 records", "{job}");

    let permission = json!({"dev": {"tables": {"dog": {"read": true, "insert": false, "update": false, "delete": false,
        "attribute_permissions": []}}}});
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": permission})).await;
    s.ok(json!({"operation": "add_user", "username": "ann", "password": "pw", "role": "reader", "active": true})).await;
    // A server file could hold anything the server can read, and a URL could reach
    // anything the server can: super users only.
    let (status, answer) = s.op_as("ann", "pw", &request).await;
    assert_eq!(status, 403, "{answer}");
    let url =
        json!({"operation": "csv_url_load", "database": "dev", "table": "dog", "csv_url": "http://127.0.0.1:1/x.csv"});
    let (status, answer) = s.op_as("ann", "pw", &url).await;
    assert_eq!(status, 403, "{answer}");
    // A data load is a write: refused before any job starts without the action's
    // permission (insert; update; both for upsert).
    for action in ["insert", "update", "upsert"] {
        let load = json!({"operation": "csv_data_load", "action": action, "database": "dev", "table": "dog", "data": "id\n7\n"});
        let (status, answer) = s.op_as("ann", "pw", &load).await;
        assert_eq!(status, 403, "{action}: {answer}");
        assert!(answer.get("job_id").is_none(), "{answer}");
    }
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [7]})).await;
    assert_eq!(found, json!([]));
}

#[tokio::test]
async fn a_large_file_loads_in_batches_with_bounded_memory() {
    use std::io::Write as _;
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "big", "primary_key": "id"})).await;
    // 100,000 rows of about 2 KiB, over 200 MB: held whole and decoded, it would
    // take several times that; streamed, a few batches of at most 4 MiB are in memory
    // at once, and the map's pages the load touches are released as it goes.
    const ROWS: u64 = 100_000;
    let file = s.root().join("big.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
    writeln!(out, "id,name,score,note").unwrap();
    let padding = "p".repeat(2_000);
    for n in 0..ROWS {
        writeln!(out, "{n},name {n},{}.5,\"a note, with a comma: {n:0>8} {padding}\"", n % 1000).unwrap();
    }
    out.flush().unwrap();
    drop(out);
    let size_mb = std::fs::metadata(&file).unwrap().len() / 1_000_000;
    assert!(size_mb >= 200, "{size_mb} MB");
    let (anon_before, resident_before) = (anonymous_kib(s.pid()), status_kib(s.pid(), "VmRSS:"));
    let started =
        s.ok(json!({"operation": "csv_file_load", "database": "dev", "table": "big", "file_path": file})).await;
    let id = started["job_id"].as_str().unwrap().to_string();
    let (mut anon_peak, mut resident_peak) = (anon_before, resident_before);
    let mut progress_seen = false;
    let job = loop {
        anon_peak = anon_peak.max(anonymous_kib(s.pid()));
        resident_peak = resident_peak.max(status_kib(s.pid(), "VmRSS:"));
        let job = s.ok(json!({"operation": "get_job", "id": id})).await;
        if job[0]["status"] != "IN_PROGRESS" {
            break job[0].clone();
        }
        progress_seen |= job[0]["message"].as_str().is_some_and(|m| m.starts_with("loading: "));
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(job["message"], format!("successfully loaded {ROWS} of {ROWS} records"), "{job}");
    // Bounds far above what the load needs (so this is no timing test), far below
    // the file's size: the heap grew 62-74 MiB in runs alone, 97 MiB once with the
    // whole suite running beside it (the allocator keeps what it freed longer).
    let heap_mib = anon_peak.saturating_sub(anon_before) >> 10;
    assert!(heap_mib < 128, "the server's heap grew {heap_mib} MiB loading a {size_mb} MB file");
    let resident_mib = resident_peak.saturating_sub(resident_before) >> 10;
    eprintln!("loading {size_mb} MB: heap grew {heap_mib} MiB, resident memory {resident_mib} MiB");
    assert!(resident_mib < 160, "the server's resident memory grew {resident_mib} MiB loading a {size_mb} MB file");
    assert!(progress_seen, "get_job showed the rows loaded while the job ran");
    let count = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "big"})).await;
    assert_eq!(count["record_count"], ROWS);
}

/// Rows in the loads the interruption tests cut short.
const LONG_LOAD_ROWS: u64 = 400_000;

/// Starts loading `LONG_LOAD_ROWS` rows into dev.big from a file and returns the
/// job's id once at least `loaded` records are in (the load still running).
async fn long_load_under_way(s: &TestServer, loaded: u64) -> String {
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "big", "primary_key": "id"})).await;
    let file = s.root().join("big.csv");
    let mut text = String::from("id,name\n");
    for n in 0..LONG_LOAD_ROWS {
        text.push_str(&format!("{n},name {n}\n"));
    }
    std::fs::write(&file, text).unwrap();
    let started =
        s.ok(json!({"operation": "csv_file_load", "database": "dev", "table": "big", "file_path": file})).await;
    loop {
        let count = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "big"})).await;
        if count["record_count"].as_u64().unwrap_or(0) >= loaded {
            return started["job_id"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_load_cut_short_by_a_crash_ends_as_error_and_keeps_its_committed_batches() {
    let mut s = TestServer::start().await;
    let id = long_load_under_way(&s, 5_000).await;
    s.stop("-KILL");
    s.start_again().await;
    let job = finished_job(&s, &id).await;
    assert_eq!(job["status"], "ERROR", "{job}");
    assert!(job["message"].as_str().unwrap().contains("interrupted"), "{job}");
    let loaded = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "big"})).await["record_count"]
        .as_u64()
        .unwrap();
    assert!((5_000..LONG_LOAD_ROWS).contains(&loaded), "whole batches stay loaded: {loaded}");
    assert_eq!(loaded % 1_000, 0, "a batch is all or nothing: {loaded}");
}

/// A small HTTP origin on loopback answering `GET <path>` from `answers` (status
/// line, content type, body); other paths get 404, and `/secret.csv` gets 401
/// unless the request carries `x-token: s3cret`.
async fn origin(answers: Vec<(&'static str, &'static str, &'static str, String)>) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answers = answers.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let authorized = text.lines().any(|line| line.eq_ignore_ascii_case("x-token: s3cret"));
                let refused = path == "/secret.csv" && !authorized;
                let (status, content_type, body) = answers
                    .iter()
                    .find(|(p, ..)| *p == path)
                    .map(|(_, status, content_type, body)| (*status, *content_type, body.clone()))
                    .filter(|_| !refused)
                    .unwrap_or(if refused {
                        ("401 Unauthorized", "text/plain", "who are you".to_string())
                    } else {
                        ("404 Not Found", "text/plain", "no such file".to_string())
                    });
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_url_loads_and_an_origin_that_fails_ends_the_job_with_the_reason() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let mut big = String::from("id,name\n");
    for n in 0..5_000 {
        big.push_str(&format!("{n},dog {n}\n"));
    }
    let port = origin(vec![
        ("/dogs.csv", "200 OK", "text/csv; charset=utf-8", "id,name\n1,Penny\n2,Kato\n".to_string()),
        ("/page.html", "200 OK", "text/html", "<html></html>".to_string()),
        ("/many.csv", "200 OK", "application/octet-stream", big),
        ("/secret.csv", "200 OK", "text/csv", "id,name\n90000,Secret\n".to_string()),
    ])
    .await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let request =
        |path: &str| json!({"operation": "csv_url_load", "database": "dev", "table": "dog", "csv_url": url(path)});

    let job = load(&s, request("/dogs.csv")).await;
    assert_eq!(job["status"], "COMPLETE", "{job}");
    assert_eq!(job["message"], "successfully loaded 2 of 2 records");
    let job = load(&s, request("/many.csv")).await;
    assert_eq!(job["message"], "successfully loaded 4998 of 4998 records", "ids 1 and 2 exist: {job}");

    // An origin that wants a token gets it through passthrough_headers, which the
    // job's record does not keep.
    let job = load(&s, request("/secret.csv")).await;
    assert!(job["message"].as_str().unwrap().ends_with("status code: 401, message: Unauthorized"), "{job}");
    let mut with_token = request("/secret.csv");
    with_token["passthrough_headers"] = json!({"X-Token": "s3cret"});
    let job = load(&s, with_token.clone()).await;
    assert_eq!(job["message"], "successfully loaded 1 of 1 records", "{job}");
    assert!(!job.to_string().contains("s3cret"), "{job}");
    with_token["passthrough_headers"] = json!({"bad header": "x"});
    s.fails(with_token.clone(), 400, "'bad header' is not a valid header name").await;
    with_token["passthrough_headers"] = json!("x-token: s3cret");
    s.fails(with_token, 400, "'passthrough_headers' must be an object of header names and values").await;

    let job = load(&s, request("/missing.csv")).await;
    assert_eq!(job["status"], "ERROR");
    let expected = format!("CSV Load failed from URL: {}, status code: 404, message: Not Found", url("/missing.csv"));
    assert_eq!(job["message"], expected);
    let job = load(&s, request("/page.html")).await;
    assert_eq!(job["status"], "ERROR");
    assert!(job["message"].as_str().unwrap().ends_with("unsupported content type: text/html"), "{job}");
    // Nothing listens here.
    let closed = crate::support::free_port();
    let job = load(
        &s,
        json!({"operation": "csv_url_load", "database": "dev", "table": "dog",
        "csv_url": format!("http://127.0.0.1:{closed}/x.csv")}),
    )
    .await;
    assert_eq!(job["status"], "ERROR");
    let message = job["message"].as_str().unwrap();
    assert!(message.starts_with("CSV Load failed from URL: ") && message.contains("refused"), "the cause: {message}");

    for bad in ["not a url", "ftp://127.0.0.1/x.csv", "file:///etc/passwd"] {
        let (status, answer) =
            s.op(json!({"operation": "csv_url_load", "database": "dev", "table": "dog", "csv_url": bad})).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("'csv_url' must be a valid http or https url"), "{answer}");
    }
}

#[tokio::test]
async fn dropping_the_database_stops_a_load_instead_of_waiting_for_it() {
    let s = TestServer::start().await;
    let id = long_load_under_way(&s, 2_000).await;
    s.ok(json!({"operation": "drop_database", "database": "dev"})).await;
    let job = finished_job(&s, &id).await;
    assert_eq!(job["status"], "ERROR", "{job}");
    assert!(job["message"].as_str().unwrap().contains("being dropped or restored"), "{job}");
}

/// A table dropped and made again under its name while a load into it runs is
/// another table: the load ends with an error instead of writing the rest of its
/// document into the new one (the writer refuses a handle on the dropped table,
/// and the load checks between batches).
#[tokio::test]
async fn a_table_dropped_and_made_again_during_a_load_gets_none_of_it() {
    let s = TestServer::start().await;
    let id = long_load_under_way(&s, 2_000).await;
    s.ok(json!({"operation": "drop_table", "database": "dev", "table": "big"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "big", "primary_key": "id"})).await;
    let job = finished_job(&s, &id).await;
    assert_eq!(job["status"], "ERROR", "{job}");
    let message = job["message"].as_str().unwrap();
    assert!(message.contains("was dropped during the load") || message.contains("does not exist"), "{message}");
    let count = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "big"})).await;
    assert_eq!(count["record_count"], 0, "the new table holds none of the old load");
}

#[tokio::test]
async fn a_load_stops_at_a_graceful_shutdown_and_says_so() {
    let mut s = TestServer::start().await;
    let id = long_load_under_way(&s, 2_000).await;
    assert!(s.stop("-TERM"), "the server stopped cleanly");
    s.start_again().await;
    let job = finished_job(&s, &id).await;
    assert_eq!(job["status"], "ERROR", "{job}");
    let message = job["message"].as_str().unwrap();
    assert!(message.starts_with("stopped: the server is shutting down (after "), "recorded, not cut off: {message}");
}
