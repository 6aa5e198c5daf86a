//! Configuration: `lyre-config.yaml` in the root, with Harper's key names, overridden
//! by Harper's environment variables.
//!
//! Precedence, lowest first: built-in defaults, the config file, environment
//! variables (`SECTION_SUB_KEY`, e.g. `HTTP_PORT`, `OPERATIONSAPI_NETWORK_PORT`),
//! command-line flags. Every key of the default tree can be overridden by the
//! environment variable named after its path.

mod duration;
mod env;
mod update;

pub use duration::ConfigDuration;
pub use update::{UpdateError, Updated, set_configuration};

/// The configuration file's name, in the root.
pub const CONFIG_FILE: &str = "lyre-config.yaml";
/// The comment the configuration file starts with.
const FILE_HEADER: &str = "# Lyre configuration (Harper's key names). Environment variables such as\n# HTTP_PORT or OPERATIONSAPI_NETWORK_PORT override these values.\n";

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything configurable. Field names follow Harper's config keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The root directory holding databases, logs and components.
    pub root_path: PathBuf,
    /// The REST / application HTTP server.
    pub http: HttpConfig,
    /// The Operations API server.
    pub operations_api: OperationsApiConfig,
    /// The MQTT broker.
    pub mqtt: MqttConfig,
    /// Logging.
    pub logging: LoggingConfig,
    /// Worker threads.
    pub threads: ThreadsConfig,
    /// Authentication.
    pub authentication: AuthenticationConfig,
    /// Storage.
    pub storage: StorageConfig,
    /// TLS certificates for the secure ports.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Harper's analytics.
    #[serde(default)]
    pub analytics: AnalyticsConfig,
    /// The `sql` operation.
    #[serde(default)]
    pub sql: SqlConfig,
    /// JavaScript applications (`resources.js`).
    #[serde(default)]
    pub javascript: JavascriptConfig,
}

/// `javascript.*` (Lyre's keys): the runtimes components' scripts run in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JavascriptConfig {
    /// Worker threads, each with its own runtime and one request at a time; `0`
    /// means as many as request threads.
    #[serde(default)]
    pub threads: usize,
    /// Bytes each runtime may allocate; a script past it fails (500) and its
    /// runtime is rebuilt.
    #[serde(default = "default_javascript_memory")]
    pub memory_limit: usize,
    /// How long one request (or one component's load) may run before it is stopped.
    #[serde(default = "default_javascript_timeout")]
    pub timeout: ConfigDuration,
}

impl Default for JavascriptConfig {
    fn default() -> Self {
        JavascriptConfig {
            threads: 0,
            memory_limit: default_javascript_memory(),
            timeout: default_javascript_timeout(),
        }
    }
}

fn default_javascript_memory() -> usize {
    256 << 20
}

fn default_javascript_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(30))
}

/// `sql.*` (Lyre's keys): limits of the `sql` operation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqlConfig {
    /// Bytes of intermediate results (joined rows, groups, rows to sort) one
    /// statement may hold; past it the statement fails with a 400 naming the budget.
    #[serde(default = "default_sql_memory_budget")]
    pub memory_budget: usize,
}

impl Default for SqlConfig {
    fn default() -> Self {
        SqlConfig { memory_budget: default_sql_memory_budget() }
    }
}

fn default_sql_memory_budget() -> usize {
    lyre_sql::DEFAULT_MEMORY_BUDGET
}

/// `analytics.*`: how requests are aggregated into `system.hdb_analytics`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Seconds per aggregate (Harper's key and default, 60).
    #[serde(default = "default_aggregate_period")]
    pub aggregate_period: u64,
    /// How long aggregates are kept (Lyre's key; default 7 days).
    #[serde(default = "default_analytics_retention")]
    pub retention: ConfigDuration,
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig { aggregate_period: default_aggregate_period(), retention: default_analytics_retention() }
    }
}

fn default_aggregate_period() -> u64 {
    60
}

fn default_analytics_retention() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(7 * 86_400))
}

