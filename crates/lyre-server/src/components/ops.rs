//! The component operations of the Operations API: add, deploy, package, drop, list,
//! read and write files. Every change reloads the component at once.
//!
//! File work runs on the blocking pool: a package path can name anything on the
//! machine (a huge tree, a device that never answers), and a request must not hold
//! up the workers every other request runs on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use lyre_core::{Code, Object, Value};

use crate::components::files::{copy_tree, no_links, pack, safe_name, safe_relative, unpack};
use crate::components::{Components, Status};
use crate::http::error::ApiError;

/// Most an unpacked deployment may hold.
const MAX_UNPACKED: u64 = 512 << 20;

/// Largest file `get_component_file` returns (Harper's
/// `operationsApi.componentFile.maxSize` default).
const MAX_FILE_READ: u64 = 5 << 20;

/// Directories a package is never read from: their files can block forever or never end.
const NOT_PACKAGES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Largest tarball `deploy_component` downloads for an HTTP(S) `package`.
const MAX_DOWNLOAD: u64 = 128 << 20;

/// Longest a package download may take, from connecting to its last byte.
const DOWNLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::http::blocking::blocking("file work", work).await
}

/// A file-system failure: the client's mistake (a directory where a file is meant, a
/// name too long, ...) is 400 naming it; anything else is 500.
fn file_error(what: &str, err: std::io::Error) -> ApiError {
    // EEXIST, ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG
    let clients =
        matches!(err.raw_os_error(), Some(17 | 20 | 21 | 22 | 36)) || err.kind() == std::io::ErrorKind::InvalidInput;
    let code = if clients { Code::BadRequest } else { Code::Internal };
    ApiError::new(code, format!("{what} failed: {err}"))
}

/// A file path inside `project`'s directory, refused when it leaves it, names the
/// directory itself, or passes through a symbolic link.
fn project_file(components: &Components, project: &str, file: &str) -> Result<PathBuf, ApiError> {
    let dir = project_dir(components, project)?;
    let relative = safe_relative(file).map_err(|_| ApiError::bad_request("Invalid file path"))?;
    no_links(&dir, &relative).map_err(ApiError::bad_request)?;
    Ok(dir.join(relative))
}

/// `project`'s directory, refused when it is itself a symbolic link (one placed by
/// hand would let file operations, packing and dropping reach outside the root).
fn project_dir(components: &Components, project: &str) -> Result<PathBuf, ApiError> {
    let dir = components.component_dir(project);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.file_type().is_symlink() => {
            Err(ApiError::bad_request(format!("the component directory '{project}' is a symbolic link")))
        }
        _ => Ok(dir),
    }
}

/// How a file's bytes travel as text (`encoding`): `utf8` (the default) or `base64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Encoding {
    /// Text.
    Utf8,
    /// Binary, base64-encoded.
    Base64,
}

impl Encoding {
    /// Reads the `encoding` parameter.
    pub fn parse(name: Option<&str>) -> Result<Encoding, ApiError> {
        match name.map(str::to_ascii_lowercase).as_deref() {
            None | Some("utf8" | "utf-8") => Ok(Encoding::Utf8),
            Some("base64") => Ok(Encoding::Base64),
            Some(other) => Err(ApiError::bad_request(format!("'encoding' must be utf8 or base64, not '{other}'"))),
        }
    }
}

const TEMPLATE_CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
const TEMPLATE_SCHEMA: &str = "# Define tables here, for example:\n# type Dog @table @export {\n#   id: ID @primaryKey\n#   name: String @indexed\n# }\n";

fn project_name(name: &str) -> Result<(), ApiError> {
    if name.len() > 100 {
        return Err(ApiError::bad_request("Project names can be at most 100 characters"));
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(ApiError::bad_request(
            "Project name can only contain alphanumeric, dash and underscores characters",
        ));
    }
    safe_name(name).map_err(ApiError::bad_request)
}

