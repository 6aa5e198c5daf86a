//! Applications: loading, reloading, deploying and dropping at run time.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::rest::{SHOP_CONFIG, SHOP_SCHEMA};
use crate::support::{PASSWORD, TestServer, USER};

async fn rest_get(s: &TestServer, path: &str) -> (u16, Value) {
    let response = s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn rest_put(s: &TestServer, path: &str, body: Value) -> u16 {
    let response = s
        .client
        .put(s.rest(path))
        .basic_auth(USER, Some(PASSWORD))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

/// A base64 tar of `files` (name, text), as `deploy_component` takes.
pub fn payload(files: &[(&str, &str)]) -> String {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, text.as_bytes()).unwrap();
    }
    base64::engine::general_purpose::STANDARD.encode(builder.into_inner().unwrap())
}

async fn shop() -> TestServer {
    TestServer::start_app(
        &[("components/shop/config.yaml", SHOP_CONFIG), ("components/shop/schema.graphql", SHOP_SCHEMA)],
        &[],
    )
    .await
}

#[tokio::test]
async fn a_schema_change_applies_on_reload_and_indexes_existing_records() {
    let s = shop().await;
    assert_eq!(rest_put(&s, "/products/p1", json!({"name": "Foo", "stock": 3})).await, 204);
    assert_eq!(rest_put(&s, "/products/p2", json!({"name": "Bar", "stock": 5})).await, 204);
    assert_eq!(rest_get(&s, "/products/?stock==3").await.0, 404, "stock is not declared yet");
    let schema = SHOP_SCHEMA.replace("  count: Int\n", "  count: Int\n  stock: Int @indexed\n");
    let answer = s
        .ok(json!({"operation": "set_component_file", "project": "shop", "file": "schema.graphql", "payload": schema}))
        .await;
    assert_eq!(answer, json!({"message": "Successfully set component: schema.graphql"}));
    // No restart: the attribute exists, indexed over the records written before.
    let (status, found) = rest_get(&s, "/products/?stock==3").await;
    assert_eq!((status, found[0]["id"].clone()), (200, json!("p1")));
    let described = s.ok(json!({"operation": "describe_table", "database": "shop", "table": "Product"})).await;
    assert!(
        described["attributes"]
            .as_array()
            .unwrap()
            .contains(&json!({"attribute": "stock", "type": "Int", "indexed": true})),
        "{described}"
    );
    assert_eq!(rest_put(&s, "/products/p3", json!({"stock": "many"})).await, 400, "the new type is enforced");
    let file = s.ok(json!({"operation": "get_component_file", "project": "shop", "file": "schema.graphql"})).await;
    assert!(file["message"].as_str().unwrap().contains("stock: Int @indexed"));
    s.fails(
        json!({"operation": "get_component_file", "project": "shop", "file": "../../lyre-config.yaml"}),
        400,
        "Invalid file path",
    )
    .await;
    s.fails(
        json!({"operation": "get_component_file", "project": "shop", "file": "nope.txt"}),
        404,
        "Component file not found 'shop/nope.txt'",
    )
    .await;
}