/// `tls.*` (Harper's keys): PEM files. Without `certificate` and `privateKey`, a
/// secure port uses a self-signed certificate made at first start in
/// `<root>/keys/certificate.pem` and `privateKey.pem`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain.
    pub certificate: Option<PathBuf>,
    /// Its private key.
    pub private_key: Option<PathBuf>,
    /// The authorities client certificates must chain to (`http.mtls`).
    pub certificate_authority: Option<PathBuf>,
}

/// `http.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpConfig {
    /// Port of the REST interface.
    pub port: u16,
    /// Largest accepted request body, in bytes (Harper's key and default).
    pub max_request_body_size: usize,
    /// Responses larger than this many bytes are compressed (Brotli or gzip, as the
    /// client accepts); 0 turns compression off.
    pub compression_threshold: u16,
    /// Answer cross-origin requests (CORS) from any origin.
    pub cors: bool,
    /// How long a request's headers may take to arrive, in ms (Harper's key).
    #[serde(default = "default_headers_timeout")]
    pub headers_timeout: u64,
    /// How long a connection may sit idle between requests, in ms (Harper's key).
    #[serde(default = "default_keep_alive_timeout")]
    pub keep_alive_timeout: u64,
    /// How long a request's body may take to arrive, in ms (Harper's `http.timeout`).
    #[serde(default = "default_request_timeout")]
    pub timeout: u64,
    /// Connections open at once across both ports; 0 = as many as the process's file
    /// limit allows, less what the databases need (Lyre's own key).
    #[serde(default)]
    pub max_connections: usize,
    /// Connections open at once from one client address (Lyre's own key).
    #[serde(default = "default_max_connections_per_address")]
    pub max_connections_per_address: usize,
    /// The REST interface over TLS, when set.
    #[serde(default)]
    pub secure_port: Option<u16>,
    /// Ask clients on the secure ports for a certificate (chaining to
    /// `tls.certificateAuthority`): `true`, or Harper's `{user, required}`.
    #[serde(default)]
    pub mtls: MtlsConfig,
    /// How long a request waits for the memory its body needs, in ms, before 503
    /// (Harper's key: how long a request may wait in its queue).
    #[serde(default = "default_request_queue_limit")]
    pub request_queue_limit: u64,
    /// Bytes of memory request bodies may hold at once, arrived and decoded, across
    /// both ports (Lyre's own key); 0 = a quarter of the machine's (or the
    /// container's) memory. See `http/body.rs`.
    #[serde(default)]
    pub request_memory: usize,
    /// Bytes of that one request may hold (Lyre's own key; never more than all of
    /// it); 0 = 2 GiB. A request's memory also bounds how long its write holds its
    /// database's writer: about 7 s at 2 GiB on a 2-core machine.
    #[serde(default)]
    pub max_request_memory: usize,
}

impl HttpConfig {
    /// `http.requestMemory`, its default applied.
    pub fn request_memory(&self) -> usize {
        match self.request_memory {
            0 => (machine_memory() / 4).max(256 << 20),
            bytes => bytes,
        }
    }

    /// `http.maxRequestMemory`, its default applied (the budget caps it at
    /// `http.requestMemory`).
    pub fn max_request_memory(&self) -> usize {
        match self.max_request_memory {
            0 => 2 << 30,
            bytes => bytes,
        }
    }
}

/// The memory this process may use: the machine's, or its container's (cgroup v2
/// `memory.max`) when lower; 4 GiB when neither can be read.
fn machine_memory() -> usize {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| {
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    let container = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|m| m.trim().parse().ok());
    match (machine, container) {
        (Some(m), Some(c)) => m.min(c),
        (m, c) => m.or(c).unwrap_or(4 << 30),
    }
}

/// `http.mtls`: off (`false`), on with the certificate's common name as the user
/// (`true`), or Harper's object form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MtlsConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{user, required}`.
    Options(MtlsOptions),
}

impl Default for MtlsConfig {
    fn default() -> Self {
        MtlsConfig::Enabled(false)
    }
}

