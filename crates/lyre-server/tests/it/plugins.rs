//! The component plugins Harper loads by default: `static`, `dataLoader`, `roles`,
//! and `fastifyRoutes` refused with a clear load error.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::components::payload;
use crate::support::{PASSWORD, TestServer, USER};

const SCHEMA: &str = r#"
type Dog @table(database: "kennel") @export(name: "dogs") {
  id: ID @primaryKey
  name: String
  age: Int
}
type Cat @table(database: "kennel") @export(name: "cats") { id: ID @primaryKey name: String }
"#;

const PAGE: &str = "<!DOCTYPE html><title>kennel</title><p>0123456789</p>\n";

/// Deploys `files` as component `name`; the operation's status and answer.
async fn deploy(s: &TestServer, name: &str, files: &[(&str, &str)]) -> (u16, Value) {
    s.op(json!({"operation": "deploy_component", "project": name, "payload": payload(files)})).await
}

/// `GET path` on the REST port without credentials, with `headers`.
async fn get(s: &TestServer, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = s.client.get(s.rest(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Sends `target` exactly as written (no client normalizes its dots), with the
/// admin's credentials; the status.
async fn raw_status(s: &TestServer, target: &str) -> u16 {
    let port = s.rest("/").trim_start_matches("http://127.0.0.1:").trim_end_matches('/').to_string();
    let mut stream = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await.unwrap();
    let credentials = crate::support::basic(USER, PASSWORD);
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {credentials}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn static_files_are_served_with_index_etags_ranges_and_fallthrough() {
    let s = TestServer::start().await;
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\nstatic:\n  files: 'web/**'\n";
    let (status, answer) = deploy(
        &s,
        "kennel",
        &[
            ("config.yaml", config),
            ("schema.graphql", SCHEMA),
            ("web/index.html", PAGE),
            ("web/docs/index.html", "docs"),
            ("web/css/site.css", "body{}"),
            ("web/.env", "SECRET=1"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // Public, typed, validated.
    let page = get(&s, "/index.html", &[]).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html");
    assert_eq!(page.headers()["accept-ranges"], "bytes");
    let etag = page.headers()["etag"].to_str().unwrap().to_string();
    let modified = page.headers()["last-modified"].to_str().unwrap().to_string();
    assert_eq!(page.text().await.unwrap(), PAGE);
    assert_eq!(get(&s, "/", &[]).await.text().await.unwrap(), PAGE, "the root's index");
    assert_eq!(get(&s, "/css/site.css", &[]).await.headers()["content-type"], "text/css");
    let not_modified = get(&s, "/index.html", &[("if-none-match", &etag)]).await;
    assert_eq!(not_modified.status(), 304);
    assert!(not_modified.text().await.unwrap().is_empty());
    assert_eq!(get(&s, "/index.html", &[("if-modified-since", &modified)]).await.status(), 304);
    assert_eq!(get(&s, "/index.html", &[("if-match", "\"other\"")]).await.status(), 412);

    // Ranges: one is served; one past the end is refused; several get the whole file.
    let part = get(&s, "/index.html", &[("range", "bytes=0-14")]).await;
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], format!("bytes 0-14/{}", PAGE.len()));
    assert_eq!(part.text().await.unwrap(), &PAGE[..15]);
    let tail = get(&s, "/index.html", &[("range", "bytes=-5")]).await;
    assert_eq!(tail.text().await.unwrap(), &PAGE[PAGE.len() - 5..]);
    let past = get(&s, "/index.html", &[("range", "bytes=9999-")]).await;
    assert_eq!(past.status(), 416);
    assert_eq!(past.headers()["content-range"], format!("bytes */{}", PAGE.len()));
    let several = get(&s, "/index.html", &[("range", "bytes=0-1,5-6")]).await;
    assert_eq!((several.status().as_u16(), several.text().await.unwrap()), (200, PAGE.to_string()));

    // HEAD sends the headers alone.
    let head = s.client.head(s.rest("/index.html")).send().await.unwrap();
    assert_eq!(head.headers()["content-length"], PAGE.len().to_string().as_str());
    assert!(head.text().await.unwrap().is_empty());

    // Directories: with a slash their index, without one a redirect to it.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let moved = no_redirects.get(s.rest("/docs")).send().await.unwrap();
    assert_eq!(moved.status(), 301);
    assert_eq!(moved.headers()["location"], "/docs/");
    assert_eq!(get(&s, "/docs/", &[]).await.text().await.unwrap(), "docs");

    // Dot files, paths out of the directory and component files outside the pattern
    // are never served: they fall through to REST, which knows no such table.
    let hidden = get(&s, "/.env", &[]).await;
    assert_eq!(hidden.status(), 401, "not served: REST asks for credentials");
    assert_eq!(raw_status(&s, "/.env").await, 404);
    for escape in
        ["/../schema.graphql", "/web/../config.yaml", "/%2e%2e/config.yaml", "/..%2fconfig.yaml", "/schema.graphql"]
    {
        assert_eq!(raw_status(&s, escape).await, 404, "{escape}");
    }

    // Fallthrough: the tables still answer under the same port.
    let dogs = s.client.get(s.rest("/dogs/")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(dogs.status(), 200);
    assert_eq!(get(&s, "/dogs/", &[]).await.status(), 401, "REST still needs credentials");

    // A file replaced by a symbolic link after the load is not followed.
    let outside = s.root().join("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    let css = s.root().join("components/kennel/web/css/site.css");
    std::fs::remove_file(&css).unwrap();
    std::os::unix::fs::symlink(&outside, &css).unwrap();
    let linked = get(&s, "/css/site.css", &[]).await;
    assert_eq!(linked.status(), 404);
    assert_ne!(linked.text().await.unwrap(), "secret");

    // A file changed on disk is served as it is now, with a new validator.
    let file = s.root().join("components/kennel/web/index.html");
    std::fs::write(&file, "changed").unwrap();
    let now = get(&s, "/index.html", &[("if-none-match", &etag)]).await;
    assert_eq!(now.status(), 200);
    assert_eq!(now.text().await.unwrap(), "changed");
}

#[tokio::test]
async fn a_single_page_application_gets_its_index_for_client_routes() {
    let s = TestServer::start().await;
    let config = "graphqlSchema:\n  files: '*.graphql'\nstatic:\n  files: 'dist/**'\n  urlPath: app\n  \
                  extensions: [html]\n  fallthrough: false\n  notFound:\n    file: dist/index.html\n    statusCode: 200\n";
    let files =
        [("config.yaml", config), ("schema.graphql", SCHEMA), ("dist/index.html", PAGE), ("dist/about.html", "about")];
    let (status, answer) = deploy(&s, "spa", &files).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(get(&s, "/app/about", &[]).await.text().await.unwrap(), "about", "extensions");
    let route = get(&s, "/app/pets/42/edit", &[]).await;
    assert_eq!(route.status(), 200);
    assert_eq!(route.text().await.unwrap(), PAGE);
    let dogs = s.client.get(s.rest("/dogs/")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
    assert_eq!(dogs.status(), 200, "outside the site's path, REST answers");

    // Without a notFound file, a miss under the site is a plain 404.
    let plain = config.replace("  notFound:\n    file: dist/index.html\n    statusCode: 200\n", "");
    let (status, answer) = deploy(&s, "spa", &[("config.yaml", &plain), ("dist/index.html", PAGE)]).await;
    assert_eq!(status, 200, "{answer}");
    let missing = get(&s, "/app/nothing", &[]).await;
    assert_eq!((missing.status().as_u16(), missing.text().await.unwrap()), (404, "File not found".to_string()));

    // Bad options fail the load, naming the option.
    for (bad, named) in [
        ("static:\n  files: 'dist/**'\n  urlPath: '../up'\n", "urlPath"),
        ("static:\n  files: '../**'\n", "static.files"),
        ("static:\n  files: 'dist/**'\n  notFound: missing.html\n  fallthrough: false\n", "static.notFound"),
        ("static:\n  files: 'dist/**'\n  index: sometimes\n", "index"),
    ] {
        let (status, answer) = deploy(&s, "broken", &[("config.yaml", bad), ("dist/index.html", PAGE)]).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(named), "{bad}: {answer}");
    }
}

/// `{id: record}` of every record in `path` (a REST collection).
async fn records(s: &TestServer, path: &str) -> serde_json::Map<String, Value> {
    let list: Value =
        s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD)).send().await.unwrap().json().await.unwrap();
    list.as_array().unwrap().iter().map(|r| (r["id"].as_str().unwrap().to_string(), r.clone())).collect()
}

/// Deploys the kennel with a dataLoader reading `data/`: `dogs` as its dogs file,
/// and a YAML file of toys naming no database.
async fn deploy_kennel(s: &TestServer, dogs: &str) -> (u16, Value) {
    let config = "graphqlSchema:\n  files: '*.graphql'\ndataLoader:\n  files: 'data/*'\n";
    let toys = "table: Toy\nrecords:\n  - id: t1\n    kind: ball\n  - id: t2\n    kind: rope\n";
    let files =
        [("config.yaml", config), ("schema.graphql", SCHEMA), ("data/dogs.json", dogs), ("data/toys.yaml", toys)];
    deploy(s, "kennel", &files).await
}

/// The ETags (versions) of dogs d1 to d3.
async fn versions(s: &TestServer) -> Vec<String> {
    let mut out = Vec::new();
    for id in ["d1", "d2", "d3"] {
        let (status, headers, _) = s.rest_send(reqwest::Method::GET, &format!("/dogs/{id}"), None, &[]).await;
        assert_eq!(status, 200);
        out.push(headers["etag"].to_str().unwrap().to_string());
    }
    out
}

#[tokio::test]
async fn data_files_load_once_and_leave_changed_records_alone() {
    let s = TestServer::start().await;
    let dogs = json!({"database": "kennel", "table": "Dog", "records": [
        {"id": "d1", "name": "Rex", "age": 3},
        {"id": "d2", "name": "Fido", "age": 5},
        {"id": "d3", "name": "Spot", "age": 1},
    ]})
    .to_string();
    let (status, answer) = deploy_kennel(&s, &dogs).await;
    assert_eq!(status, 200, "{answer}");
    let loaded = records(&s, "/dogs/").await;
    assert_eq!(loaded.len(), 3);
    assert_eq!(loaded["d1"]["name"], "Rex");
    // A file naming no database loads into `data`, creating the table.
    let toys = s.ok(json!({"operation": "search_by_id", "database": "data", "table": "Toy", "ids": ["t1", "t2"], "get_attributes": ["id", "kind"]})).await;
    assert_eq!(toys, json!([{"id": "t1", "kind": "ball"}, {"id": "t2", "kind": "rope"}]));

    // Redeploying the same files writes nothing: every record keeps its version.
    let before = versions(&s).await;
    let (status, answer) = deploy_kennel(&s, &dogs).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(versions(&s).await, before, "an unchanged file rewrites nothing");

    // d1 is changed through the API; then the file changes d1 and d2 and adds d4.
    s.ok(
        json!({"operation": "update", "database": "kennel", "table": "Dog", "records": [{"id": "d1", "name": "Rexy"}]}),
    )
    .await;
    s.ok(
        json!({"operation": "upsert", "database": "kennel", "table": "Dog", "records": [{"id": "d9", "name": "Mine"}]}),
    )
    .await;
    let changed = json!({"database": "kennel", "table": "Dog", "records": [
        {"id": "d1", "name": "Rex II", "age": 4},
        {"id": "d2", "name": "Fido", "age": 6},
        {"id": "d3", "name": "Spot", "age": 1},
        {"id": "d4", "name": "Lassie", "age": 7},
        {"id": "d9", "name": "From the file"},
    ]})
    .to_string();
    let (status, answer) = deploy_kennel(&s, &changed).await;
    assert_eq!(status, 200, "{answer}");
    let now = records(&s, "/dogs/").await;
    assert_eq!(now["d1"]["name"], "Rexy", "changed through the API: left alone");
    assert_eq!(now["d2"]["age"], 6, "changed in the file: updated");
    assert_eq!(now["d4"]["name"], "Lassie", "new in the file: inserted");
    assert_eq!(now["d9"]["name"], "Mine", "not written by the loader: left alone");

    // A bad record fails the load, naming the file and the record; nothing of the
    // file is written.
    let bad = json!({"database": "kennel", "table": "Dog", "records": [
        {"id": "d5", "name": "Good"},
        {"id": "d6", "name": "Bad", "age": "old"},
    ]})
    .to_string();
    let (status, answer) = deploy_kennel(&s, &bad).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains("data/dogs.json") && message.contains("record 1") && message.contains("d6"), "{message}");
    assert!(!records(&s, "/dogs/").await.contains_key("d5"), "nothing of the bad file is written");
    for (document, expected) in [
        ("{\"table\": \"Dog\"}", "missing required \"records\""),
        ("{\"table\": \"Dog\", \"records\": [{\"name\": \"no id\"}]}", "has no 'id'"),
        ("{not json", "Failed to parse data file data/dogs.json"),
    ] {
        let (status, answer) = deploy_kennel(&s, document).await;
        assert_eq!(status, 400, "{document}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(expected), "{document}: {answer}");
    }
}

#[tokio::test]
async fn roles_files_define_roles_at_each_load() {
    let s = TestServer::start().await;
    let config = "graphqlSchema:\n  files: '*.graphql'\nroles:\n  files: roles.yaml\n";
    let roles = "dog_reader:\n  kennel:\n    Dog:\n      read: true\n      attributes:\n        name:\n          read: true\n        \
                 age:\n          read: false\n";
    let (status, answer) =
        deploy(&s, "kennel", &[("config.yaml", config), ("schema.graphql", SCHEMA), ("roles.yaml", roles)]).await;
    assert_eq!(status, 200, "{answer}");
    let listed = s.ok(json!({"operation": "list_roles"})).await;
    let role = listed.as_array().unwrap().iter().find(|r| r["role"] == "dog_reader").expect("the role").clone();
    assert_eq!(role["permission"]["kennel"]["tables"]["Dog"]["read"], true);
    assert_eq!(role["permission"]["kennel"]["tables"]["Dog"]["insert"], false);
    assert_eq!(role["permission"]["kennel"]["tables"]["Dog"]["attribute_permissions"][1]["attribute_name"], "age");

    // The role works: its user reads dogs without their age, and no cats.
    s.ok(
        json!({"operation": "add_user", "username": "reader", "password": "pw", "role": "dog_reader", "active": true}),
    )
    .await;
    s.ok(json!({"operation": "upsert", "database": "kennel", "table": "Dog", "records": [{"id": "d1", "name": "Rex", "age": 3}]})).await;
    let (status, dog) = s.rest_as("reader", "pw", reqwest::Method::GET, "/dogs/d1", None).await;
    assert_eq!(status, 200, "{dog}");
    assert_eq!((dog["name"].clone(), dog.get("age").cloned()), (json!("Rex"), None));
    assert_eq!(s.rest_as("reader", "pw", reqwest::Method::GET, "/cats/", None).await.0, 403);

    // Redeploying with a change alters the role; the same file again changes nothing.
    let wider = "dog_reader:\n  kennel:\n    Dog:\n      read: true\n    Cat:\n      read: true\n";
    let (status, answer) =
        deploy(&s, "kennel", &[("config.yaml", config), ("schema.graphql", SCHEMA), ("roles.yaml", wider)]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(s.rest_as("reader", "pw", reqwest::Method::GET, "/cats/", None).await.0, 200);
    let roles_now = s.ok(json!({"operation": "list_roles"})).await;
    assert_eq!(roles_now.as_array().unwrap().iter().filter(|r| r["role"] == "dog_reader").count(), 1);
    let stored = |roles: &Value| roles.as_array().unwrap().iter().find(|r| r["role"] == "dog_reader").cloned();
    let (status, answer) =
        deploy(&s, "kennel", &[("config.yaml", config), ("schema.graphql", SCHEMA), ("roles.yaml", wider)]).await;
    assert_eq!(status, 200, "{answer}");
    let again = s.ok(json!({"operation": "list_roles"})).await;
    assert_eq!(stored(&again), stored(&roles_now), "the same file again writes nothing (its times stand)");

    // A load that fails on a later file applies no role at all.
    let dogs_config =
        "graphqlSchema:\n  files: '*.graphql'\nroles:\n  files: roles.yaml\ndataLoader:\n  files: 'data/*'\n";
    let (status, answer) = deploy(
        &s,
        "kennel",
        &[
            ("config.yaml", dogs_config),
            ("schema.graphql", SCHEMA),
            ("roles.yaml", "temporary:\n  kennel:\n    Dog:\n      read: true\n"),
            ("data/dogs.json", r#"{"database": "kennel", "table": "Dog", "records": [{"id": "x", "age": "old"}]}"#),
        ],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let after = s.ok(json!({"operation": "list_roles"})).await;
    assert!(!after.to_string().contains("temporary"), "{after}");

    // A role naming a table nobody defined, or a file that is not a map, fails the load.
    for (bad, named) in
        [("ghost:\n  kennel:\n    Ghost:\n      read: true\n", "role 'ghost'"), ("- just\n- a list\n", "roles.yaml")]
    {
        let (status, answer) =
            deploy(&s, "kennel", &[("config.yaml", config), ("schema.graphql", SCHEMA), ("roles.yaml", bad)]).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(named), "{bad}: {answer}");
    }
}

#[tokio::test]
async fn fastify_routes_are_refused_by_name_only_when_there_are_some() {
    let s = TestServer::start().await;
    // Harper's default configuration names routes/*.js: a component without any
    // loads, and its web/ files are served.
    let (status, answer) = deploy(&s, "plain", &[("schema.graphql", SCHEMA), ("web/hello.txt", "hi")]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(get(&s, "/hello.txt", &[]).await.text().await.unwrap(), "hi");
    let (status, answer) =
        deploy(&s, "routes", &[("schema.graphql", SCHEMA), ("routes/index.js", "export default async () => {}")]).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains("fastifyRoutes") && message.contains("routes/index.js"), "{message}");
}

#[tokio::test]
async fn a_record_changed_while_its_file_loads_is_not_overwritten() {
    // The loader's first three writes (the first deploy's two files, then the
    // second deploy's dogs) wait 1.5 s between reading the records and writing them
    // (on a request thread: the server gets two); a change through the API lands
    // in the last gap.
    let s =
        TestServer::start_with(&[("LYRE_FAILPOINT", "stall:data-loader-write=1500*3"), ("THREADS_COUNT", "2")]).await;
    let first = json!({"database": "kennel", "table": "Dog", "records": [{"id": "d1", "name": "Rex", "age": 3}]});
    let (status, answer) = deploy_kennel(&s, &first.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let changed = json!({"database": "kennel", "table": "Dog", "records": [{"id": "d1", "name": "Rex", "age": 4}]});
    let changed = changed.to_string();
    let loading = deploy_kennel(&s, &changed);
    let meanwhile = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        s.ok(json!({"operation": "update", "database": "kennel", "table": "Dog", "records": [{"id": "d1", "name": "Mine"}]}))
            .await
    };
    let ((status, answer), _) = tokio::join!(loading, meanwhile);
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("changed while the file was loading"), "{answer}");
    let now = records(&s, "/dogs/").await;
    assert_eq!((now["d1"]["name"].clone(), now["d1"]["age"].clone()), (json!("Mine"), json!(3)));
}