#[tokio::test]
async fn components_deploy_and_drop_at_run_time() {
    let s = shop().await;
    let widget = "type Widget @table(database: \"tools\") @export { id: ID @primaryKey\n name: String @indexed }\n";
    assert_eq!(rest_get(&s, "/Widget/").await.0, 404);
    let answer = s.ok(json!({"operation": "deploy_component", "project": "widgets", "payload": payload(&[("config.yaml", SHOP_CONFIG), ("schema.graphql", widget)])})).await;
    assert_eq!(answer, json!({"message": "Successfully deployed: widgets"}));
    assert_eq!(rest_put(&s, "/Widget/w1", json!({"name": "spanner"})).await, 204);
    assert_eq!(rest_get(&s, "/Widget/w1").await, (200, json!({"id": "w1", "name": "spanner"})));
    let listed = s.ok(json!({"operation": "get_components"})).await;
    let names: Vec<&str> = listed["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shop", "widgets"]);
    assert_eq!(listed["entries"][1]["status"]["status"], "healthy");
    assert_eq!(listed["entries"][1]["entries"][1]["name"], "schema.graphql");
    // Packaging gives back what was deployed.
    let packaged = s.ok(json!({"operation": "package_component", "project": "widgets"})).await;
    let archive = base64::engine::general_purpose::STANDARD.decode(packaged["payload"].as_str().unwrap()).unwrap();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&archive[..]));
    let names: Vec<String> =
        tar.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
    assert!(names.contains(&"schema.graphql".to_string()), "{names:?}");
    // A redeploy replaces the files and applies at once.
    let widget2 = widget.replace("name: String @indexed", "name: String @indexed\n size: Int @indexed");
    s.ok(json!({"operation": "deploy_component", "project": "widgets", "payload": payload(&[("schema.graphql", widget2.as_str())])})).await;
    assert_eq!(rest_put(&s, "/Widget/w2", json!({"name": "bolt", "size": 3})).await, 204);
    assert_eq!(rest_get(&s, "/Widget/?size==3").await.1[0]["id"], "w2");
    assert_eq!(
        s.ok(json!({"operation": "drop_component", "project": "widgets"})).await,
        json!({"message": "Successfully dropped: widgets"})
    );
    assert_eq!(rest_get(&s, "/Widget/w1").await.0, 404, "a dropped component stops serving");
    let data = s.ok(json!({"operation": "search_by_id", "database": "tools", "table": "Widget", "ids": ["w1"]})).await;
    assert_eq!(data[0]["name"], "spanner", "its tables and data stay");
    s.fails(json!({"operation": "drop_component", "project": "widgets"}), 404, "Unable to locate 'widgets'").await;
    s.fails(
        json!({"operation": "deploy_component", "project": "../x", "payload": payload(&[])}),
        400,
        "Project name can only contain alphanumeric, dash and underscores characters",
    )
    .await;
    s.fails(
        json!({"operation": "deploy_component", "project": "bad"}),
        400,
        "Either payload or package must be provided",
    )
    .await;
    let (status, body) =
        s.op(json!({"operation": "deploy_component", "project": "bad", "payload": "bm90IGEgdGFy"})).await;
    assert_eq!(status, 400, "{body}");
    // The local-package form.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("schema.graphql"), "type Gadget @table @export { id: ID @primaryKey }").unwrap();
    s.ok(json!({"operation": "deploy_component", "project": "gadgets", "package": dir.path().to_str().unwrap()})).await;
    assert_eq!(rest_get(&s, "/Gadget/").await, (200, json!([])));
    s.ok(json!({"operation": "add_component", "project": "fresh"})).await;
    s.fails(json!({"operation": "add_component", "project": "fresh"}), 400, "Project already exists").await;
}

#[tokio::test]
async fn a_malformed_schema_fails_only_its_component() {
    let broken = "type Broken @table @export {\n  id: ID @primaryKey\n  thing: Nope\n}\n";
    let s = TestServer::start_app(
        &[
            ("components/shop/config.yaml", SHOP_CONFIG),
            ("components/shop/schema.graphql", SHOP_SCHEMA),
            ("components/broken/schema.graphql", broken),
        ],
        &[],
    )
    .await;
    assert_eq!(rest_put(&s, "/products/p1", json!({"name": "still serving"})).await, 204);
    assert_eq!(rest_get(&s, "/Broken/").await.0, 404);
    let listed = s.ok(json!({"operation": "get_components"})).await;
    let broken_status = &listed["entries"][0]["status"];
    assert_eq!(broken_status["status"], "error");
    let reason = broken_status["message"].as_str().unwrap();
    assert!(reason.contains("broken/schema.graphql:3:") && reason.contains("unknown type Nope"), "{reason}");
    // A bad deploy is refused with the file and line, and the rest keeps serving.
    let (status, body) = s.op(json!({"operation": "deploy_component", "project": "late", "payload": payload(&[("schema.graphql", "type X @table(expiration: \"soon\") { id: ID @primaryKey }")])})).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("schema.graphql:1:"), "{body}");
    assert_eq!(rest_get(&s, "/products/p1").await.1["name"], "still serving");
}