fn message(text: String) -> Value {
    let mut out = Object::default();
    out.insert("message".into(), Value::String(text));
    Value::Object(out)
}

/// Turns a failed load into the operation's error (the component stays failed and
/// reported, or serves its tables without its scripts; other components keep
/// serving).
fn loaded(status: Status) -> Result<(), ApiError> {
    match status {
        Status::Loaded(_) => Ok(()),
        Status::ScriptsFailed(_, reason) => Err(ApiError::bad_request(format!(
            "the component's scripts failed to load (its tables are served without them): {reason}"
        ))),
        Status::Failed(reason) => Err(ApiError::bad_request(format!("the component failed to load: {reason}"))),
    }
}

/// `add_component`: a new component from the built-in template.
pub async fn add(components: &Arc<Components>, project: &str) -> Result<Value, ApiError> {
    project_name(project)?;
    let dir = components.component_dir(project);
    blocking(move || {
        if dir.exists() {
            return Err(ApiError::bad_request("Project already exists"));
        }
        let io = |e| file_error("creating the project", e);
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::write(dir.join("config.yaml"), TEMPLATE_CONFIG).map_err(io)?;
        std::fs::write(dir.join("schema.graphql"), TEMPLATE_SCHEMA).map_err(io)
    })
    .await?;
    loaded(components.reload(project).await)?;
    Ok(message(format!("Successfully added project: {project}")))
}

/// `deploy_component`: replaces the component's files with a base64 tar (optionally
/// gzipped) `payload`, or a `package`: a tarball's HTTP(S) URL, or a local directory
/// or tarball; then loads it.
pub async fn deploy(
    components: &Arc<Components>,
    project: &str,
    payload: Option<String>,
    package: Option<String>,
) -> Result<Value, ApiError> {
    project_name(project)?;
    let staging = components.dir().join(format!(".deploy-{project}-{}", std::process::id()));
    let archive = match (payload, package) {
        (Some(payload), _) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(payload.trim())
                .map_err(|e| ApiError::bad_request(format!("'payload' is not valid base64: {e}")))?,
        ),
        (None, Some(url))
            if ["http://", "https://"]
                .iter()
                .any(|s| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s))) =>
        {
            Some(download_package(&url).await?)
        }
        (None, Some(package)) => {
            let package = PathBuf::from(package);
            let staged = staging.clone();
            return deploy_staged(components, project, staging, move || stage_package(&package, &staged)).await;
        }
        (None, None) => return Err(ApiError::bad_request("Either payload or package must be provided")),
    };
    let staged = staging.clone();
    let archive = archive.unwrap_or_default();
    deploy_staged(components, project, staging, move || unpack(&archive, &staged, MAX_UNPACKED)).await
}

/// Fills `staging` with `stage`, swaps it in for the component's directory, and loads
/// it; when the new version fails to load, the previous one is put back and reloaded.
async fn deploy_staged(
    components: &Arc<Components>,
    project: &str,
    staging: PathBuf,
    stage: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<Value, ApiError> {
    let dir = project_dir(components, project)?;
    let old = components.dir().join(format!(".old-{project}-{}", std::process::id()));
    let root = components.dir().to_path_buf();
    let (swap_dir, swap_old) = (dir.clone(), old.clone());
    let had_old = blocking(move || {
        let _ = std::fs::remove_dir_all(&staging);
        if let Err(reason) = stage() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(ApiError::bad_request(format!("the component could not be unpacked: {reason}")));
        }
        let io = |e| file_error("installing the component", e);
        let _ = std::fs::remove_dir_all(&swap_old);
        let had_old = swap_dir.exists();
        if had_old {
            std::fs::rename(&swap_dir, &swap_old).map_err(io)?;
        }
        std::fs::create_dir_all(&root).map_err(io)?;
        std::fs::rename(&staging, &swap_dir).map_err(io)?;
        Ok(had_old)
    })
    .await?;
    let status = components.reload(project).await;
    if status.failure().is_some() && had_old {
        // Keep the working version: the failed one is reported, not installed.
        let (failed_dir, kept) = (dir.clone(), old.clone());
        blocking(move || {
            let _ = std::fs::remove_dir_all(&failed_dir);
            std::fs::rename(&kept, &failed_dir).map_err(|e| file_error("restoring the previous version", e))
        })
        .await?;
        let _ = components.reload(project).await;
    } else {
        let _ = blocking(move || Ok(std::fs::remove_dir_all(&old))).await;
    }
    loaded(status)?;
    Ok(message(format!("Successfully deployed: {project}")))
}