/// Harper's `http.mtls` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MtlsOptions {
    /// Who a certificate logs in: `CN` (absent: the default) its common name, another
    /// name that fixed user, `null` nobody (the client logs in as well).
    #[serde(default = "common_name")]
    pub user: Option<String>,
    /// Refuse clients without a certificate at the handshake.
    #[serde(default)]
    pub required: bool,
}

fn common_name() -> Option<String> {
    Some("CN".into())
}

fn default_headers_timeout() -> u64 {
    60_000
}

fn default_keep_alive_timeout() -> u64 {
    30_000
}

fn default_request_timeout() -> u64 {
    120_000
}

fn default_request_queue_limit() -> u64 {
    20_000
}

fn default_max_connections_per_address() -> usize {
    1024
}

/// `operationsApi.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperationsApiConfig {
    /// Network settings.
    pub network: NetworkConfig,
}

/// `*.network.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkConfig {
    /// TCP port.
    pub port: u16,
    /// Largest accepted request body, in bytes (Harper's key).
    #[serde(default = "default_ops_body")]
    pub max_request_body_size: usize,
    /// The Operations API over TLS, when set.
    #[serde(default)]
    pub secure_port: Option<u16>,
    /// Answer cross-origin requests (CORS) from any origin (Operations API only).
    #[serde(default = "enabled")]
    pub cors: bool,
}

/// `mqtt.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MqttConfig {
    /// Network settings.
    pub network: MqttNetworkConfig,
}

/// `mqtt.network.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MqttNetworkConfig {
    /// TCP port.
    pub port: u16,
    /// TLS port (with the `tls` certificate), if any.
    #[serde(default)]
    pub secure_port: Option<u16>,
}

/// Harper's log levels, least severe first; any other value is refused when the
/// configuration is read or changed (it was once taken and logged at `info`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Detail for diagnosing.
    Debug,
    /// What the server does (the default).
    Info,
    /// What may need attention.
    Warn,
    /// What failed.
    Error,
    /// What stops the server (logged as `error`: tracing has no such level).
    Fatal,
    /// Harper's level for notices (logged as `error`).
    Notify,
}

impl LogLevel {
    /// The level's name, as in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
            Self::Fatal => "fatal",
            Self::Notify => "notify",
        }
    }
}

/// `logging.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoggingConfig {
    /// The least severe entries logged.
    pub level: LogLevel,
    /// How long audit (transaction) log entries are kept before a background task
    /// removes them (Harper's key and default, `3d`).
    #[serde(default = "default_audit_retention")]
    pub audit_retention: ConfigDuration,
    /// How long a log consumer (a durable cursor) may be gone before retention drops
    /// its cursor and stops keeping the log for it (Lyre's own key, `7d`).
    #[serde(default = "default_consumer_timeout")]
    pub consumer_timeout: ConfigDuration,
}

fn default_audit_retention() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(3 * 86_400))
}

fn default_consumer_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(7 * 86_400))
}

/// `threads.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadsConfig {
    /// Request-handling threads; `0` means one per CPU.
    pub count: usize,
}

/// `authentication.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthenticationConfig {
    /// Treat requests from loopback without credentials as the super user.
    pub authorize_local: bool,
    /// How long a verified login is trusted, in milliseconds.
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: u64,
    /// Failed logins allowed per user name and per client address within
    /// `loginAttemptWindow` before further logins are refused with 429 (Lyre's own
    /// key; `0` turns the limit off).
    #[serde(default = "default_max_login_attempts")]
    pub max_login_attempts: u32,
    /// The window `maxLoginAttempts` counts over (Lyre's own key, `1m`).
    #[serde(default = "default_login_attempt_window")]
    pub login_attempt_window: ConfigDuration,
    /// How long an operation token lasts (Harper's key, `1d`).
    #[serde(default = "default_operation_token_timeout")]
    pub operation_token_timeout: ConfigDuration,
    /// How long a refresh token lasts (Harper's key, `30d`).
    #[serde(default = "default_refresh_token_timeout")]
    pub refresh_token_timeout: ConfigDuration,
    /// Whether `login` starts cookie sessions (Harper's key).
    #[serde(default = "default_true")]
    pub enable_sessions: bool,
    /// How long a session lasts after `login` (Lyre's own key, `1d`).
    #[serde(default = "default_session_timeout")]
    pub session_timeout: ConfigDuration,
}

