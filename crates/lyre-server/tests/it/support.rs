//! A real `lyre` process on free ports with a temporary root, and a client for it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const USER: &str = "admin";
pub const PASSWORD: &str = "password";

/// A running server. Killed (SIGKILL) when dropped.
pub struct TestServer {
    child: Option<Child>,
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
    pub ops_port: u16,
    pub http_port: u16,
    /// The MQTT port.
    pub mqtt_port: u16,
    pub client: reqwest::Client,
    extra_env: Vec<(String, String)>,
    dev_app: Option<PathBuf>,
    /// Every start's stderr, appended: shown when a start fails.
    stderr_log: PathBuf,
    /// The CPUs the server may run on (`taskset -c`), when not every one.
    cpus: Option<String>,
}

/// A port nothing else is using, chosen below the kernel's ephemeral range (32768+).
///
/// A port the kernel hands out for `bind(0)` is also one it hands out as the local end
/// of outgoing connections: once a test stops its server to restart it, another test's
/// client could take the port, and the restart would fail with "address in use".
/// Ports below the range are only ever taken by an explicit bind.
pub fn free_port() -> u16 {
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // A stride and start that depend on the process, so two test processes running at
    // once walk different sequences of ports.
    let pid = std::process::id();
    let (start, stride) = (pid.wrapping_mul(2_654_435_761) % u32::from(SPAN), [7, 11, 13, 17, 19][pid as usize % 5]);
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start.wrapping_add(step.wrapping_mul(stride)) % u32::from(SPAN)) as u16;
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {FIRST} and {}", FIRST + SPAN);
}

impl TestServer {
    /// Starts a server on a fresh root.
    pub async fn start() -> TestServer {
        Self::start_with(&[]).await
    }

    /// Starts a server on a fresh root with extra environment variables.
    pub async fn start_with(env: &[(&str, &str)]) -> TestServer {
        Self::start_app(&[], env).await
    }

    /// Starts `lyre dev <app>`: one application directory loaded from where it is.
    pub async fn start_dev(app: &std::path::Path) -> TestServer {
        let mut server = Self::unstarted(&[]);
        server.dev_app = Some(app.to_path_buf());
        server.spawn().await;
        server
    }

    /// Starts a server whose root holds `files` (paths relative to the root, e.g.
    /// `components/shop/schema.graphql`) before start-up.
    pub async fn start_app(files: &[(&str, &str)], env: &[(&str, &str)]) -> TestServer {
        let mut server = Self::unstarted(env);
        for (path, text) in files {
            let path = server.root.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dirs");
            std::fs::write(path, text).expect("write file");
        }
        server.spawn().await;
        server
    }

    /// Starts a server on a fresh root that may run only on `cpus` (a `taskset -c`
    /// list, e.g. `"0"`), as a pinned deployment would start it.
    pub async fn start_pinned(cpus: &str, env: &[(&str, &str)]) -> TestServer {
        let mut server = Self::unstarted(env);
        server.cpus = Some(cpus.to_string());
        server.spawn().await;
        server
    }