/// Downloads a package tarball: at most [`MAX_DOWNLOAD`] bytes within
/// [`DOWNLOAD_TIMEOUT`], through the outbound client (5 redirects at most); fails
/// with 400 naming the URL and why.
async fn download_package(url: &str) -> Result<Vec<u8>, ApiError> {
    use futures_util::StreamExt as _;
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ApiError::bad_request(format!("the package URL could not be downloaded: it is invalid: {e}")))?;
    // Messages name the URL without its credentials.
    let mut shown = parsed.clone();
    let _ = shown.set_password(None);
    let _ = shown.set_username("");
    let failed =
        |reason: String| ApiError::bad_request(format!("the package {shown} could not be downloaded: {reason}"));
    // A package fetched over HTTPS is never handed over to plain HTTP by a redirect.
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= 5 {
            attempt.error("more than 5 redirects")
        } else if attempt.url().scheme() == "http" && attempt.previous().iter().any(|u| u.scheme() == "https") {
            attempt.error("a redirect from HTTPS to HTTP was refused")
        } else {
            attempt.follow()
        }
    });
    let client = crate::outbound::client(crate::bulk::download::CONNECT_TIMEOUT)
        .redirect(redirects)
        .read_timeout(crate::bulk::download::READ_TIMEOUT)
        .timeout(DOWNLOAD_TIMEOUT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let response = client.get(parsed).send().await.map_err(|e| failed(crate::outbound::describe(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(failed(format!("it answered {status}")));
    }
    let too_large = || failed(format!("it is larger than {MAX_DOWNLOAD} bytes"));
    if response.content_length().is_some_and(|length| length > MAX_DOWNLOAD) {
        return Err(too_large());
    }
    let mut archive = Vec::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| failed(crate::outbound::describe(&e)))?;
        if (archive.len() + chunk.len()) as u64 > MAX_DOWNLOAD {
            return Err(too_large());
        }
        archive.extend_from_slice(&chunk);
    }
    Ok(archive)
}

/// Copies a local directory, or unpacks a local tarball, into `staging`.
fn stage_package(package: &Path, staging: &Path) -> Result<(), String> {
    // The path as given is checked before it is resolved (`/proc/self/cwd` resolves
    // to an ordinary directory), and again once resolved (a link into `/proc`).
    let given = std::path::absolute(package).map_err(|e| format!("{}: {e}", package.display()))?;
    let real = std::fs::canonicalize(package).map_err(|e| format!("{}: {e}", package.display()))?;
    for path in [&given, &real] {
        if NOT_PACKAGES.iter().any(|dir| path.starts_with(dir)) {
            return Err(format!("package '{}' is in {}, which is not read", package.display(), path.display()));
        }
    }
    if package.is_dir() {
        copy_tree(package, staging, MAX_UNPACKED).map_err(|e| format!("{}: {e}", package.display()))
    } else if package.is_file() {
        let size = std::fs::metadata(package).map_err(|e| format!("{}: {e}", package.display()))?.len();
        if size > MAX_UNPACKED {
            return Err(format!("{} is larger than {MAX_UNPACKED} bytes", package.display()));
        }
        let archive = std::fs::read(package).map_err(|e| format!("{}: {e}", package.display()))?;
        unpack(&archive, staging, MAX_UNPACKED)
    } else {
        Err(format!(
            "package '{}' is not a tarball's HTTP(S) URL, a local directory or a local tarball",
            package.display()
        ))
    }
}

