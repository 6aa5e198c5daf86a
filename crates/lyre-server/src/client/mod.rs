//! The command line as a client of a running server, as Harper's CLI is:
//! `lyre <operation> key=value …` sends one operation and prints the answer (YAML,
//! or JSON with `json=true`); `lyre status`, `lyre stop` and `lyre restart` act on
//! the server of a root (`daemon.rs`); `lyre load` streams a CSV file into a table
//! with a progress bar (`load.rs`).
//!
//! Where the server is: `target=URL`, else `$CLI_TARGET`, else the Operations API
//! port of the configuration under the root (`--root`, `$ROOTPATH`, `./lyre-data`)
//! on this machine. Who asks: `username=`/`password=`, else
//! `$HARPER_CLI_USERNAME`/`$HARPER_CLI_PASSWORD`, `$CLI_TARGET_USERNAME`/
//! `$CLI_TARGET_PASSWORD`, `$HDB_ADMIN_USERNAME`/`$HDB_ADMIN_PASSWORD`, or the
//! target URL's own user and password.

pub mod daemon;
pub mod load;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Map, Value};

use crate::cli::{ClientArgs, Command};
use crate::config::{CONFIG_FILE, Config};

/// Arguments that steer the client rather than the operation.
const CONTROL_KEYS: [&str; 4] = ["target", "username", "password", "json"];
/// How long one operation may take to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// A server to talk to, and the credentials to use.
#[derive(Debug, Clone)]
pub struct Target {
    url: reqwest::Url,
    username: Option<String>,
    password: Option<String>,
    client: reqwest::Client,
}

impl Target {
    /// Resolves the server from `target` (or the environment, or the root's
    /// configuration) and the credentials from `username`/`password` (or the
    /// environment, or the URL).
    pub fn resolve(
        target: Option<String>,
        username: Option<String>,
        password: Option<String>,
        root: Option<PathBuf>,
    ) -> anyhow::Result<Target> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut url = match target.or_else(|| env("CLI_TARGET")) {
            Some(text) => parse_target(&text)?,
            None => local_target(root)?,
        };
        let from_url = (!url.username().is_empty()).then(|| {
            let user = percent_encoding::percent_decode_str(url.username()).decode_utf8_lossy().into_owned();
            let pass = url.password().map(|p| percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned());
            (user, pass)
        });
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let pick = |given: Option<String>, names: [&str; 3], from_url: Option<String>| {
            given.or_else(|| names.iter().find_map(|name| env(name))).or(from_url)
        };
        let (url_user, url_pass) = from_url.map_or((None, None), |(u, p)| (Some(u), p));
        let username = pick(username, ["HARPER_CLI_USERNAME", "CLI_TARGET_USERNAME", "HDB_ADMIN_USERNAME"], url_user);
        let password = pick(password, ["HARPER_CLI_PASSWORD", "CLI_TARGET_PASSWORD", "HDB_ADMIN_PASSWORD"], url_pass);
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("lyre-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Target { url, username, password, client })
    }

