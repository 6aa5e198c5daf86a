//! Start-up, listeners and graceful shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lyre_core::users::AdminBootstrap;
use lyre_core::{Engine, EngineOptions, ServiceOptions, Services};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::AppState;
use crate::components::Components;
use crate::config::Config;
use crate::control::{Control, Exit};
use crate::http;
use crate::metrics::Metrics;
use crate::telemetry;
use crate::tokens::Tokens;

/// Runs the server until SIGINT or SIGTERM: builds the runtime, opens the engine,
/// serves, then drains in-flight requests and commits queued writes before exiting.
/// A restart asked for over the API stops the same way, then executes this binary
/// again with the same arguments and environment (the process keeps its id).
pub fn run(config: Config, dev_app: Option<PathBuf>) -> anyhow::Result<()> {
    let pid_file = crate::control::pid_file(config.root());
    let exit = run_once(config, dev_app);
    // A restart keeps the process (and its id): the pid file stays, so `lyre stop`
    // finds the server while it execs itself.
    if !matches!(exit, Ok(Exit::Restart)) {
        let _ = std::fs::remove_file(&pid_file);
    }
    let exit = exit?;
    if exit == Exit::Restart {
        use std::os::unix::process::CommandExt as _;
        let program = std::env::current_exe().context("finding this program to restart it")?;
        let err = std::process::Command::new(program).args(std::env::args_os().skip(1)).exec();
        return Err(anyhow::anyhow!("restarting failed: {err}"));
    }
    Ok(())
}

/// Request-handling threads: `threads.count`, or one per CPU this process may run on.
/// `available_parallelism` counts the CPUs this process may run on (its affinity
/// mask and cgroup quota), not the machine's: a server pinned to one core gets one
/// request thread instead of several taking turns on it.
fn request_threads(config: &Config) -> usize {
    match config.threads.count {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
        n => n,
    }
}

/// What the records each JavaScript worker keeps for reading again may cost
/// (`storage.caching`): a sixteenth of what its runtime may allocate, 16 MiB when
/// that is unlimited (`javascript.memoryLimit: 0`), nothing with caching off.
fn record_cache_budget(config: &Config) -> usize {
    match (config.storage.caching, config.javascript.memory_limit) {
        (false, _) => 0,
        (true, 0) => 16 << 20,
        (true, limit) => limit / 16,
    }
}