    /// A server on a fresh root and free ports with extra environment `env`, not
    /// started yet.
    fn unstarted(env: &[(&str, &str)]) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        TestServer {
            child: None,
            root: dir.path().join("root"),
            stderr_log: dir.path().join("lyre-stderr.log"),
            _dir: Some(dir),
            ops_port: free_port(),
            http_port: free_port(),
            mqtt_port: free_port(),
            client: reqwest::Client::new(),
            extra_env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            dev_app: None,
            cpus: None,
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    async fn spawn(&mut self) {
        let mut command = match &self.cpus {
            Some(cpus) => {
                let mut pinned = Command::new("taskset");
                pinned.arg("-c").arg(cpus).arg(env!("CARGO_BIN_EXE_lyre"));
                pinned
            }
            None => Command::new(env!("CARGO_BIN_EXE_lyre")),
        };
        match &self.dev_app {
            Some(app) => command.arg("dev").arg(app),
            None => command.arg("run"),
        };
        command
            .arg("--root")
            .arg(&self.root)
            .env("OPERATIONSAPI_NETWORK_PORT", self.ops_port.to_string())
            .env("HTTP_PORT", self.http_port.to_string())
            .env("MQTT_NETWORK_PORT", self.mqtt_port.to_string())
            .env("HDB_ADMIN_USERNAME", USER)
            .env("HDB_ADMIN_PASSWORD", PASSWORD)
            .env("LOGGING_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new().create(true).append(true).open(&self.stderr_log).expect("open stderr log"),
            );
        // Tests do not need power-failure durability; crash tests set it back.
        command.env("STORAGE_WRITEASYNC", "true");
        for (k, v) in &self.extra_env {
            command.env(k, v);
        }
        self.child = Some(command.spawn().expect("start lyre"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let health = self.client.get(self.url("/health")).send().await;
            if matches!(health, Ok(ref r) if r.status().is_success()) {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let stderr = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
                panic!("lyre exited during start-up: {status}; its stderr:\n{stderr}");
            }
            if Instant::now() >= deadline {
                let stderr = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
                panic!("lyre did not answer /health within 20 s; its stderr:\n{stderr}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server with SIGTERM (graceful) and starts it again on the same root.
    pub async fn restart(&mut self) {
        self.stop("-TERM");
        self.spawn().await;
    }

    /// Sends `signal` (`-TERM`, `-KILL`, ...) and waits for the process to exit;
    /// returns whether it exited successfully.
    pub fn stop(&mut self, signal: &str) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill").arg(signal).arg(child.id().to_string()).status();
        child.wait().is_ok_and(|status| status.success())
    }

    /// Starts the server again on the same root after [`TestServer::stop`].
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    /// Sets (or with `None` removes) an environment variable for later starts.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.extra_env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.extra_env.push((key.to_string(), value.to_string()));
        }
    }

    /// Waits for the server process to exit on its own (a failpoint crash).
    pub fn wait_exit(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// The server's root directory.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// A REST URL.
    pub fn rest(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ops_port)
    }

    /// An operation as JSON with the admin's credentials, ready to adjust and send
    /// (for tests that read the raw response or expect no answer).
    pub fn op_request(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(self.url("/"))
            .basic_auth(USER, Some(PASSWORD))
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    /// Sends an operation as JSON with the admin's credentials; returns status and body.
    pub async fn op(&self, body: Value) -> (u16, Value) {
        let response = self.op_request(&body).send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// Sends a REST request with the admin's credentials and extra `headers`; returns
    /// status, headers and body (JSON when it parses, else a string).
    pub async fn rest_send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self.client.request(method, self.rest(path)).basic_auth(USER, Some(PASSWORD));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Sends an operation as `user` (Basic auth); returns status and body.
    pub async fn op_as(&self, user: &str, password: &str, body: &Value) -> (u16, Value) {
        let request = self
            .client
            .post(self.url("/"))
            .basic_auth(user, Some(password))
            .header("content-type", "application/json")
            .body(body.to_string());
        read_answer(request).await
    }

    /// Sends a REST request as `user` (Basic auth); returns status and body.
    pub async fn rest_as(
        &self,
        user: &str,
        password: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, self.rest(path)).basic_auth(user, Some(password));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        read_answer(request).await
    }

    /// Sends an operation and asserts it succeeded; returns the body.
    pub async fn ok(&self, body: Value) -> Value {
        let (status, value) = self.op(body.clone()).await;
        assert_eq!(status, 200, "{body} answered {value}");
        value
    }

    /// Sends an operation and asserts the error status and message.
    pub async fn fails(&self, body: Value, status: u16, message: &str) {
        let (got, value) = self.op(body.clone()).await;
        assert_eq!(got, status, "{body} answered {value}");
        assert_eq!(value["error"], message, "{body}");
    }
}

/// Sends `request`; its status and body (JSON when it parses, else a string).
async fn read_answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `get_job` until the job leaves `IN_PROGRESS` (for at most two minutes: a
/// large load in a debug build takes a while); returns its record.
pub async fn finished_job(s: &TestServer, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let job = s.ok(serde_json::json!({"operation": "get_job", "id": id})).await;
        if job[0]["status"] != "IN_PROGRESS" {
            return job[0].clone();
        }
        assert!(Instant::now() < deadline, "job {id} still running after 120 s: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a job with `request`, checks Harper's answer naming it, waits for it to
/// finish; returns the finished job's record.
pub async fn run_job(s: &TestServer, request: Value) -> Value {
    let started = s.ok(request).await;
    let message = started["message"].as_str().unwrap_or_default();
    let id = started["job_id"].as_str().expect("a job id").to_string();
    assert_eq!(message, format!("Starting job with id {id}"));
    finished_job(s, &id).await
}

/// An HTTP Basic `Authorization` value for `user` and `password`.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// Anonymous memory (heap) process `pid` holds now, in KiB: file-backed pages (the
/// database's map, files read or written) are left out, since they belong to the
/// OS cache.
pub fn anonymous_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

/// A `/proc/<pid>/status` figure in KiB (0 when unreadable).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
