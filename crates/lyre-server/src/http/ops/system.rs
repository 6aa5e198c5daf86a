//! What the server tells about itself: `read_log` (its log file) and
//! `system_information` (the machine, the process, the tables).

use std::sync::Arc;

use axum::response::Response;
use lyre_core::{Object, Value};
use sysinfo::{Disks, Networks, Pid, ProcessesToUpdate, System};

use crate::app::AppState;
use crate::http::blocking::blocking;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};
use crate::telemetry::LOG_FILE;
use crate::telemetry::read::{LogQuery, read_log as read_entries};

/// Harper's log levels, which `level` must name.
const LEVELS: [&str; 7] = ["notify", "fatal", "error", "warn", "info", "debug", "trace"];
/// Most entries one `read_log` answers.
const MAX_LOG_LIMIT: usize = 100_000;
/// The parts of `system_information`, all answered when none is asked for.
const PARTS: [&str; 10] =
    ["system", "time", "cpu", "memory", "disk", "network", "harperdb_processes", "table_size", "metrics", "threads"];

/// `read_log`: entries of the log file, filtered by `level` (exactly), `from` and
/// `until`/`to` (ISO 8601, inclusive) and `filter` (text in the message), paged by
/// `start` and `limit` (1,000 by default), in file order or by time (`order`).
pub async fn read_log(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let start = params.count(&["start"])?.unwrap_or(0);
    let limit = params.count(&["limit"])?.unwrap_or(1000);
    if limit == 0 || limit > MAX_LOG_LIMIT {
        return Err(ApiError::bad_request(format!("'limit' must be between 1 and {MAX_LOG_LIMIT}")));
    }
    let level = params.string(&["level"])?;
    if let Some(level) = &level
        && !LEVELS.contains(&level.as_str())
    {
        return Err(ApiError::bad_request(format!("'level' must be one of [{}]", LEVELS.join(", "))));
    }
    let descending = match params.string(&["order"])?.as_deref() {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(ApiError::bad_request("'order' must be one of [asc, desc]")),
    };
    let from = date(&mut params, "from")?;
    let until = match date(&mut params, "to")? {
        Some(to) => Some(to),
        None => date(&mut params, "until")?,
    };
    match params.string(&["log_name"])?.as_deref() {
        None | Some(LOG_FILE) | Some("hdb.log") => {}
        Some(other) => return Err(ApiError::bad_request(format!("'log_name' '{other}' does not exist."))),
    }
    let query = LogQuery { start, limit, level, from, until, filter: params.string(&["filter"])?, descending };
    let path = state.control.root().join("log").join(LOG_FILE);
    let entries = blocking("reading the log", move || {
        read_entries(&path, &query)
            .map_err(|err| ApiError::new(lyre_core::Code::Internal, format!("reading the log failed: {err}")))
    })
    .await?;
    reply(format, &entries)
}

/// An optional ISO 8601 date parameter, in ms.
fn date(params: &mut Params, key: &str) -> Result<Option<f64>, ApiError> {
    match params.string(&[key])? {
        None => Ok(None),
        Some(text) => lyre_core::parse_iso8601(&text)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("'{key}' date '{text}' is invalid."))),
    }
}

/// `system_information`: the parts named in `attributes` (all when none are), in
/// Harper's shape: `system`, `time`, `cpu`, `memory`, `disk`, `network`,
/// `harperdb_processes` (this process), `table_size`, `metrics` (per database),
/// `threads`. Unknown names are ignored, as Harper does.
pub async fn system_information(
    state: &Arc<AppState>,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let asked: Vec<String> = params
        .array(&["attributes"])?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| match name {
            Value::String(name) if name == "database_metrics" => Some("metrics".to_string()),
            Value::String(name) => Some(name),
            _ => None,
        })
        .collect();
    let wanted = |part: &str| asked.is_empty() || asked.iter().any(|name| name == part);
    let parts: Vec<&'static str> = PARTS.into_iter().filter(|part| wanted(part)).collect();
    let state = state.clone();
    let out = blocking("reading the system's information", move || {
        let mut out = Object::default();
        let mut machine = None;
        for part in parts {
            let value = match part {
                "table_size" => table_sizes(&state),
                "metrics" => database_metrics(&state),
                "threads" => threads(),
                "time" => time(&state),
                other => {
                    let machine = machine.get_or_insert_with(Machine::read);
                    machine.part(other)
                }
            };
            out.insert(part.to_string(), value);
        }
        Ok::<_, ApiError>(Value::Object(out))
    })
    .await?;
    reply(format, &out)
}