    /// Sends `body` (an operation) and answers the HTTP status and the decoded
    /// body (a string when it is not JSON).
    pub async fn send(&self, body: &Value) -> anyhow::Result<(u16, Value)> {
        let mut request = self.client.post(self.url.clone()).json(body);
        if let Some(user) = &self.username {
            request = request.basic_auth(user, self.password.as_deref());
        }
        let response = request.send().await.with_context(|| format!("cannot reach the server at {}", self.url))?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// Sends `body` and answers its body when the server accepted it; an error with
    /// the server's message otherwise.
    pub async fn call(&self, body: &Value) -> anyhow::Result<Value> {
        let (status, answer) = self.send(body).await?;
        if status >= 400 {
            let message =
                answer.get("error").and_then(Value::as_str).map_or_else(|| answer.to_string(), str::to_string);
            bail!("{status}: {message}");
        }
        Ok(answer)
    }
}

/// `host`, `host:port` or a URL; a bare host is Harper's `https://<host>:9925`.
fn parse_target(text: &str) -> anyhow::Result<reqwest::Url> {
    if let Ok(url) = reqwest::Url::parse(text)
        && matches!(url.scheme(), "http" | "https")
    {
        return Ok(url);
    }
    let with_port = if text.contains(':') { text.to_string() } else { format!("{text}:9925") };
    reqwest::Url::parse(&format!("https://{with_port}"))
        .map_err(|err| anyhow!("'{text}' is not a server address: {err}"))
}

/// The Operations API of the server configured under the root, on this machine.
fn local_target(root: Option<PathBuf>) -> anyhow::Result<reqwest::Url> {
    let root = root_of(root);
    if !root.join(CONFIG_FILE).exists() {
        bail!("no Lyre server is set up in {} (no {CONFIG_FILE}); give target=URL or --root DIR", root.display());
    }
    let config = Config::load(Some(root), &|name| std::env::var(name).ok())?;
    let port = config.operations_api.network.port;
    Ok(reqwest::Url::parse(&format!("http://127.0.0.1:{port}/"))?)
}

/// The root directory: the one given, else `$ROOTPATH`, else `./lyre-data`.
pub fn root_of(root: Option<PathBuf>) -> PathBuf {
    root.or_else(|| std::env::var_os("ROOTPATH").map(PathBuf::from)).unwrap_or_else(|| PathBuf::from("./lyre-data"))
}

/// `lyre <operation> key=value …`: sends the operation and prints the answer;
/// fails (a non-zero exit) when the server refused it.
pub async fn run_operation(words: &[String]) -> anyhow::Result<()> {
    let (operation, pairs) = words.split_first().ok_or_else(|| anyhow!("no operation given"))?;
    let mut body = Map::new();
    body.insert("operation".into(), Value::String(operation.clone()));
    let mut control = Map::new();
    for pair in pairs {
        let (key, raw) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("'{pair}' is not key=value (values may be JSON: limit=5, attributes='[\"a\"]')"))?;
        // Harper's rule: a value that reads as JSON is that JSON, else text.
        let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
        if CONTROL_KEYS.contains(&key) {
            control.insert(key.to_string(), value);
        } else {
            body.insert(key.to_string(), value);
        }
    }
    let text = |key: &str| control.get(key).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let target = Target::resolve(text("target"), text("username"), text("password"), None)?;
    let (status, answer) = target.send(&Value::Object(body)).await?;
    let as_json = control.get("json").is_some_and(|v| v == &Value::Bool(true) || v == "true");
    println!("{}", render(&answer, as_json)?);
    if status >= 400 {
        bail!("the server answered {status}");
    }
    Ok(())
}

/// An answer as the CLI prints it: YAML, or indented JSON.
fn render(answer: &Value, as_json: bool) -> anyhow::Result<String> {
    if as_json {
        return Ok(serde_json::to_string_pretty(answer)?);
    }
    Ok(serde_saphyr::to_string(answer)?.trim_end().to_string())
}

/// Whether `command` is one the client runs (rather than a server's).
pub fn is_client_command(command: &Command) -> bool {
    matches!(
        command,
        Command::Status { .. }
            | Command::Stop { .. }
            | Command::Restart(_)
            | Command::Load { .. }
            | Command::Operation(_)
    )
}

/// Runs a client command to its end.
pub fn run(command: &Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let target = |args: &ClientArgs| {
        Target::resolve(args.target.clone(), args.username.clone(), args.password.clone(), args.root.clone())
    };
    match command {
        Command::Status { root } => {
            println!("{}", daemon::status(&root_of(root.clone())));
            Ok(())
        }
        Command::Stop { root } => daemon::stop(&root_of(root.clone())),
        Command::Restart(args) => {
            let answer = runtime.block_on(target(args)?.call(&serde_json::json!({"operation": "restart"})))?;
            println!("{}", render(&answer, false)?);
            Ok(())
        }
        Command::Load { file, table, database, action, client } => {
            let spec = load::Load {
                file: file.clone(),
                database: database.clone(),
                table: table.clone(),
                action: action.clone(),
            };
            let loaded = runtime.block_on(load::load(&target(client)?, &spec))?;
            println!("loaded {} of {} rows into {database}.{table}", loaded.loaded, loaded.rows);
            Ok(())
        }
        Command::Operation(words) => runtime.block_on(run_operation(words)),
        _ => bail!("not a client command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_urls_or_harpers_bare_hosts() {
        assert_eq!(parse_target("http://db:9000/").unwrap().as_str(), "http://db:9000/");
        assert_eq!(parse_target("db.example").unwrap().as_str(), "https://db.example:9925/");
        assert_eq!(parse_target("db.example:1234").unwrap().as_str(), "https://db.example:1234/");
    }

    #[test]
    fn answers_print_as_yaml_or_json() {
        let answer = serde_json::json!({"message": "ok", "count": 2});
        assert_eq!(render(&answer, false).unwrap(), "message: ok\ncount: 2");
        assert_eq!(render(&answer, true).unwrap(), "{\n  \"message\": \"ok\",\n  \"count\": 2\n}");
    }
}