#[tokio::test]
async fn lyre_dev_serves_one_application_directory() {
    let app = tempfile::tempdir().unwrap();
    let dir = app.path().join("myapp");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("schema.graphql"), "type Note @table @export { id: ID @primaryKey text: String }").unwrap();
    let s = TestServer::start_dev(&dir).await;
    assert_eq!(rest_put(&s, "/Note/n1", json!({"text": "hello"})).await, 204);
    assert_eq!(rest_get(&s, "/Note/n1").await, (200, json!({"id": "n1", "text": "hello"})));
}

/// A component's install command runs before its schema loads; one that outlives
/// its timeout has its whole process tree killed and fails only its component.
#[tokio::test]
async fn install_commands_are_bounded_and_their_trees_killed() {
    let hanging = "install:\n  command: \"sleep 60 & echo $! > bg.pid; sleep 60\"\n  timeout: 1\n";
    let working = "install:\n  command: \"echo built > built.txt\"\n";
    let s = TestServer::start_app(
        &[
            ("components/hangs/config.yaml", hanging),
            ("components/hangs/schema.graphql", "type Hung @table @export { id: ID @primaryKey }"),
            ("components/builds/config.yaml", working),
            ("components/builds/schema.graphql", "type Built @table @export { id: ID @primaryKey }"),
        ],
        &[],
    )
    .await;
    assert_eq!(rest_get(&s, "/Built/").await, (200, json!([])));
    assert_eq!(std::fs::read_to_string(s.root().join("components/builds/built.txt")).unwrap(), "built\n");
    assert_eq!(rest_get(&s, "/Hung/").await.0, 404);
    let listed = s.ok(json!({"operation": "get_components"})).await;
    let hangs = listed["entries"].as_array().unwrap().iter().find(|e| e["name"] == "hangs").unwrap();
    let reason = hangs["status"]["message"].as_str().unwrap();
    assert!(reason.contains("ran past its 1 s timeout; its processes were killed"), "{reason}");
    let pid = std::fs::read_to_string(s.root().join("components/hangs/bg.pid")).unwrap();
    // SIGKILL is delivered asynchronously: allow the kernel a moment to finish it.
    let stat = || std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    // Alive: it has a /proc entry that is not a zombie's (a process already reaped has
    // no entry at all: gone, not alive).
    let alive = |stat: &str| {
        !stat.is_empty() && stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive(&stat()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let last = stat();
    assert!(!alive(&last), "the background process of a timed-out install outlived it: {last}");
}

#[tokio::test]
async fn component_files_stay_inside_and_a_failed_deploy_keeps_the_working_version() {
    let s = TestServer::start().await;
    let widget = "type Widget @table(database: \"w\") @export { id: ID @primaryKey name: String }";
    let deploy = |files: &[(&str, &str)]| json!({"operation": "deploy_component", "project": "widgets", "payload": payload(files)});
    s.ok(deploy(&[("config.yaml", SHOP_CONFIG), ("schema.graphql", widget)])).await;
    assert_eq!(rest_put(&s, "/Widget/1", json!({"name": "one"})).await, 204);

    // A version that does not load is refused, and the working one keeps serving.
    let (status, body) =
        s.op(deploy(&[("config.yaml", SHOP_CONFIG), ("schema.graphql", "type Broken @table {")])).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(rest_get(&s, "/Widget/1").await.0, 200);
    let schema = s.ok(json!({"operation": "get_component_file", "project": "widgets", "file": "schema.graphql"})).await;
    assert_eq!(schema["message"], widget);
    // One that parses but cannot be applied (it changes Widget's primary key) is
    // refused whole: the new table it declares first is not created either.
    let regrip = "type Gadget @table(database: \"w\") @export { id: ID @primaryKey }\ntype Widget @table(database: \"w\") @export { code: ID @primaryKey }";
    let (status, body) = s.op(deploy(&[("config.yaml", SHOP_CONFIG), ("schema.graphql", regrip)])).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("a schema cannot change it to 'code'"), "{body}");
    let (status, _) = s.op(json!({"operation": "describe_table", "database": "w", "table": "Gadget"})).await;
    assert_eq!(status, 404, "nothing of the refused schema was applied");
    assert_eq!(rest_get(&s, "/Widget/1").await.0, 200);

    // Paths name something inside the project, never the project itself, and never
    // pass through a link to elsewhere.
    s.fails(json!({"operation": "drop_component", "project": "widgets", "file": "."}), 400, "Invalid file path").await;
    let outside = s.root().parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "untouched").unwrap();
    std::os::unix::fs::symlink(&outside, s.root().join("components/widgets/link")).unwrap();
    let through_link =
        json!({"operation": "set_component_file", "project": "widgets", "file": "link", "payload": "changed"});
    s.fails(through_link, 400, "'link' is a symbolic link").await;
    let (status, _) = s.op(json!({"operation": "get_component_file", "project": "widgets", "file": "link"})).await;
    assert_eq!(status, 400);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
    // A directory where a file is meant is the client's mistake.
    let (status, body) =
        s.op(json!({"operation": "set_component_file", "project": "widgets", "file": ".", "payload": "x"})).await;
    assert_eq!(status, 400, "{body}");
    s.ok(json!({"operation": "set_component_file", "project": "widgets", "file": "dir/a.txt", "payload": "a"})).await;
    let (status, body) =
        s.op(json!({"operation": "set_component_file", "project": "widgets", "file": "dir", "payload": "x"})).await;
    assert_eq!(status, 400, "{body}");
    // A FIFO is neither read nor written (either would block).
    let fifo = s.root().join("components/widgets/pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let write = json!({"operation": "set_component_file", "project": "widgets", "file": "pipe", "payload": "x"});
    s.fails(write, 400, "the path names something other than a regular file").await;
    let (status, _) = s.op(json!({"operation": "get_component_file", "project": "widgets", "file": "pipe"})).await;
    assert_eq!(status, 404);

    // Binary files travel as base64; unknown encodings are refused.
    let binary = base64::engine::general_purpose::STANDARD.encode((0u8..=255).collect::<Vec<u8>>());
    s.ok(json!({"operation": "set_component_file", "project": "widgets", "file": "bytes.bin", "payload": binary, "encoding": "base64"})).await;
    let back = s
        .ok(json!({"operation": "get_component_file", "project": "widgets", "file": "bytes.bin", "encoding": "base64"}))
        .await;
    assert_eq!((back["message"].as_str(), back["size"].as_i64()), (Some(binary.as_str()), Some(256)));
    s.fails(
        json!({"operation": "get_component_file", "project": "widgets", "file": "bytes.bin", "encoding": "hex"}),
        400,
        "'encoding' must be utf8 or base64, not 'hex'",
    )
    .await;

    // A package is never read from /proc, /sys or /dev (their files can block forever).
    let (status, body) = s.op(json!({"operation": "deploy_component", "project": "p", "package": "/proc"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is not read"), "{body}");
    // Nor through a path that resolves elsewhere (/proc/self/cwd is the server's own
    // working directory).
    let (status, body) =
        s.op(json!({"operation": "deploy_component", "project": "p", "package": "/proc/self/cwd"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is not read"), "{body}");
    assert_eq!(rest_get(&s, "/Widget/1").await.0, 200, "still serving");

    // A component directory that is itself a symbolic link is refused by every file
    // operation: none reaches the directory it points to.
    let elsewhere = s.root().parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("secret.txt"), "untouched").unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.root().join("components/linked")).unwrap();
    let refused = [
        json!({"operation": "get_component_file", "project": "linked", "file": "secret.txt"}),
        json!({"operation": "set_component_file", "project": "linked", "file": "secret.txt", "payload": "changed"}),
        json!({"operation": "drop_component", "project": "linked", "file": "secret.txt"}),
        json!({"operation": "package_component", "project": "linked"}),
        json!({"operation": "drop_component", "project": "linked"}),
    ];
    for body in refused {
        let (status, answer) = s.op(body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("is a symbolic link"), "{body}: {answer}");
    }
    assert_eq!(std::fs::read_to_string(elsewhere.join("secret.txt")).unwrap(), "untouched");
}

/// A loopback origin for packages: `/app.tgz` is `archive`; `/huge` announces a
/// gigabyte; `/endless` streams zeros until the client hangs up; anything else 404.
async fn package_origin(archive: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let archive = archive.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let path = String::from_utf8_lossy(&buf[..n]).split(' ').nth(1).unwrap_or("").to_string();
                let _ = match path.as_str() {
                    "/app.tgz" => {
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            archive.len()
                        );
                        socket.write_all(&[head.as_bytes(), &archive].concat()).await
                    }
                    "/huge" => socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n").await,
                    "/endless" => {
                        let _ = socket.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").await;
                        let chunk = [b"100000\r\n".as_slice(), &vec![0u8; 0x100000], b"\r\n"].concat();
                        while socket.write_all(&chunk).await.is_ok() {}
                        Ok(())
                    }
                    _ => {
                        socket
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await
                    }
                };
            });
        }
    });
    port
}