/// What sysinfo reads of the machine and this process, once per request.
struct Machine {
    system: Option<System>,
}

impl Machine {
    fn read() -> Machine {
        let system = System::new().ok().map(|mut system| {
            system.refresh_memory();
            system.refresh_cpu_all();
            // CPU load is the difference between two readings.
            std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
            system.refresh_cpu_usage();
            system.refresh_processes(ProcessesToUpdate::Some(&[Pid::from_u32(std::process::id())]), true);
            system
        });
        Machine { system }
    }

    fn part(&self, part: &str) -> Value {
        let mut out = Object::default();
        let mut put = |key: &str, value: Value| _ = out.insert(key.to_string(), value);
        match part {
            "system" => {
                put("platform", std::env::consts::OS.into());
                put("distro", System::long_os_version().ok().map_or(Value::Null, Value::from));
                put("release", System::os_version().ok().map_or(Value::Null, Value::from));
                put("kernel", System::kernel_version().ok().map_or(Value::Null, Value::from));
                put("arch", System::cpu_arch().into());
                put("hostname", System::host_name().ok().map_or(Value::Null, Value::from));
                put("lyre_version", env!("CARGO_PKG_VERSION").into());
            }
            "cpu" => {
                let cpus = self.system.as_ref().map(System::cpus).unwrap_or_default();
                let first = cpus.first();
                put("manufacturer", first.map_or(Value::Null, |c| c.vendor_id().into()));
                put("brand", first.map_or(Value::Null, |c| c.brand().into()));
                put("speed", first.map_or(Value::Null, |c| Value::Float(c.frequency() as f64 / 1000.0)));
                put("cores", Value::Int(cpus.len() as i64));
                put("physicalCores", System::physical_core_count().map_or(Value::Null, |n| Value::Int(n as i64)));
                let load = self.system.as_ref().map_or(0.0, System::global_cpu_usage);
                let mut current = Object::default();
                current.insert("currentLoad".into(), Value::Float(f64::from(load)));
                let per_cpu = cpus.iter().map(|cpu| {
                    let mut one = Object::default();
                    one.insert("load".into(), Value::Float(f64::from(cpu.usage())));
                    Value::Object(one)
                });
                current.insert("cpus".into(), Value::Array(per_cpu.collect()));
                if let Ok(average) = System::load_average() {
                    current.insert("avgLoad".into(), Value::Float(average.one));
                }
                put("current_load", Value::Object(current));
            }
            "memory" => {
                if let Some(system) = &self.system {
                    put("total", Value::Int(system.total_memory() as i64));
                    put("free", Value::Int(system.free_memory() as i64));
                    put("used", Value::Int(system.used_memory() as i64));
                    put("available", Value::Int(system.available_memory() as i64));
                    put("swaptotal", Value::Int(system.total_swap() as i64));
                    put("swapused", Value::Int(system.used_swap() as i64));
                    put("swapfree", Value::Int(system.free_swap() as i64));
                    if let Some(process) = system.process(Pid::from_u32(std::process::id())) {
                        put("rss", Value::Int(process.memory() as i64));
                    }
                }
            }
            "disk" => {
                let disks = Disks::new_with_refreshed_list().map(|disks| {
                    disks
                        .iter()
                        .map(|disk| {
                            let mut one = Object::default();
                            one.insert("fs".into(), disk.name().to_string_lossy().into_owned().into());
                            one.insert("type".into(), disk.file_system().to_string_lossy().into_owned().into());
                            one.insert("size".into(), Value::Int(disk.total_space() as i64));
                            let used = disk.total_space().saturating_sub(disk.available_space());
                            one.insert("used".into(), Value::Int(used as i64));
                            one.insert("available".into(), Value::Int(disk.available_space() as i64));
                            one.insert("mount".into(), disk.mount_point().display().to_string().into());
                            Value::Object(one)
                        })
                        .collect::<Vec<_>>()
                });
                put("size", Value::Array(disks.unwrap_or_default()));
            }
            "network" => {
                let interfaces = Networks::new_with_refreshed_list().map(|networks| {
                    networks
                        .iter()
                        .map(|(name, data)| {
                            let mut one = Object::default();
                            one.insert("iface".into(), name.to_string_lossy().into_owned().into());
                            one.insert("mac".into(), data.mac_address().to_string().into());
                            one.insert("rx_bytes".into(), Value::Int(data.total_received() as i64));
                            one.insert("tx_bytes".into(), Value::Int(data.total_transmitted() as i64));
                            Value::Object(one)
                        })
                        .collect::<Vec<_>>()
                });
                put("interfaces", Value::Array(interfaces.unwrap_or_default()));
            }
            "harperdb_processes" => {
                let pid = std::process::id();
                let this = self.system.as_ref().and_then(|system| system.process(Pid::from_u32(pid))).map(|process| {
                    let mut one = Object::default();
                    one.insert("pid".into(), Value::Int(i64::from(pid)));
                    one.insert("name".into(), process.name().to_string_lossy().into_owned().into());
                    one.insert("cpu".into(), Value::Float(f64::from(process.cpu_usage())));
                    one.insert("memRss".into(), Value::Int(process.memory() as i64));
                    one.insert("memVsz".into(), Value::Int(process.virtual_memory() as i64));
                    one.insert("started".into(), Value::Int(process.start_time() as i64 * 1000));
                    Value::Object(one)
                });
                put("core", Value::Array(this.into_iter().collect()));
            }
            _ => {}
        }
        Value::Object(out)
    }
}