/// `package_component`: the component as a base64 gzipped tar.
pub async fn package(components: &Arc<Components>, project: &str, skip_node_modules: bool) -> Result<Value, ApiError> {
    project_name(project)?;
    let dir = project_dir(components, project)?;
    let shown = project.to_string();
    let bytes = blocking(move || {
        if !dir.is_dir() {
            return Err(ApiError::new(Code::NotFound, format!("Unable to locate project '{shown}'")));
        }
        let tar = pack(&dir, skip_node_modules, MAX_UNPACKED).map_err(|e| file_error("packing", e))?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &tar).map_err(|e| file_error("packing", e))?;
        gz.finish().map_err(|e| file_error("packing", e))
    })
    .await?;
    let mut out = Object::default();
    out.insert("project".into(), project.into());
    out.insert("payload".into(), Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)));
    Ok(Value::Object(out))
}

/// `drop_component`: removes the component (or one of its files) and unloads it.
/// Its tables and data stay, as in Harper.
pub async fn drop(components: &Arc<Components>, project: &str, file: Option<String>) -> Result<Value, ApiError> {
    project_name(project)?;
    let (target, shown) = match &file {
        Some(file) => (project_file(components, project, file)?, format!("{project}/{file}")),
        None => (project_dir(components, project)?, project.to_string()),
    };
    let missing = format!("Unable to locate '{shown}'");
    blocking(move || {
        let Ok(meta) = std::fs::symlink_metadata(&target) else {
            return Err(ApiError::new(Code::NotFound, missing));
        };
        let removed = if meta.is_dir() { std::fs::remove_dir_all(&target) } else { std::fs::remove_file(&target) };
        removed.map_err(|e| file_error("dropping", e))
    })
    .await?;
    let _ = components.reload(project).await;
    Ok(message(format!("Successfully dropped: {shown}")))
}

/// `get_components`: every component's files and load status.
pub async fn list(components: &Arc<Components>) -> Result<Value, ApiError> {
    let components = components.clone();
    blocking(move || Ok(list_now(&components))).await
}

fn list_now(components: &Components) -> Value {
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
            let mut state = Object::default();
            match status.get(&name).map(Status::failure) {
                Some(None) => {
                    state.insert("status".into(), "healthy".into());
                    state.insert("message".into(), "All components loaded successfully".into());
                }
                Some(Some(reason)) => {
                    state.insert("status".into(), "error".into());
                    state.insert("message".into(), reason.into());
                }
                None => {
                    state.insert("status".into(), "unloaded".into());
                }
            }
            entry.insert("status".into(), Value::Object(state));
            entries.push(Value::Object(entry));
        }
    }
    let mut out = Object::default();
    out.insert("name".into(), "components".into());
    out.insert("entries".into(), Value::Array(entries));
    Value::Object(out)
}

/// A directory's files and subdirectories (symbolic links are not followed).
fn tree(path: &Path, name: &str) -> Object {
    let mut out = Object::default();
    out.insert("name".into(), name.into());
    let Ok(meta) = std::fs::symlink_metadata(path) else { return out };
    if meta.is_dir() {
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
    } else if meta.is_file() {
        out.insert("size".into(), Value::Int(i64::try_from(meta.len()).unwrap_or(i64::MAX)));
    }
    out
}