#[tokio::test]
async fn a_package_deploys_from_an_http_url_within_bounds() {
    let s = TestServer::start().await;
    let tar = base64::engine::general_purpose::STANDARD
        .decode(payload(&[("config.yaml", SHOP_CONFIG), ("schema.graphql", SHOP_SCHEMA)]))
        .unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gzip, &tar).unwrap();
    let port = package_origin(gzip.finish().unwrap()).await;
    let deploy = |package: String| json!({"operation": "deploy_component", "project": "shop", "package": package});
    let answer = s.ok(deploy(format!("http://127.0.0.1:{port}/app.tgz"))).await;
    assert_eq!(answer, json!({"message": "Successfully deployed: shop"}));
    assert_eq!(rest_put(&s, "/products/p1", json!({"name": "Foo"})).await, 204);

    let refused = free_port_url();
    for (package, reason) in [
        (format!("http://127.0.0.1:{port}/gone"), "404 Not Found".to_string()),
        (format!("http://127.0.0.1:{port}/huge"), "larger than 134217728 bytes".to_string()),
        (format!("http://127.0.0.1:{port}/endless"), "larger than 134217728 bytes".to_string()),
        (refused.clone(), "refused".to_string()),
        (format!("http://user:hunter2@127.0.0.1:{port}/gone"), "http://127.0.0.1".to_string()),
        ("http://[::1".to_string(), "invalid".to_string()),
    ] {
        let (status, answer) = s.op(deploy(package.clone())).await;
        assert_eq!(status, 400, "{package}: {answer}");
        let message = answer["error"].as_str().unwrap().to_lowercase();
        assert!(message.contains("could not be downloaded") && message.contains(&reason.to_lowercase()), "{message}");
        assert!(!message.contains("hunter2"), "credentials are not repeated: {message}");
    }
    assert_eq!(rest_get(&s, "/products/p1").await.0, 200, "the working version still serves");
}

/// An HTTP URL on a port nothing listens on.
fn free_port_url() -> String {
    format!("http://127.0.0.1:{}/app.tgz", crate::support::free_port())
}