/// `time`: now, the machine's uptime and the process's, when the server started
/// (ms since the epoch; a restart in place changes it, which is how the console
/// knows a restart happened), the time zone.
fn time(state: &AppState) -> Value {
    let mut out = Object::default();
    let now = std::time::SystemTime::now();
    out.insert("current".into(), Value::Int(lyre_core::now_ms() as i64));
    out.insert("uptime".into(), System::uptime().map_or(Value::Null, |s| Value::Int(s as i64)));
    let running = now.duration_since(state.control.started).map_or(0, |d| d.as_secs());
    out.insert("process_uptime".into(), Value::Int(running as i64));
    let started = state.control.started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    out.insert("process_started".into(), Value::Int(started as i64));
    out.insert("timezone".into(), chrono::Local::now().format("%:z").to_string().into());
    Value::Object(out)
}

/// `table_size`: per table, its records and bytes, and its database's log's bytes.
fn table_sizes(state: &AppState) -> Value {
    let mut out = Vec::new();
    for db in state.engine.databases() {
        for stats in db.all_table_stats() {
            let mut one = Object::default();
            one.insert("schema".into(), db.name().into());
            one.insert("table".into(), stats.schema.name.clone().into());
            one.insert("table_size".into(), Value::Int(stats.table_size as i64));
            one.insert("record_count".into(), Value::Int(stats.record_count as i64));
            one.insert("transaction_log_size".into(), Value::Int(stats.db_audit_size as i64));
            out.push(Value::Object(one));
        }
    }
    Value::Array(out)
}

/// `metrics`: per database, its file's size and its log's, and per table its
/// records and bytes.
fn database_metrics(state: &AppState) -> Value {
    let mut out = Object::default();
    for db in state.engine.databases() {
        let mut tables = Object::default();
        let (mut size, mut audit) = (0, 0);
        for stats in db.all_table_stats() {
            (size, audit) = (stats.db_size, stats.db_audit_size);
            let mut one = Object::default();
            one.insert("entryCount".into(), Value::Int(stats.record_count as i64));
            one.insert("size".into(), Value::Int(stats.table_size as i64));
            tables.insert(stats.schema.name.clone(), Value::Object(one));
        }
        let mut one = Object::default();
        one.insert("size".into(), Value::Int(size as i64));
        one.insert("audit".into(), Value::Int(audit as i64));
        one.insert("tables".into(), Value::Object(tables));
        out.insert(db.name().to_string(), Value::Object(one));
    }
    Value::Object(out)
}

/// `threads`: the process's threads, by name (from `/proc/self/task`).
fn threads() -> Value {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Value::Array(Vec::new()) };
    let threads = tasks.filter_map(Result::ok).map(|task| {
        let id: i64 = task.file_name().to_string_lossy().parse().unwrap_or(0);
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let mut one = Object::default();
        one.insert("threadId".into(), Value::Int(id));
        one.insert("name".into(), name.trim().into());
        Value::Object(one)
    });
    Value::Array(threads.collect())
}