fn default_true() -> bool {
    true
}

fn default_operation_token_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(86_400))
}

fn default_refresh_token_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(30 * 86_400))
}

fn default_session_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(86_400))
}

fn default_max_login_attempts() -> u32 {
    10
}

fn default_login_attempt_window() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(60))
}

/// `storage.*`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageConfig {
    /// Acknowledge writes before they are flushed to disk (Harper's key). Faster,
    /// but a power failure may lose the last acknowledged writes.
    pub write_async: bool,
    /// Largest size a database may grow to, in bytes (address space, not disk).
    pub max_database_size: usize,
    /// Where databases live (Harper's key); `<rootPath>/database` when unset.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// How long `drop_database` and restores wait for a database's users (backups,
    /// searches, requests) to finish, in milliseconds, before answering 409.
    #[serde(default = "default_release_timeout")]
    pub release_timeout: u64,
    /// Where blobs live (Harper's key: one path or a list; new blobs go to the one
    /// with the most free space); `<rootPath>/blobs` when unset.
    #[serde(default, deserialize_with = "one_or_many_paths")]
    pub blob_paths: Vec<PathBuf>,
    /// The largest blob an upload (`PUT /T/<id>.<attr>`) may store, in bytes
    /// (Lyre's own key); past it the upload is refused with 413.
    #[serde(default = "default_max_blob_size")]
    pub max_blob_size: u64,
    /// Keep records read lately in memory, decoded (Harper's key): in Lyre, each
    /// JavaScript worker keeps the flat records its scripts read, frozen, so a
    /// record read again unchanged is not built again.
    #[serde(default = "default_true")]
    pub caching: bool,
}

fn default_max_blob_size() -> u64 {
    1 << 30
}

/// A path or a list of paths (Harper accepts either for `storage.blobPaths`).
fn one_or_many_paths<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match Option::<OneOrMany>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(OneOrMany::One(path)) => vec![path],
        Some(OneOrMany::Many(paths)) => paths,
    })
}

fn default_release_timeout() -> u64 {
    5_000
}

fn enabled() -> bool {
    true
}

