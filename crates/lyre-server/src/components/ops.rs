//! The component operations of the Operations API: add, deploy, package, drop, list,
//! read and write files. Every change reloads the component at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use lyre_core::{Code, Object, Value};

use crate::components::files::{pack, safe_name, safe_relative, unpack};
use crate::components::{Components, Status};
use crate::http::error::ApiError;

/// Most an unpacked deployment may hold.
const MAX_UNPACKED: u64 = 512 << 20;

const TEMPLATE_CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
const TEMPLATE_SCHEMA: &str = "# Define tables here, for example:\n# type Dog @table @export {\n#   id: ID @primaryKey\n#   name: String @indexed\n# }\n";

fn project_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(ApiError::bad_request(
            "Project name can only contain alphanumeric, dash and underscores characters",
        ));
    }
    safe_name(name).map_err(ApiError::bad_request)
}

fn message(text: String) -> Value {
    let mut out = Object::new();
    out.insert("message".into(), Value::String(text));
    Value::Object(out)
}

/// Turns a failed load into the operation's error (the component stays failed and
/// reported; other components keep serving).
fn loaded(status: Status) -> Result<(), ApiError> {
    match status {
        Status::Loaded(_) => Ok(()),
        Status::Failed(reason) => Err(ApiError::bad_request(format!("the component failed to load: {reason}"))),
    }
}

/// `add_component`: a new component from the built-in template.
pub async fn add(components: &Arc<Components>, project: &str) -> Result<Value, ApiError> {
    project_name(project)?;
    let dir = components.component_dir(project);
    if dir.exists() {
        return Err(ApiError::bad_request("Project already exists"));
    }
    let io = |e: std::io::Error| ApiError::new(Code::Internal, format!("creating the project failed: {e}"));
    std::fs::create_dir_all(&dir).map_err(io)?;
    std::fs::write(dir.join("config.yaml"), TEMPLATE_CONFIG).map_err(io)?;
    std::fs::write(dir.join("schema.graphql"), TEMPLATE_SCHEMA).map_err(io)?;
    loaded(components.reload(project).await)?;
    Ok(message(format!("Successfully added project: {project}")))
}

/// `deploy_component`: replaces the component's files with a base64 tar (optionally
/// gzipped) `payload`, or a local directory or tarball `package`, then loads it.
pub async fn deploy(
    components: &Arc<Components>,
    project: &str,
    payload: Option<String>,
    package: Option<String>,
) -> Result<Value, ApiError> {
    project_name(project)?;
    let staging = components.dir().join(format!(".deploy-{project}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let staged = match (payload, package) {
        (Some(payload), _) => {
            let archive = base64::engine::general_purpose::STANDARD
                .decode(payload.trim())
                .map_err(|e| ApiError::bad_request(format!("'payload' is not valid base64: {e}")))?;
            unpack(&archive, &staging, MAX_UNPACKED)
        }
        (None, Some(package)) => stage_package(Path::new(&package), &staging),
        (None, None) => return Err(ApiError::bad_request("Either payload or package must be provided")),
    };
    if let Err(reason) = staged {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(ApiError::bad_request(format!("the component could not be unpacked: {reason}")));
    }
    let dir = components.component_dir(project);
    let old = components.dir().join(format!(".old-{project}-{}", std::process::id()));
    let io = |e: std::io::Error| ApiError::new(Code::Internal, format!("installing the component failed: {e}"));
    if dir.exists() {
        std::fs::rename(&dir, &old).map_err(io)?;
    }
    std::fs::create_dir_all(components.dir()).map_err(io)?;
    std::fs::rename(&staging, &dir).map_err(io)?;
    let _ = std::fs::remove_dir_all(&old);
    loaded(components.reload(project).await)?;
    Ok(message(format!("Successfully deployed: {project}")))
}

/// Copies a local directory, or unpacks a local tarball, into `staging`.
fn stage_package(package: &Path, staging: &Path) -> Result<(), String> {
    if package.is_dir() {
        let archive = pack(package, true).map_err(|e| e.to_string())?;
        unpack(&archive, staging, MAX_UNPACKED)
    } else if package.is_file() {
        let archive = std::fs::read(package).map_err(|e| format!("{}: {e}", package.display()))?;
        unpack(&archive, staging, MAX_UNPACKED)
    } else {
        Err(format!("package '{}' is not a local directory or tarball", package.display()))
    }
}

/// `package_component`: the component as a base64 gzipped tar.
pub fn package(components: &Arc<Components>, project: &str, skip_node_modules: bool) -> Result<Value, ApiError> {
    project_name(project)?;
    let dir = components.component_dir(project);
    if !dir.is_dir() {
        return Err(ApiError::new(Code::NotFound, format!("Unable to locate project '{project}'")));
    }
    let tar =
        pack(&dir, skip_node_modules).map_err(|e| ApiError::new(Code::Internal, format!("packing failed: {e}")))?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tar).map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    let bytes = gz.finish().map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    let mut out = Object::new();
    out.insert("project".into(), project.into());
    out.insert("payload".into(), Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)));
    Ok(Value::Object(out))
}