/// One run of the server, until it is asked to stop or restart.
fn run_once(config: Config, dev_app: Option<PathBuf>) -> anyhow::Result<Exit> {
    let _log_guard = telemetry::init(&config.root().join("log"), config.logging.level.as_str())
        .context("opening the log directory")?;
    let threads = request_threads(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("lyre-worker")
        .build()
        .context("starting the runtime")?;
    runtime.block_on(serve(config, dev_app))
}

/// What a listener serves.
#[derive(Clone, Copy)]
enum Port {
    Rest,
    Operations,
}

/// `lyre backup`: a consistent copy of `database` under the configured root (a
/// tar when it has blobs); answers the format written.
pub fn backup(
    config: &Config,
    database: &str,
    out: &std::path::Path,
) -> anyhow::Result<lyre_core::db::backup::BackupFormat> {
    lyre_core::lifecycle::backup_offline(&layout(config), database, out, &storage_options(config), &blob_paths(config))
        .with_context(|| format!("backing up '{database}'"))
}

/// `lyre restore`: replaces `database` with a backup, the server not running.
pub fn restore(config: &Config, database: &str, backup: &std::path::Path) -> anyhow::Result<()> {
    let options = storage_options(config);
    lyre_core::lifecycle::restore_offline(&layout(config), database, backup, &options, &blob_paths(config))
        .with_context(|| format!("restoring '{database}'"))
}

/// The configured blob paths, relative ones under the root (as Harper resolves them).
fn blob_paths(config: &Config) -> Vec<PathBuf> {
    config.storage.blob_paths.iter().map(|path| config.root().join(path)).collect()
}

fn layout(config: &Config) -> lyre_core::Layout {
    let layout = lyre_core::Layout::new(config.root().to_path_buf());
    match &config.storage.path {
        Some(dir) => layout.with_databases_dir(dir.clone()),
        None => layout,
    }
}

fn storage_options(config: &Config) -> lyre_core::StorageOptions {
    lyre_core::StorageOptions { map_size: config.storage.max_database_size, durable: !config.storage.write_async }
}

async fn serve(config: Config, dev_app: Option<PathBuf>) -> anyhow::Result<Exit> {
    let started = Instant::now();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let options = EngineOptions {
        root: config.root().to_path_buf(),
        node_id: 1,
        storage: storage_options(&config),
        writer: Default::default(),
        admin: AdminBootstrap {
            username: env("HDB_ADMIN_USERNAME").unwrap_or_else(|| "HDB_ADMIN".into()),
            password: env("HDB_ADMIN_PASSWORD"),
        },
        auth_cache_ttl: Duration::from_millis(config.authentication.cache_ttl),
        login_limit: lyre_core::users::LoginLimit {
            attempts: config.authentication.max_login_attempts,
            window: config.authentication.login_attempt_window.0,
        },
        databases_dir: config.storage.path.clone(),
        release_timeout: Duration::from_millis(config.storage.release_timeout),
        blob_paths: blob_paths(&config),
    };
    let (engine, generated) = Engine::open(options).await.context("opening the databases")?;
    if let Some(password) = generated {
        eprintln!(
            "Created the super user '{}' with the generated password: {password}\n(shown once; set HDB_ADMIN_USERNAME and HDB_ADMIN_PASSWORD on first start to choose them)",
            env("HDB_ADMIN_USERNAME").unwrap_or_else(|| "HDB_ADMIN".into())
        );
    }
    let development = dev_app.is_some();
    let mut extra = BTreeMap::new();
    if let Some(app) = dev_app {
        let name = app.file_name().and_then(|n| n.to_str()).unwrap_or("app").to_string();
        extra.insert(name, app);
    }
    let service_options = ServiceOptions {
        audit_retention: Some(config.logging.audit_retention.0),
        consumer_timeout: config.logging.consumer_timeout.0,
        ..ServiceOptions::default()
    };
    let services = Services::start(&engine, service_options).await.context("starting the services")?;
    let metrics = Arc::new(Metrics::new(engine.clone(), services.clone()));
    let period = Duration::from_secs(config.analytics.aggregate_period.max(1));
    let retention = config.analytics.retention.0;
    let (flushing, flush_engine) = (metrics.clone(), engine.clone());
    services.every(period, move || {
        let (metrics, engine) = (flushing.clone(), flush_engine.clone());
        async move {
            if let Err(err) = metrics.flush_analytics(&engine, period, retention).await {
                tracing::warn!(error = %err, "writing analytics failed");
            }
        }
    });
    let scripts = Arc::new(crate::script::Scripts::new(
        engine.clone(),
        Arc::new(crate::http::rest::script::Grammar::new(engine.clone())),
        crate::script::ScriptSettings {
            workers: match config.javascript.threads {
                0 => request_threads(&config),
                n => n,
            },
            memory_limit: config.javascript.memory_limit,
            record_cache: record_cache_budget(&config),
            timeout: config.javascript.timeout.0,
            expose_errors: development,
        },
    ));
    // `@computed` attributes are computed by the JavaScript engine.
    engine.install_attribute_computer(Arc::new(crate::script::ScriptComputer::new(&scripts)));
    let components = Arc::new(Components::new(engine.clone(), config.root().join("components"), extra, scripts));
    components.load_all().await;
    let tokens = Tokens::open(
        &config.root().join("keys"),
        config.authentication.operation_token_timeout.0,
        config.authentication.refresh_token_timeout.0,
    )
    .context("opening the token keys")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = Arc::new(AppState {
        tokens,
        sessions: config.authentication.enable_sessions.then_some(config.authentication.session_timeout.0),
        engine: engine.clone(),
        services: services.clone(),
        components,
        authorize_local: config.authentication.authorize_local,
        verifying: tokio::sync::Mutex::new(()),
        ops_body_limit: config.operations_api.network.max_request_body_size,
        rest_body_limit: config.http.max_request_body_size,
        max_blob_size: config.storage.max_blob_size,
        body_timeout: Duration::from_millis(config.http.timeout.max(1)),
        body_memory: http::body::BodyMemory::new(
            config.http.request_memory(),
            config.http.max_request_memory(),
            Duration::from_millis(config.http.request_queue_limit),
        ),
        cors: config.http.cors,
        ops_cors: config.operations_api.network.cors,
        loads: Arc::new(tokio::sync::Semaphore::new(crate::app::MAX_LOADS)),
        control: Arc::new(Control::new(config.clone())),
        metrics: metrics.clone(),
        stopping: stop_rx.clone(),
        mqtt: std::sync::OnceLock::new(),
        cache: Arc::new(crate::cache::Cache::new().context("setting up the HTTP client of caching tables")?),
        graphql_documents: Default::default(),
    });
    // Scripts' middleware (`server.http`) hands requests on to the REST port's handling.
    state.components.scripts().set_http_next(Arc::new(http::rest::middleware::RestNext::new(&state)));

    let tls = crate::tls::acceptor(&config).context("setting up TLS")?;
    let ops_addr = SocketAddr::from(([0, 0, 0, 0], config.operations_api.network.port));
    let ops_listener =
        TcpListener::bind(ops_addr).await.with_context(|| format!("binding the Operations API to {ops_addr}"))?;
    let rest_addr = SocketAddr::from(([0, 0, 0, 0], config.http.port));
    let rest_listener =
        TcpListener::bind(rest_addr).await.with_context(|| format!("binding the REST interface to {rest_addr}"))?;
    // Every listener is bound before any serves, so an answered /health means all are up.
    let rest = http::rest_service(state.clone(), config.http.compression_threshold);
    let gate = http::serve::Gate::new(connection_limits(&config));
    let ops = http::operations_router(state.clone());
    let mut listeners = vec![(rest_listener, Port::Rest, None), (ops_listener, Port::Operations, None)];
    if let Some(acceptor) = tls.clone() {
        let secure =
            [(config.http.secure_port, Port::Rest), (config.operations_api.network.secure_port, Port::Operations)];
        for (port, serves) in secure {
            let Some(port) = port else { continue };
            let addr = SocketAddr::from(([0, 0, 0, 0], port));
            let listener = TcpListener::bind(addr).await.with_context(|| format!("binding the secure port {addr}"))?;
            listeners.push((listener, serves, Some(acceptor.clone())));
        }
    }
    let broker = crate::mqtt::Broker::open(state.clone(), crate::mqtt::BrokerOptions::default())
        .await
        .context("opening the MQTT broker")?;
    let service: Arc<dyn crate::app::MqttService> = broker.clone();
    let _ = state.mqtt.set(Arc::downgrade(&service));
    let sweeping = broker.clone();
    services.every(Duration::from_secs(1), move || {
        let broker = sweeping.clone();
        async move { broker.expire_sessions().await }
    });
    let mqtt_limit = u64::try_from(connection_limits(&config).total).unwrap_or(u64::MAX);
    let mut mqtt_ports = vec![(config.mqtt.network.port, None)];
    if let (Some(port), Some(acceptor)) = (config.mqtt.network.secure_port, tls.clone()) {
        mqtt_ports.push((port, Some(acceptor)));
    }
    let mut mqtt_servers = Vec::new();
    for (port, secure) in mqtt_ports {
        let addr = SocketAddr::from(([0, 0, 0, 0], port));
        let listener = TcpListener::bind(addr).await.with_context(|| format!("binding MQTT to {addr}"))?;
        mqtt_servers.push(tokio::spawn(crate::mqtt::serve(
            broker.clone(),
            listener,
            secure,
            mqtt_limit,
            stop_rx.clone(),
        )));
    }
    let servers: Vec<_> = listeners
        .into_iter()
        .map(|(listener, serves, tls)| {
            let (gate, stop) = (gate.clone(), stop_rx.clone());
            match serves {
                Port::Rest => tokio::spawn(http::serve::serve(listener, rest.clone(), gate, tls, stop)),
                Port::Operations => tokio::spawn(http::serve::serve(listener, ops.clone(), gate, tls, stop)),
            }
        })
        .chain(mqtt_servers)
        .collect();
    tracing::info!(
        operations_api = %ops_addr,
        mqtt = config.mqtt.network.port,
        rest = %rest_addr,
        root = %config.root().display(),
        ready_in_ms = started.elapsed().as_millis() as u64,
        "Lyre is running"
    );

    let pid_file = crate::control::pid_file(config.root());
    if let Err(err) = std::fs::write(&pid_file, std::process::id().to_string()) {
        tracing::warn!(file = %pid_file.display(), error = %err, "the pid file could not be written");
    }
    // Registered before serving ends, so a SIGTERM that arrives while a restart
    // shuts down is kept (below) rather than lost with the old image.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let exit = tokio::select! {
        () = shutdown_signal(terminate.as_mut()) => Exit::Stop,
        exit = state.control.exit_requested() => exit,
    };
    match exit {
        Exit::Stop => tracing::info!("shutting down: finishing in-flight requests"),
        Exit::Restart => tracing::info!("restarting: finishing in-flight requests"),
    }
    state.components.stop_processes();
    let _ = stop_tx.send(true);
    for server in servers {
        if let Err(err) = server.await {
            tracing::error!(error = %err, "a server task failed");
        }
    }
    services.shutdown().await;
    engine.shutdown().await;
    // A stop asked for while a restart shut down wins: the new image would not
    // hear it. From here until the new image listens, a SIGTERM takes its default
    // action (the process ends, its data already committed) instead of falling into
    // this image's handler and being lost; one that came before is seen below.
    if exit == Exit::Restart {
        // SAFETY: setting a signal's disposition to its default has no preconditions,
        // and nothing in this process relies on the handler from here on.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
        }
    }
    let stop_during_restart = exit == Exit::Restart
        && terminate.as_mut().is_some_and(|signal| futures_util::FutureExt::now_or_never(signal.recv()).is_some());
    let exit = if stop_during_restart {
        tracing::info!("a stop arrived during the restart: stopping instead");
        Exit::Stop
    } else {
        exit
    };
    tracing::info!("stopped");
    Ok(exit)
}

/// The connection bounds from the configuration; the total follows the process's
/// open-file limit unless configured.
fn connection_limits(config: &Config) -> http::serve::ConnectionLimits {
    let total = match config.http.max_connections {
        0 => {
            let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1024);
            http::serve::ConnectionLimits::total_for(nofile)
        }
        n => n,
    };
    let idle = config.http.keep_alive_timeout.min(config.http.headers_timeout);
    http::serve::ConnectionLimits {
        total,
        // One address never holds more than a quarter of the total.
        per_address: config.http.max_connections_per_address.min(total / 4).max(1),
        reserve: 32,
        header_timeout: Duration::from_millis(idle.max(1)),
    }
}

async fn shutdown_signal(terminate: Option<&mut tokio::signal::unix::Signal>) {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match terminate {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