/// `get_component_file`: a regular file's contents, as text or base64.
pub async fn get_file(
    components: &Arc<Components>,
    project: &str,
    file: &str,
    encoding: Encoding,
) -> Result<Value, ApiError> {
    project_name(project)?;
    let path = project_file(components, project, file)?;
    let missing = format!("Component file not found '{project}/{file}'");
    let bytes = blocking(move || {
        // Only a regular file: a FIFO or device could block the read forever.
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() > MAX_FILE_READ => {
                Err(ApiError::new(Code::PayloadTooLarge, format!("the file is larger than {MAX_FILE_READ} bytes")))
            }
            Ok(meta) if meta.is_file() => std::fs::read(&path).map_err(|e| file_error("reading the file", e)),
            _ => Err(ApiError::new(Code::NotFound, missing)),
        }
    })
    .await?;
    let text = match encoding {
        Encoding::Utf8 => String::from_utf8_lossy(&bytes).into_owned(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&bytes),
    };
    let mut out = Object::default();
    out.insert("message".into(), Value::String(text));
    out.insert("size".into(), Value::Int(bytes.len() as i64));
    Ok(Value::Object(out))
}

/// `set_component_file`: writes a file (creating directories) and reloads.
pub async fn set_file(
    components: &Arc<Components>,
    project: &str,
    file: &str,
    payload: &str,
    encoding: Encoding,
) -> Result<Value, ApiError> {
    project_name(project)?;
    let path = project_file(components, project, file)?;
    let bytes = match encoding {
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map_err(|e| ApiError::bad_request(format!("'payload' is not valid base64: {e}")))?,
        Encoding::Utf8 => payload.as_bytes().to_vec(),
    };
    blocking(move || {
        let io = |e| file_error("writing the file", e);
        // Only a regular file is replaced: opening a FIFO to write would block.
        if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_file()) {
            return Err(ApiError::bad_request("the path names something other than a regular file"));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, bytes).map_err(io)
    })
    .await?;
    loaded(components.reload(project).await)?;
    Ok(message(format!("Successfully set component: {file}")))
}

/// Harper's legacy custom-function operations, over the same components: a
/// project is a component, and a custom function a file `<type>/<file>.js` in it,
/// `type` being `helpers` or `routes` (route files are Fastify routes, which Lyre
/// refuses to load by name, see `fastifyRoutes`; helpers are plain modules).
pub mod custom_functions {
    use super::*;

    /// Harper's message for a project that does not exist.
    const NO_PROJECT: &str = "Project does not exist. Create one using 'add_custom_function_project'";

    /// A name as Harper reads it (`path.parse(name).name`): its last path segment
    /// without its extension.
    pub fn plain_name(name: &str) -> String {
        let last = name.rsplit('/').next().unwrap_or(name);
        match last.rfind('.') {
            Some(at) if at > 0 => last[..at].to_string(),
            _ => last.to_string(),
        }
    }

    /// `helpers` or `routes`.
    pub fn kind(kind: &str) -> Result<&str, ApiError> {
        match kind {
            "helpers" | "routes" => Ok(kind),
            _ => Err(ApiError::bad_request("'type' must be one of [helpers, routes]")),
        }
    }