fn default_ops_body() -> usize {
    100 << 20
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root_path: PathBuf::from("./lyre-data"),
            http: HttpConfig {
                port: 9926,
                max_request_body_size: 10_000_000,
                compression_threshold: 1200,
                cors: true,
                headers_timeout: default_headers_timeout(),
                keep_alive_timeout: default_keep_alive_timeout(),
                timeout: default_request_timeout(),
                max_connections: 0,
                max_connections_per_address: default_max_connections_per_address(),
                secure_port: None,
                mtls: MtlsConfig::default(),
                request_queue_limit: default_request_queue_limit(),
                request_memory: 0,
                max_request_memory: 0,
            },
            operations_api: OperationsApiConfig {
                network: NetworkConfig {
                    port: 9925,
                    secure_port: None,
                    max_request_body_size: default_ops_body(),
                    cors: true,
                },
            },
            mqtt: MqttConfig { network: MqttNetworkConfig { port: 1883, secure_port: None } },
            logging: LoggingConfig {
                level: LogLevel::Info,
                audit_retention: default_audit_retention(),
                consumer_timeout: default_consumer_timeout(),
            },
            threads: ThreadsConfig { count: 0 },
            authentication: AuthenticationConfig {
                authorize_local: false,
                cache_ttl: 30_000,
                max_login_attempts: default_max_login_attempts(),
                login_attempt_window: default_login_attempt_window(),
                operation_token_timeout: default_operation_token_timeout(),
                refresh_token_timeout: default_refresh_token_timeout(),
                enable_sessions: true,
                session_timeout: default_session_timeout(),
            },
            storage: StorageConfig {
                write_async: false,
                max_database_size: 256 << 30,
                path: None,
                release_timeout: default_release_timeout(),
                blob_paths: Vec::new(),
                max_blob_size: default_max_blob_size(),
                caching: true,
            },
            tls: TlsConfig::default(),
            analytics: AnalyticsConfig::default(),
            sql: SqlConfig::default(),
            javascript: JavascriptConfig::default(),
        }
    }
}

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read or written.
    #[error("config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The config file is not valid YAML.
    #[error("config file {path} is not valid YAML: {message}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message, with its position.
        message: String,
    },
    /// A value has the wrong type or an unknown key.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads the configuration for `root` (from `--root`, else `ROOTPATH`, else the
    /// default), writing the default file on first start.
    pub fn load(root: Option<PathBuf>, vars: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let defaults = serde_json::to_value(Config::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let root = root.or_else(|| vars("ROOTPATH").map(PathBuf::from)).unwrap_or_else(|| Config::default().root_path);
        let file = root.join(CONFIG_FILE);
        let mut tree = defaults.clone();
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let from_file: serde_json::Value = serde_saphyr::from_str(&text)
                    .map_err(|e| ConfigError::Yaml { path: file.clone(), message: e.to_string() })?;
                if !from_file.is_null() {
                    merge(&mut tree, rename_legacy_keys(from_file));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_default(&root, &file)?,
            Err(source) => return Err(ConfigError::Io { path: file, source }),
        }
        env::apply_overrides(&mut tree, &defaults, vars);
        tree["rootPath"] = serde_json::Value::String(root.to_string_lossy().into_owned());
        serde_json::from_value(tree).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root_path
    }
}

fn write_default(root: &Path, file: &Path) -> Result<(), ConfigError> {
    let io = |source| ConfigError::Io { path: file.to_path_buf(), source };
    std::fs::create_dir_all(root).map_err(io)?;
    let defaults = Config { root_path: root.to_path_buf(), ..Config::default() };
    let yaml = serde_saphyr::to_string(&defaults).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let text = format!("{FILE_HEADER}{yaml}");
    std::fs::write(file, text).map_err(io)
}

/// A config file as Lyre first wrote it, with keys since renamed to Harper's:
/// `maxBodySize` became `maxRequestBodySize` (under `http` and
/// `operationsApi.network`).
fn rename_legacy_keys(mut file: serde_json::Value) -> serde_json::Value {
    for section in [&["http"][..], &["operationsApi", "network"][..]] {
        let node = section.iter().try_fold(&mut file, |node, key| node.get_mut(*key));
        if let Some(serde_json::Value::Object(map)) = node
            && !map.contains_key("maxRequestBodySize")
            && let Some(size) = map.remove("maxBodySize")
        {
            map.insert("maxRequestBodySize".into(), size);
        }
    }
    file
}

