//! The web console, driven in a real headless Chromium through ChromeDriver (Debian's
//! `chromium` and `chromium-driver`, which `.ci/test` installs), and its two reads
//! over plain HTTP.
//!
//! Each browser test takes a screenshot of every page it visits; with
//! `LYRE_CONSOLE_SCREENSHOTS=<dir>` they are kept there (the README's come from
//! `docs/console/`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER, basic, free_port};

/// How long the page may take to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(15);

/// ChromeDriver with a headless Chromium session; both stop when dropped.
struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: tempfile::TempDir,
    shots: Option<PathBuf>,
}

impl Browser {
    async fn open() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (Debian's chromium-driver; .ci/test installs it)");
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
            "unhandledPromptBehavior": "accept",
        });
        let mut capabilities = capabilities;
        capabilities["goog:chromeOptions"]["prefs"] = json!({
            "download.default_directory": profile.path().join("downloads"),
            "download.prompt_for_download": false,
        });
        let serde_json::Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let started = Instant::now();
        let client = loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(_) if started.elapsed() < PATIENCE => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(err) => panic!("no ChromeDriver session: {err}"),
            }
        };
        let shots = std::env::var_os("LYRE_CONSOLE_SCREENSHOTS").map(PathBuf::from);
        Browser { client: Some(client), driver, profile, shots }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    /// The first element `xpath` finds, once there is one.
    async fn find(&self, xpath: &str) -> fantoccini::elements::Element {
        self.find_within(xpath, PATIENCE).await
    }

    /// The first element `xpath` finds, waiting at most `limit` for one.
    async fn find_within(&self, xpath: &str, limit: Duration) -> fantoccini::elements::Element {
        match self.client().wait().at_most(limit).for_element(Locator::XPath(xpath)).await {
            Ok(element) => element,
            Err(err) => {
                let page = self.client().source().await.unwrap_or_default();
                panic!("nothing matched {xpath} in time ({err}); the page:\n{page}")
            }
        }
    }

    /// Clicks what `xpath` finds; found again if the page replaced it in between
    /// (a table re-rendered under the pointer).
    async fn click(&self, xpath: &str) {
        let started = Instant::now();
        loop {
            match self.find(xpath).await.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(err))
                    if err.error == fantoccini::error::ErrorStatus::StaleElementReference
                        && started.elapsed() < PATIENCE => {}
                Err(err) => panic!("clicking {xpath}: {err}"),
            }
        }
    }

    /// Clicks the button whose text is `text` (inside `within`, an XPath).
    async fn press(&self, within: &str, text: &str) {
        self.click(&format!("{within}//button[normalize-space()='{text}']")).await;
    }

    /// Types `text` into the control labelled `label` (its text starts so), replacing what it held.
    async fn type_into(&self, within: &str, label: &str, text: &str) {
        self.replace(
            &format!("{within}//label[starts-with(normalize-space(), '{label}')]//*[self::input or self::textarea]"),
            text,
        )
        .await;
    }

    /// Types `text` into the control `xpath` finds, replacing what it held.
    async fn replace(&self, xpath: &str, text: &str) {
        let control = self.find(xpath).await;
        control.clear().await.unwrap();
        control.send_keys(text).await.unwrap();
    }

    /// The text of the first alert (an error the page shows) inside `within`.
    async fn alert(&self, within: &str) -> String {
        self.find(&format!("{within}//div[@role='alert']")).await.text().await.unwrap()
    }

    /// Waits until the page shows `text` somewhere inside `within`.
    async fn sees(&self, within: &str, text: &str) -> fantoccini::elements::Element {
        self.find(&format!("{within}//*[contains(text(), '{text}')]")).await
    }

    /// Waits until `xpath` matches nothing.
    async fn gone(&self, xpath: &str) {
        let started = Instant::now();
        while !self.client().find_all(Locator::XPath(xpath)).await.unwrap().is_empty() {
            assert!(started.elapsed() < PATIENCE, "{xpath} is still on the page");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn go(&self, url: &str) {
        self.client().goto(url).await.unwrap();
    }

    /// Signs in through the console's dialog.
    async fn sign_in(&self, user: &str, password: &str) {
        let dialog = "//dialog[@id='sign-in' and @open]";
        self.type_into(dialog, "Username", user).await;
        // Enter submits: the form works from the keyboard.
        self.type_into(dialog, "Password", &format!("{password}\u{E007}")).await;
        self.sees("//header", &format!("{user} (")).await;
        self.gone(dialog).await;
    }

    /// A screenshot of the window, kept as `<name>.png` when screenshots are asked for.
    async fn shot(&self, name: &str) {
        let png = self.client().screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 4096, "{name}: not a screenshot");
        if let Some(dir) = &self.shots {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
        }
    }

    /// The text of the file the browser downloaded as `name`, once it is there.
    async fn downloaded(&self, name: &str) -> String {
        let path = self.profile.path().join("downloads").join(name);
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                return text;
            }
            assert!(started.elapsed() < PATIENCE, "{name} was not downloaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the page's script answers for `expression`.
    async fn eval(&self, expression: &str) -> Value {
        self.client().execute(&format!("return {expression};"), Vec::new()).await.unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Ending the session stops Chromium; ChromeDriver is killed after.
            let ended = std::thread::spawn(move || {
                if let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    let _ = runtime.block_on(client.close());
                }
            });
            let _ = ended.join();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_builds_a_table_edits_records_queries_and_watches() {
    // Info entries, so the logs page has the server's start to show.
    let s = TestServer::start_with(&[("LOGGING_LEVEL", "info")]).await;
    let browser = Browser::open().await;
    browser.go(&s.url("/")).await;
    browser.find("//dialog[@id='sign-in' and @open]").await;
    browser.shot("sign-in").await;
    browser.sign_in(USER, PASSWORD).await;

    // A database and a table, made in the page.
    browser.type_into("//main", "New database", "shop").await;
    browser.press("//main", "Create database").await;
    let shop = "//section[@aria-label='Database shop']";
    browser.type_into(shop, "New table", "product").await;
    browser.type_into(shop, "Attributes", "name:String, price:Float").await;
    browser.press(shop, "Create table").await;
    browser.find(&format!("{shop}//a[normalize-space()='product']")).await;
    let described = s.ok(json!({"operation": "describe_table", "database": "shop", "table": "product"})).await;
    let attributes: Vec<&str> =
        described["attributes"].as_array().unwrap().iter().filter_map(|a| a["attribute"].as_str()).collect();
    assert!(attributes.contains(&"name") && attributes.contains(&"price"), "{described}");
    browser.shot("databases").await;

    // A record inserted, then edited, in the records page.
    browser.click(&format!("{shop}//a[normalize-space()='product']")).await;
    browser.press("//main", "Insert a record").await;
    browser.replace("//textarea[@aria-label='New record as JSON']", r#"{"id": 1, "name": "Lamp", "price": 20}"#).await;
    browser.press("//main", "Insert record").await;
    browser.find("//table//td[normalize-space()='Lamp']").await;
    browser.click("//button[@aria-label='Edit record 1']").await;
    browser.replace("//textarea[@aria-label='Record 1 as JSON']", r#"{"id": 1, "price": 25.5}"#).await;
    browser.press("//main", "Save record").await;
    browser.find("//table//td[normalize-space()='25.5']").await;
    let stored = s.ok(json!({"operation": "search_by_id", "database": "shop", "table": "product", "ids": [1], "get_attributes": ["*"]})).await;
    assert_eq!(stored[0]["name"], "Lamp", "the edit kept what it left out: {stored}");
    assert_eq!(stored[0]["price"], 25.5, "the edit reached the table: {stored}");

    // REST's grammar filters the page.
    s.ok(json!({"operation": "insert", "database": "shop", "table": "product", "records": [{"id": 2, "name": "Desk", "price": 90}]}))
        .await;
    browser.type_into("//main", "Filter", "price=gt=50").await;
    browser.press("//main", "Apply").await;
    browser.find("//table//td[normalize-space()='Desk']").await;
    browser.gone("//table//td[normalize-space()='Lamp']").await;
    browser.shot("records").await;

    // On a phone's screen the page does not overflow sideways (wide tables scroll inside).
    browser.client().set_window_size(390, 844).await.unwrap();
    browser.find("//table//td[normalize-space()='Desk']").await;
    let overflow = browser.eval("document.documentElement.scrollWidth - document.documentElement.clientWidth").await;
    assert_eq!(overflow, json!(0), "the page is wider than a phone's screen");
    browser.shot("phone-records").await;
    browser.client().set_window_size(1280, 900).await.unwrap();

    // A bad filter is shown, naming the problem.
    browser.type_into("//main", "Filter", "price=gt=cheap").await;
    browser.press("//main", "Apply").await;
    let problem = browser.alert("//main").await;
    assert!(!problem.trim().is_empty() && problem.contains("price"), "{problem}");

    // SQL, answered as a table with its timing.
    browser.go(&s.url("/#/query")).await;
    browser
        .replace("//textarea[@aria-label='SQL statement']", "SELECT name, price FROM shop.product ORDER BY price")
        .await;
    browser.press("//main", "Run SQL").await;
    browser.find("//table//td[normalize-space()='Desk']").await;
    let timing = browser.find("//p[@data-timing]").await.text().await.unwrap();
    assert!(timing.starts_with("2 rows in ") && timing.ends_with(" ms"), "{timing}");
    browser.shot("query").await;

    // The live view shows a change committed after it opened.
    browser.go(&s.url("/#/live/shop/product")).await;
    browser.sees("//main", "Watching").await;
    s.ok(json!({"operation": "insert", "database": "shop", "table": "product", "records": [{"id": 3, "name": "Chair", "price": 40}]}))
        .await;
    let event = browser.find("//li[contains(@class, 'event')]").await.text().await.unwrap();
    assert!(event.contains("Chair") && event.contains("put"), "{event}");
    browser.shot("live").await;

    // Logs, a metrics chart, jobs, components and configuration show.
    browser.go(&s.url("/#/logs")).await;
    browser.find("//table//td[contains(., 'Lyre is running')]").await;
    // Followed, the page shows an entry written after it opened.
    browser.click("//label[contains(., 'Follow')]/input").await;
    // Past the reload that ticking Follow makes at once: what shows next comes from following.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    s.ok(json!({"operation": "set_configuration", "http_cors": false})).await;
    browser.find("//table//td[contains(., 'the configuration file changed')]").await;
    browser.shot("logs").await;
    browser.go(&s.url("/#/metrics")).await;
    browser.find("//figure[figcaption='Requests per second']").await;
    // Traffic between samples, then the rate chart becomes a line over time (two
    // points or more: a space between pairs in the polyline).
    for _ in 0..100 {
        s.ok(json!({"operation": "describe_table", "database": "shop", "table": "product"})).await;
    }
    browser
        .find("//figure[figcaption='Requests per second']//*[local-name()='polyline'][contains(normalize-space(@points), ' ')]")
        .await;
    browser.shot("metrics").await;
    // An interval with nothing to measure is a gap in its chart, never a zero: a
    // quantile or a mean over no observations is null, the line breaks there (a lone
    // measured interval is a dot), and the legend says the newest interval was idle.
    let gaps = browser
        .eval(
            r#"Promise.all([import('/console/chart.js'), import('/console/pages/metrics.js')]).then(([{ lineChart }, { quantile, mean }]) => {
                const sample = ([time, count, sum, fast]) => ({ time, metrics: {
                    d_bucket: [{ labels: { le: '0.005' }, value: fast }, { labels: { le: '+Inf' }, value: count }],
                    d_count: [{ labels: {}, value: count }], d_sum: [{ labels: {}, value: sum }] } });
                const samples = [[0, 0, 0, 0], [1, 4, 1, 4], [2, 4, 1, 4], [3, 6, 3, 5], [4, 6, 3, 5]].map(sample);
                const p50 = quantile(samples, 'd', 0.5);
                const average = mean(samples, 'd');
                const latency = lineChart({ title: 'latency', series: [{ name: 'p50', points: [...p50, [5, 0.002], [6, 0.003]] }], idle: 'no requests' });
                const batches = lineChart({ title: 'batches', series: [{ name: 'mean', points: average }], idle: 'no commits' });
                return {
                    p50, average,
                    lines: [...latency.querySelectorAll('polyline')].map((line) => line.getAttribute('points').split(' ').length),
                    dots: latency.querySelectorAll('circle').length,
                    legend: batches.querySelector('.legend').textContent,
                };
            })"#,
        )
        .await;
    assert_eq!(
        gaps,
        json!({
            "p50": [[1, 0.005], [2, null], [3, 0.005], [4, null]],
            "average": [[1, 0.25], [2, null], [3, 1], [4, null]],
            "lines": [2],
            "dots": 2,
            "legend": "mean: no commits",
        })
    );
    s.ok(json!({"operation": "csv_data_load", "database": "shop", "table": "product", "data": "id,name,price\n4,Shelf,30\n"}))
        .await;
    browser.go(&s.url("/#/jobs")).await;
    browser.find("//table//td[normalize-space()='csv_data_load']").await;
    browser.shot("jobs").await;
    s.ok(json!({"operation": "add_component", "project": "storefront"})).await;
    browser.go(&s.url("/#/components")).await;
    browser.press("//section[@aria-label='Component storefront']", "schema.graphql").await;
    browser.find("//textarea[@aria-label='storefront/schema.graphql']").await;
    browser.shot("components").await;
    browser.go(&s.url("/#/config")).await;
    let level = "//input[@aria-label='logging_level']";
    browser.replace(level, "loud").await;
    browser.press("//main", "Save changes").await;
    let refused = browser.alert("//main").await;
    assert!(refused.contains("'logging_level' must be one of"), "an invalid level is refused, naming it: {refused}");
    browser.shot("config").await;
    // A valid change is written, and a restart from the page applies it.
    browser.replace(level, "info").await;
    browser.replace("//input[@aria-label='http_compressionThreshold']", "2000").await;
    browser.press("//main", "Save changes").await;
    browser.sees("//main", "Changed: http.compressionThreshold").await;
    browser.press("//main", "Restart Lyre").await;
    // A restart reopens everything; on a loaded machine that takes a while (the
    // admin tests allow a minute too).
    browser.find_within("//main//*[contains(text(), 'Lyre is back.')]", Duration::from_secs(60)).await;
    let status = s.ok(json!({"operation": "get_status"})).await;
    assert_eq!(status["restartRequired"], false, "the restart happened: {status}");
    let config = s.ok(json!({"operation": "get_configuration"})).await;
    assert_eq!(config["http"]["compressionThreshold"], 2000);
}

/// A role edited in the console keeps what its grid does not show (structure rights
/// on named databases) and the attribute permissions of tables left alone; a table's
/// attribute permissions edited there then narrow what the role's user reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_edited_in_the_console_keeps_and_edits_its_attribute_permissions() {
    let s = TestServer::start().await;
    for (database, table) in [("shop", "product"), ("shop", "payroll"), ("shop", "gone"), ("archive", "old")] {
        s.ok(json!({"operation": "create_table", "database": database, "table": table, "primary_key": "id"})).await;
    }
    s.ok(json!({"operation": "insert", "database": "shop", "table": "product", "records": [{"id": 1, "name": "Lamp", "price": 30}]}))
        .await;
    s.ok(json!({"operation": "insert", "database": "shop", "table": "payroll", "records": [{"id": 1, "name": "Ann", "salary": 100}]}))
        .await;
    let attribute =
        |name: &str, read: bool| json!({"attribute_name": name, "read": read, "insert": false, "update": false});
    let payroll = json!({"read": true, "insert": false, "update": false, "delete": false,
        "attribute_permissions": [attribute("id", true), attribute("name", true), attribute("salary", false)]});
    s.ok(
        json!({"operation": "add_role", "role": "clerk", "permission": {"super_user": false, "structure_user": ["archive"],
        "shop": {"tables": {
            "product": {"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []},
            "payroll": payroll,
            "gone": {"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []}}}}}),
    )
    .await;
    // A table the role names is dropped: the role still names it, and the server would
    // refuse the role saved with it.
    s.ok(json!({"operation": "drop_table", "database": "shop", "table": "gone"})).await;
    s.ok(json!({"operation": "add_user", "username": "cleo", "password": "secret-2", "role": "clerk", "active": true}))
        .await;
    let clerk = || async {
        let roles = s.ok(json!({"operation": "list_roles"})).await;
        roles.as_array().unwrap().iter().find(|r| r["role"] == "clerk").expect("the role").clone()
    };

    let browser = Browser::open().await;
    // The role's editor opened, with `table`'s attribute permissions shown.
    let edit_attributes = |table: &'static str| {
        let browser = &browser;
        async move {
            browser.click("//button[@aria-label='Edit role clerk']").await;
            browser.click(&format!("//tr[th='{table}']//summary")).await;
        }
    };
    browser.go(&s.url("/#/roles")).await;
    browser.sign_in(USER, PASSWORD).await;
    // One action ticked on another table: the rest of the role is saved as it was.
    browser.click("//button[@aria-label='Edit role clerk']").await;
    // Its structure database's tables say the role may do everything there.
    browser.sees("//tr[th='archive.old']", "everything, as a structure user of archive").await;
    browser.click("//input[@aria-label='insert shop.product']").await;
    browser.press("//main", "Save role").await;
    browser.sees("//body", "Role clerk saved, without what no longer exists: shop.gone").await;
    let saved = clerk().await;
    assert!(saved["permission"]["shop"]["tables"].get("gone").is_none(), "{saved}");
    assert_eq!(saved["permission"]["shop"]["tables"]["product"]["insert"], true, "{saved}");
    assert_eq!(saved["permission"]["shop"]["tables"]["payroll"], payroll, "{saved}");
    assert_eq!(saved["permission"]["structure_user"], json!(["archive"]), "{saved}");

    // The product's attributes restricted in the page: price no longer readable.
    browser.find("//td[contains(., 'shop.product: read, insert')]").await;
    edit_attributes("shop.product").await;
    browser.click("//input[@aria-label='restrict shop.product by attribute']").await;
    browser.click("//input[@aria-label='read shop.product.price']").await;
    browser.shot("role-attributes").await;
    browser.press("//main", "Save role").await;
    browser.find("//td[contains(., 'shop.product: read, insert (by attribute)')]").await;
    let saved = clerk().await;
    let listed = &saved["permission"]["shop"]["tables"]["product"]["attribute_permissions"];
    let price = listed.as_array().unwrap().iter().find(|p| p["attribute_name"] == "price").expect("price is listed");
    let name = listed.as_array().unwrap().iter().find(|p| p["attribute_name"] == "name").expect("name is listed");
    assert_eq!((price["read"].clone(), name["read"].clone()), (json!(false), json!(true)), "{listed}");
    assert_eq!(saved["permission"]["shop"]["tables"]["payroll"], payroll, "{saved}");
    // An attribute cannot be given what its table does not allow: its box is off
    // while the table's is, and comes on with it.
    edit_attributes("shop.product").await;
    let name_update = "document.querySelector('input[aria-label=\"update shop.product.name\"]').disabled";
    assert_eq!(browser.eval(name_update).await, json!(true));
    browser.click("//input[@aria-label='update shop.product']").await;
    assert_eq!(browser.eval(name_update).await, json!(false));
    browser.press("//main", "Cancel").await;
    // Restricting a table with nothing ticked saves a list allowing nothing (an empty
    // list would allow every attribute).
    edit_attributes("archive.old").await;
    browser.click("//input[@aria-label='restrict archive.old by attribute']").await;
    browser.press("//main", "Save role").await;
    browser.gone("//h2[normalize-space()='Edit role clerk']").await;
    let saved = clerk().await;
    let old = &saved["permission"]["archive"]["tables"]["old"]["attribute_permissions"];
    assert!(
        old.as_array().is_some_and(|list| !list.is_empty()
            && list.iter().all(|p| p["read"] == false && p["insert"] == false && p["update"] == false)),
        "{saved}"
    );
    // A role the server refuses is shown with its reasons, not only the headline.
    let refused = browser
        .eval(
            "import('/console/api.js').then(({ op }) => op('add_role', { role: 'bad', permission: { super_user: false, nowhere: { tables: {} } } })\
             .then(() => 'accepted', (error) => error.message))",
        )
        .await;
    assert_eq!(refused, json!("Errors in the role permissions JSON provided: database 'nowhere' does not exist"));
    // A super user made in the page (tables exist) is saved as one: nothing beside it.
    browser.press("//main", "Add a role").await;
    browser.type_into("//main", "Role name", "boss").await;
    browser.click("//label[contains(., 'Super user')]/input").await;
    browser.press("//main", "Save role").await;
    browser.find("//table//td[normalize-space()='boss']").await;
    let roles = s.ok(json!({"operation": "list_roles"})).await;
    let boss = roles.as_array().unwrap().iter().find(|r| r["role"] == "boss").expect("the super user role was made");
    assert_eq!(boss["permission"], json!({"super_user": true}), "{boss}");
    let (status, found) = s
        .op_as("cleo", "secret-2", &json!({"operation": "search_by_id", "database": "shop", "table": "product", "ids": [1], "get_attributes": ["*"]}))
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found[0]["name"], "Lamp", "{found}");
    assert!(found[0].get("price").is_none(), "the role no longer reads price: {found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_sees_only_what_it_may_and_an_ended_session_keeps_what_was_typed() {
    let s = TestServer::start().await;
    for table in ["product", "payroll"] {
        s.ok(json!({"operation": "create_table", "database": "shop", "table": table, "primary_key": "id"})).await;
    }
    s.ok(
        json!({"operation": "insert", "database": "shop", "table": "product", "records": [{"id": 1, "name": "Lamp"}]}),
    )
    .await;
    let browser = Browser::open().await;
    browser.go(&s.url("/#/roles")).await;
    browser.sign_in(USER, PASSWORD).await;

    // A role that reads shop.product only, and a user with it, made in the page.
    browser.press("//main", "Add a role").await;
    browser.type_into("//main", "Role name", "viewer").await;
    browser.click("//input[@aria-label='read shop.product']").await;
    browser.press("//main", "Save role").await;
    browser.find("//table//td[normalize-space()='viewer']").await;
    browser.shot("roles").await;
    let roles = s.ok(json!({"operation": "list_roles"})).await;
    let viewer = roles.as_array().unwrap().iter().find(|r| r["role"] == "viewer").expect("the role was made");
    assert_eq!(viewer["permission"]["shop"]["tables"]["product"]["read"], true, "{viewer}");
    assert_eq!(viewer["permission"]["shop"]["tables"]["payroll"]["read"], false, "{viewer}");
    browser.go(&s.url("/#/users")).await;
    let add = "//section[h2='Add a user']";
    browser.type_into(add, "Username", "vera").await;
    browser.type_into(add, "Password", "secret-1").await;
    browser.click(&format!("{add}//select[@name='role']/option[@value='viewer']")).await;
    browser.press(add, "Add user").await;
    browser.find("//table//td[normalize-space()='vera']").await;
    browser.shot("users").await;

    // Signed in as the new user: no administration pages, only the table it may read.
    browser.press("//header", "Sign out").await;
    browser.sign_in("vera", "secret-1").await;
    assert_eq!(browser.eval("document.querySelector('a[href=\"#/users\"]').closest('li').hidden").await, json!(true));
    browser.go(&s.url("/#/databases")).await;
    browser.find("//a[normalize-space()='product']").await;
    assert!(
        browser.client().find_all(Locator::XPath("//a[normalize-space()='payroll']")).await.unwrap().is_empty(),
        "a table the role may not read is not listed"
    );
    // An insert the role may not make is refused in the page, saying so.
    browser.go(&s.url("/#/table/shop/product")).await;
    browser.press("//main", "Insert a record").await;
    browser.replace("//textarea[@aria-label='New record as JSON']", r#"{"id": 9, "name": "Forbidden"}"#).await;
    browser.press("//main", "Insert record").await;
    let refused = browser.alert("//section").await;
    assert!(refused.contains("not authorized") && refused.contains("shop.product needs insert"), "{refused}");
    browser.shot("refused").await;
    let (_, found) =
        s.op(json!({"operation": "search_by_id", "database": "shop", "table": "product", "ids": [9]})).await;
    assert_eq!(found, json!([]), "nothing was written");

    // The session ends (its cookie gone): the next action asks to sign in again over the
    // page, then completes, with what was typed still there.
    browser.go(&s.url("/#/query")).await;
    browser.replace("//textarea[@aria-label='SQL statement']", "SELECT name FROM shop.product").await;
    browser.client().delete_all_cookies().await.unwrap();
    browser.press("//main", "Run SQL").await;
    browser.sees("//dialog[@id='sign-in' and @open]", "session has ended").await;
    browser.sign_in("vera", "secret-1").await;
    browser.find("//table//td[normalize-space()='Lamp']").await;
    let typed = browser.eval("document.querySelector('textarea[aria-label=\"SQL statement\"]').value").await;
    assert_eq!(typed, json!("SELECT name FROM shop.product"));
}

#[tokio::test]
async fn the_console_reads_any_table_with_rest_grammar_and_streams_its_changes() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "shop", "table": "product", "primary_key": "id"})).await;
    let records = json!([{"id": 1, "name": "Lamp", "price": 20}, {"id": 2, "name": "Desk", "price": 90}]);
    s.ok(json!({"operation": "insert", "database": "shop", "table": "product", "records": records})).await;
    let auth = basic(USER, PASSWORD);
    let get = |path: &str| s.client.get(s.url(path)).header("authorization", &auth).send();

    // No export serves the table, yet the console reads it as REST would.
    let response = get("/console/data/shop/product/?price=gt=50&select(name,price)").await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!([{"name": "Desk", "price": 90}]));
    let one = get("/console/data/shop/product/1").await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(one["name"], "Lamp");
    let csv = s
        .client
        .get(s.url("/console/data/shop/product/?sort(+id)&select(id,name)"))
        .header("authorization", &auth)
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), 200);
    let csv = csv.text().await.unwrap();
    assert!(csv.contains("1,\"Lamp\"") && csv.contains("2,\"Desk\""), "{csv}");
    let missing = get("/console/data/shop/nothing/").await.unwrap();
    assert_eq!(missing.status(), 404);
    let bad = get("/console/data/shop/product/?price=gt=5&sort(price").await.unwrap();
    assert_eq!(bad.status(), 400, "{:?}", bad.text().await);
    let nameless = get("/console/data/shop").await.unwrap();
    assert_eq!(nameless.status(), 400);

    // Credentials are required; a page's script gets no password prompt with its 401.
    let anonymous = s.client.get(s.url("/console/data/shop/product/")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers().contains_key("www-authenticate"));
    let scripted =
        s.client.get(s.url("/console/data/shop/product/")).header("sec-fetch-dest", "empty").send().await.unwrap();
    assert_eq!(scripted.status(), 401);
    assert!(!scripted.headers().contains_key("www-authenticate"));
    let op = s
        .client
        .post(s.url("/"))
        .header("sec-fetch-dest", "empty")
        .json(&json!({"operation": "describe_all"}))
        .send()
        .await
        .unwrap();
    assert_eq!(op.status(), 401);
    assert!(!op.headers().contains_key("www-authenticate"));

    // The changes stream sends a change made after it opened.
    let mut stream = get("/console/changes/shop/product/?omitCurrent=true").await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    s.ok(
        json!({"operation": "upsert", "database": "shop", "table": "product", "records": [{"id": 3, "name": "Chair"}]}),
    )
    .await;
    let mut text = String::new();
    while !text.contains("Chair") {
        let chunk = tokio::time::timeout(PATIENCE, stream.chunk()).await.unwrap().unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"id\":3"), "{text}");
    let refused = s.client.get(s.url("/console/changes/shop/nothing/")).header("authorization", &auth).send().await;
    assert_eq!(refused.unwrap().status(), 404);

    // Every file of the console is served; an unknown one is 404.
    for file in ["app.js", "console.css", "pages/records.js"] {
        let response = s.client.get(s.url(&format!("/console/{file}"))).send().await.unwrap();
        assert_eq!(response.status(), 200, "{file}");
    }
    assert_eq!(s.client.get(s.url("/console/nope.js")).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_import_export_sort_and_delete_and_a_broken_component_shows_its_error() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "shop", "table": "product", "primary_key": "id",
        "attributes": [{"name": "name", "type": "String"}, {"name": "price", "type": "Int"}]}))
        .await;
    let files = tempfile::tempdir().unwrap();
    let csv = files.path().join("products.csv");
    std::fs::write(&csv, "id,name,price\n1,Lamp,20\n2,Desk,90\n3,Chair,40\n").unwrap();
    // More records than one batch, so the JSON import takes several operations.
    let many: Vec<Value> = (100..1300).map(|id| json!({"id": id, "name": format!("item {id}"), "price": id})).collect();
    let json_file = files.path().join("products.json");
    std::fs::write(&json_file, serde_json::to_string(&many).unwrap()).unwrap();

    let browser = Browser::open().await;
    browser.go(&s.url("/#/table/shop/product")).await;
    browser.sign_in(USER, PASSWORD).await;
    let import = "//section[h2='Import']";

    // A CSV import runs as a job, followed to its end.
    let file = browser.find(&format!("{import}//input[@type='file']")).await;
    file.send_keys(&csv.to_string_lossy()).await.unwrap();
    browser.press(import, "Import").await;
    browser.sees("//main", "COMPLETE").await;
    browser.find("//table//td[normalize-space()='Chair']").await;

    // A JSON import goes in batches, its progress shown after each one (the page
    // records every count the progress line shows).
    browser
        .eval(
            "(() => { window.shownCounts = []; new MutationObserver(() => { \
             const m = /(\\d+) of 1200 sent/.exec(document.body.textContent); \
             if (m && !window.shownCounts.includes(m[1])) window.shownCounts.push(m[1]); }) \
             .observe(document.body, { subtree: true, childList: true, characterData: true }); return true; })()",
        )
        .await;
    let file = browser.find(&format!("{import}//input[@type='file']")).await;
    file.send_keys(&json_file.to_string_lossy()).await.unwrap();
    browser.press(import, "Import").await;
    browser.sees("//main", "1200 of 1200 sent").await;
    assert_eq!(browser.eval("window.shownCounts").await, json!(["500", "1000", "1200"]));
    let bar = browser.eval("document.querySelector('progress[aria-label=\"Import progress\"]').value").await;
    assert_eq!(bar, json!(1200));
    let count = s.ok(json!({"operation": "sql", "sql": "SELECT COUNT(*) AS n FROM shop.product"})).await;
    assert_eq!(count[0]["n"], 1203, "{count}");

    // Sorting by a column, descending on the second press.
    browser.type_into("//main", "Filter", "price=lt=100").await;
    browser.press("//main", "Apply").await;
    browser.gone("//tbody/tr[4]").await;
    let price = "//th//button[starts-with(normalize-space(), 'price')]";
    browser.click(price).await;
    browser.find("//th[@aria-sort='ascending']").await;
    let first = browser.find("//tbody/tr[1]/td[2]").await.text().await.unwrap();
    assert_eq!(first, "Lamp", "the lowest price comes first");
    browser.click(price).await;
    browser.find("//th[@aria-sort='descending']").await;
    let first = browser.find("//tbody/tr[1]/td[2]").await.text().await.unwrap();
    assert_eq!(first, "Desk", "the highest price under 100 comes first");

    // Export what the filter selects, as CSV and JSON.
    browser.press("//main", "Export CSV").await;
    let exported = browser.downloaded("shop.product.csv").await;
    let lines: Vec<&str> = exported.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three records: {exported}");
    assert_eq!(lines[0], r#""id","name","price""#, "{exported}");
    assert_eq!(lines[1..], [r#"2,"Desk",90"#, r#"3,"Chair",40"#, r#"1,"Lamp",20"#], "in the order shown: {exported}");
    browser.press("//main", "Export JSON").await;
    let exported: Value = serde_json::from_str(&browser.downloaded("shop.product.json").await).unwrap();
    assert_eq!(exported.as_array().map(Vec::len), Some(3), "{exported}");

    // Delete a record (the confirmation accepted).
    browser.click("//button[@aria-label='Delete record 2']").await;
    browser.gone("//table//td[normalize-space()='Desk']").await;
    let (_, found) =
        s.op(json!({"operation": "search_by_id", "database": "shop", "table": "product", "ids": [2]})).await;
    assert_eq!(found, json!([]));

    // A component whose schema no longer parses shows its error, with file and line.
    s.ok(json!({"operation": "add_component", "project": "storefront"})).await;
    browser.go(&s.url("/#/components")).await;
    let card = "//section[@aria-label='Component storefront']";
    browser.press(card, "schema.graphql").await;
    browser
        .replace("//textarea[@aria-label='storefront/schema.graphql']", "type Broken @table { id: ID @primaryKey")
        .await;
    browser.press("//main", "Save file").await;
    let problem = browser.alert("//main").await;
    assert!(problem.contains("storefront/schema.graphql:1:"), "{problem}");
    browser.go(&s.url("/#/databases")).await;
    browser.go(&s.url("/#/components")).await;
    let status = browser.find(&format!("{card}//p[@role='alert']")).await.text().await.unwrap();
    assert!(status.contains("schema.graphql:1:"), "{status}");
    browser.find(&format!("{card}//span[normalize-space()='error']")).await;
}