    fn file_name(file: &str) -> Result<(), ApiError> {
        if file.is_empty() || !file.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ApiError::bad_request(
                "File name can only contain alphanumeric, dash and underscore characters",
            ));
        }
        Ok(())
    }

    /// The project's directory, which must exist.
    fn existing_project(components: &Components, project: &str) -> Result<PathBuf, ApiError> {
        project_name(project)?;
        let dir = components.component_dir(project);
        if !dir.is_dir() {
            return Err(ApiError::bad_request(NO_PROJECT));
        }
        Ok(dir)
    }

    /// `custom_functions_status`: where projects live and on which port they answer.
    pub fn status(components: &Components, port: u16) -> Value {
        let mut out = Object::default();
        out.insert("port".into(), Value::Int(i64::from(port)));
        out.insert("directory".into(), Value::String(components.dir().display().to_string()));
        out.insert("is_enabled".into(), Value::Bool(true));
        Value::Object(out)
    }

    /// `get_custom_functions`: each project's `routes` and `helpers` files, by name.
    pub async fn list(components: &Arc<Components>) -> Result<Value, ApiError> {
        let root = components.dir().to_path_buf();
        blocking(move || {
            let names_in = |dir: PathBuf| -> Vec<Value> {
                let mut names: Vec<String> = std::fs::read_dir(dir)
                    .map(|entries| {
                        entries
                            .flatten()
                            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".js").map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                names.into_iter().map(Value::String).collect()
            };
            let mut projects: Vec<PathBuf> = std::fs::read_dir(&root)
                .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
                .unwrap_or_default();
            projects.sort();
            let mut out = Object::default();
            for dir in projects {
                let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
                if name.starts_with('.') {
                    continue;
                }
                let mut entry = Object::default();
                entry.insert("routes".into(), Value::Array(names_in(dir.join("routes"))));
                entry.insert("helpers".into(), Value::Array(names_in(dir.join("helpers"))));
                out.insert(name, Value::Object(entry));
            }
            Ok(Value::Object(out))
        })
        .await
    }

    /// The path of custom function `file` of `kind` in `project`, which must exist.
    fn existing_file(components: &Components, project: &str, kind: &str, file: &str) -> Result<PathBuf, ApiError> {
        let dir = existing_project(components, project)?;
        file_name(file)?;
        let path = dir.join(kind).join(format!("{file}.js"));
        if !std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_file()) {
            return Err(ApiError::bad_request("File does not exist"));
        }
        Ok(path)
    }

    /// `get_custom_function`: a custom function's text.
    pub async fn get(components: &Arc<Components>, project: &str, kind: &str, file: &str) -> Result<Value, ApiError> {
        let path = existing_file(components, project, kind, file)?;
        let text = blocking(move || match std::fs::metadata(&path) {
            Ok(meta) if meta.len() > MAX_FILE_READ => {
                Err(ApiError::new(Code::PayloadTooLarge, format!("the file is larger than {MAX_FILE_READ} bytes")))
            }
            _ => std::fs::read_to_string(&path).map_err(|e| file_error("reading the custom function", e)),
        })
        .await?;
        Ok(message(text))
    }

    /// `set_custom_function`: writes a custom function (creating its directory) and
    /// reloads the project.
    pub async fn set(
        components: &Arc<Components>,
        project: &str,
        kind: &str,
        file: &str,
        content: String,
    ) -> Result<Value, ApiError> {
        let dir = existing_project(components, project)?;
        file_name(file)?;
        if content.is_empty() {
            return Err(ApiError::bad_request("'function_content' is not allowed to be empty"));
        }
        let path = dir.join(kind).join(format!("{file}.js"));
        blocking(move || {
            let io = |e| file_error("writing the custom function", e);
            if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_file()) {
                return Err(ApiError::bad_request("the path names something other than a regular file"));
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            std::fs::write(&path, content).map_err(io)
        })
        .await?;
        // The file is written whatever its load says (the component's status has it).
        let _ = components.reload(project).await;
        Ok(message(format!("Successfully updated custom function: {file}.js")))
    }

    /// `drop_custom_function`: removes a custom function and reloads the project.
    pub async fn drop(components: &Arc<Components>, project: &str, kind: &str, file: &str) -> Result<Value, ApiError> {
        let path = existing_file(components, project, kind, file)?;
        blocking(move || std::fs::remove_file(&path).map_err(|e| file_error("dropping the custom function", e)))
            .await?;
        let _ = components.reload(project).await;
        Ok(message(format!("Successfully deleted custom function: {file}.js")))
    }

    /// `drop_custom_function_project`: removes the project and unloads it.
    pub async fn drop_project(components: &Arc<Components>, project: &str) -> Result<Value, ApiError> {
        existing_project(components, project)?;
        super::drop(components, project, None).await?;
        Ok(message(format!("Successfully deleted project: {project}")))
    }
}