/// Deep-merges `overlay` into `base`: objects merge key by key, anything else replaces.
fn merge(base: &mut serde_json::Value, overlay: serde_json::Value) {
    match (base, overlay) {
        (serde_json::Value::Object(base), serde_json::Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_are_written_then_file_and_environment_apply() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let config = Config::load(Some(root.clone()), &vars(&[])).unwrap();
        assert_eq!(config.http.port, 9926);
        assert_eq!(config.operations_api.network.port, 9925);
        assert!(root.join("lyre-config.yaml").exists());

        std::fs::write(root.join("lyre-config.yaml"), "http:\n  port: 8080\nlogging:\n  level: debug\n").unwrap();
        let config = Config::load(
            Some(root.clone()),
            &vars(&[("OPERATIONSAPI_NETWORK_PORT", "7000"), ("LOGGING_LEVEL", "warn")]),
        )
        .unwrap();
        assert_eq!(config.http.port, 8080);
        assert_eq!(config.operations_api.network.port, 7000);
        assert_eq!(config.logging.level, LogLevel::Warn);
        assert_eq!(config.mqtt.network.port, 1883);
        let config = Config::load(Some(root.clone()), &vars(&[("AUTHENTICATION_AUTHORIZELOCAL", "true")])).unwrap();
        assert!(config.authentication.authorize_local);
        assert_eq!(config.logging.audit_retention.0, std::time::Duration::from_secs(3 * 86_400));
        let config = Config::load(Some(root.clone()), &vars(&[("LOGGING_AUDITRETENTION", "12h")])).unwrap();
        assert_eq!(config.logging.audit_retention.0, std::time::Duration::from_secs(12 * 3_600));
        assert_eq!(config.logging.consumer_timeout.0, std::time::Duration::from_secs(7 * 86_400));
        let config = Config::load(Some(root.clone()), &vars(&[("LOGGING_CONSUMERTIMEOUT", "2h")])).unwrap();
        assert_eq!(config.logging.consumer_timeout.0, std::time::Duration::from_secs(2 * 3_600));
    }

    #[test]
    fn body_limits_take_harpers_key_and_read_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let config = Config::load(Some(root.clone()), &vars(&[])).unwrap();
        assert_eq!(config.http.max_request_body_size, 10_000_000);
        assert!(std::fs::read_to_string(root.join("lyre-config.yaml")).unwrap().contains("maxRequestBodySize"));
        let legacy = "http:\n  maxBodySize: 5000\noperationsApi:\n  network:\n    port: 9925\n    maxBodySize: 6000\n";
        std::fs::write(root.join("lyre-config.yaml"), legacy).unwrap();
        let config = Config::load(Some(root.clone()), &vars(&[])).unwrap();
        assert_eq!(
            (config.http.max_request_body_size, config.operations_api.network.max_request_body_size),
            (5000, 6000)
        );
        std::fs::write(root.join("lyre-config.yaml"), "http:\n  maxRequestBodySize: 7000\n").unwrap();
        let config =
            Config::load(Some(root.clone()), &vars(&[("OPERATIONSAPI_NETWORK_MAXREQUESTBODYSIZE", "8000")])).unwrap();
        assert_eq!(
            (config.http.max_request_body_size, config.operations_api.network.max_request_body_size),
            (7000, 8000)
        );
    }

    #[test]
    fn mtls_takes_a_flag_or_harpers_object() {
        let load = |yaml: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("lyre-config.yaml"), yaml).unwrap();
            Config::load(Some(dir.path().into()), &vars(&[])).unwrap().http.mtls
        };
        assert_eq!(load("http:\n  port: 1\n"), MtlsConfig::Enabled(false));
        assert_eq!(load("http:\n  mtls: true\n"), MtlsConfig::Enabled(true));
        let options =
            |user: Option<&str>, required| MtlsConfig::Options(MtlsOptions { user: user.map(String::from), required });
        assert_eq!(load("http:\n  mtls:\n    required: true\n"), options(Some("CN"), true));
        assert_eq!(load("http:\n  mtls:\n    user: null\n"), options(None, false));
        assert_eq!(load("http:\n  mtls:\n    user: ann\n"), options(Some("ann"), false));
    }

    #[test]
    fn bad_files_and_values_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lyre-config.yaml"), "http: [unclosed").unwrap();
        assert!(matches!(Config::load(Some(dir.path().into()), &vars(&[])), Err(ConfigError::Yaml { .. })));
        std::fs::write(dir.path().join("lyre-config.yaml"), "http:\n  port: 1\n").unwrap();
        let err = Config::load(Some(dir.path().into()), &vars(&[("HTTP_PORT", "not-a-port")])).unwrap_err();
        assert!(err.to_string().contains("invalid"), "{err}");
        let err = Config::load(Some(dir.path().into()), &vars(&[("LOGGING_AUDITRETENTION", "3 weeks")])).unwrap_err();
        assert!(err.to_string().contains("'3 weeks' is not a duration"), "{err}");
    }
}