/// `drop_component`: removes the component (or one of its files) and unloads it.
/// Its tables and data stay, as in Harper.
pub async fn drop(components: &Arc<Components>, project: &str, file: Option<String>) -> Result<Value, ApiError> {
    project_name(project)?;
    let dir = components.component_dir(project);
    let (target, shown) = match &file {
        Some(file) => (
            dir.join(safe_relative(file).map_err(|_| ApiError::bad_request("Invalid file path"))?),
            format!("{project}/{file}"),
        ),
        None => (dir.clone(), project.to_string()),
    };
    if !target.exists() {
        return Err(ApiError::new(Code::NotFound, format!("Unable to locate '{shown}'")));
    }
    let removed = if target.is_dir() { std::fs::remove_dir_all(&target) } else { std::fs::remove_file(&target) };
    removed.map_err(|e| ApiError::new(Code::Internal, format!("dropping failed: {e}")))?;
    let _ = components.reload(project).await;
    Ok(message(format!("Successfully dropped: {shown}")))
}

/// `get_components`: every component's files and load status.
pub fn list(components: &Arc<Components>) -> Result<Value, ApiError> {
    let status = components.status();
    let mut entries = Vec::new();
    if let Ok(read) = std::fs::read_dir(components.dir()) {
        let mut dirs: Vec<PathBuf> = read.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
        dirs.sort();
        for dir in dirs {
            let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
            if name.starts_with('.') {
                continue;
            }
            let mut entry = tree(&dir, &name);
            let mut state = Object::new();
            match status.get(&name) {
                Some(Status::Loaded(_)) => {
                    state.insert("status".into(), "healthy".into());
                    state.insert("message".into(), "All components loaded successfully".into());
                }
                Some(Status::Failed(reason)) => {
                    state.insert("status".into(), "error".into());
                    state.insert("message".into(), reason.clone().into());
                }
                None => {
                    state.insert("status".into(), "unloaded".into());
                }
            }
            entry.insert("status".into(), Value::Object(state));
            entries.push(Value::Object(entry));
        }
    }
    let mut out = Object::new();
    out.insert("name".into(), "components".into());
    out.insert("entries".into(), Value::Array(entries));
    Ok(Value::Object(out))
}

fn tree(path: &Path, name: &str) -> Object {
    let mut out = Object::new();
    out.insert("name".into(), name.into());
    if path.is_dir() {
        let mut children: Vec<PathBuf> =
            std::fs::read_dir(path).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        children.sort();
        let entries = children
            .iter()
            .filter_map(|child| {
                let child_name = child.file_name()?.to_str()?;
                (!child_name.starts_with('.') && child_name != "node_modules")
                    .then(|| Value::Object(tree(child, child_name)))
            })
            .collect();
        out.insert("entries".into(), Value::Array(entries));
    } else if let Ok(meta) = std::fs::metadata(path) {
        out.insert("size".into(), Value::Int(i64::try_from(meta.len()).unwrap_or(i64::MAX)));
    }
    out
}

/// `get_component_file`: a file's text.
pub fn get_file(components: &Arc<Components>, project: &str, file: &str) -> Result<Value, ApiError> {
    project_name(project)?;
    let relative = safe_relative(file).map_err(|_| ApiError::bad_request("Invalid file path"))?;
    let path = components.component_dir(project).join(relative);
    let text = std::fs::read(&path)
        .map_err(|_| ApiError::new(Code::NotFound, format!("Component file not found '{project}/{file}'")))?;
    let mut out = Object::new();
    out.insert("message".into(), Value::String(String::from_utf8_lossy(&text).into_owned()));
    out.insert("size".into(), Value::Int(text.len() as i64));
    Ok(Value::Object(out))
}

/// `set_component_file`: writes a file (creating directories) and reloads.
pub async fn set_file(
    components: &Arc<Components>,
    project: &str,
    file: &str,
    payload: &str,
    base64: bool,
) -> Result<Value, ApiError> {
    project_name(project)?;
    let relative = safe_relative(file).map_err(|_| ApiError::bad_request("Invalid file path"))?;
    let path = components.component_dir(project).join(relative);
    let bytes = if base64 {
        base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map_err(|e| ApiError::bad_request(format!("'payload' is not valid base64: {e}")))?
    } else {
        payload.as_bytes().to_vec()
    };
    let io = |e: std::io::Error| ApiError::new(Code::Internal, format!("writing the file failed: {e}"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(&path, bytes).map_err(io)?;
    loaded(components.reload(project).await)?;
    Ok(message(format!("Successfully set component: {file}")))
}
