//! Where a script's `import` leads: files inside its own component, and packages in
//! the component's `node_modules`; nothing else.
//!
//! A module's name is its file's canonical path, so two components never share a
//! module and an error's stack names the file. A relative import that leaves the
//! component, a symbolic link out of it, or a Node built-in (`fs`, `node:path`, …)
//! is refused with the name and the importing file; the engine reports it as the
//! component's load error.

use std::path::{Path, PathBuf};

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Ctx, Error, Module};

/// The largest module file read (a bundled package can be large; a runaway file is refused).
const MAX_MODULE_BYTES: u64 = 32 << 20;

/// Node's built-in modules, refused by name (with or without `node:`).
const NODE_BUILTINS: &[&str] = &[
    "assert",
    "async_hooks",
    "buffer",
    "child_process",
    "cluster",
    "console",
    "constants",
    "crypto",
    "dgram",
    "diagnostics_channel",
    "dns",
    "domain",
    "events",
    "fs",
    "fs/promises",
    "http",
    "http2",
    "https",
    "inspector",
    "module",
    "net",
    "os",
    "path",
    "perf_hooks",
    "process",
    "punycode",
    "querystring",
    "readline",
    "repl",
    "stream",
    "string_decoder",
    "sys",
    "timers",
    "tls",
    "trace_events",
    "tty",
    "url",
    "util",
    "v8",
    "vm",
    "wasi",
    "worker_threads",
    "zlib",
];

/// Resolves and loads modules inside the component directories it was given.
#[derive(Clone)]
pub struct ComponentModules {
    /// Each component's directory, canonical.
    roots: Vec<PathBuf>,
}

impl ComponentModules {
    /// Modules confined to `roots` (canonicalized here; a root that cannot be is left out).
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Self {
        Self { roots: roots.into_iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect() }
    }

    /// The component directory holding `path`, if any.
    fn root_of(&self, path: &Path) -> Option<&Path> {
        self.roots.iter().map(PathBuf::as_path).find(|root| path.starts_with(root))
    }

    fn resolve_path(&self, base: &str, name: &str) -> Result<PathBuf, String> {
        let importer = Path::new(base);
        let shown_base = if base.is_empty() { "the component" } else { base };
        let bare = name.strip_prefix("node:").unwrap_or(name);
        if name.starts_with("node:") || NODE_BUILTINS.contains(&bare) {
            return Err(format!(
                "the Node built-in module '{bare}' is not provided by Lyre (imported by {shown_base}); \
                 use the web-standard globals (fetch, URL, TextEncoder, crypto) instead"
            ));
        }
        let (root, wanted) = if name.starts_with("./") || name.starts_with("../") {
            let root = self.root_of(importer).ok_or_else(|| format!("{shown_base} is not inside a component"))?;
            (root, importer.parent().unwrap_or(root).join(name))
        } else if name.starts_with('/') {
            let wanted = PathBuf::from(name);
            let root = self.root_of(&wanted).ok_or_else(|| format!("'{name}' is not inside a component"))?;
            (root, wanted)
        } else {
            let root = self.root_of(importer).ok_or_else(|| format!("{shown_base} is not inside a component"))?;
            (root, package_entry(root, importer, name)?)
        };
        let found = with_extension(&wanted).ok_or_else(|| format!("no file {}", wanted.display()))?;
        let canonical = std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))?;
        if !canonical.starts_with(root) {
            return Err(format!("'{name}' leads outside the component ({})", canonical.display()));
        }
        Ok(canonical)
    }
}

/// `path` itself, or with `.js` or `.mjs`, or its `index.js`: the first that is a file.
fn with_extension(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let name = path.file_name()?.to_str()?;
    ["js", "mjs"]
        .iter()
        .map(|ext| path.with_file_name(format!("{name}.{ext}")))
        .chain(std::iter::once(path.join("index.js")))
        .find(|candidate| candidate.is_file())
}

/// The file a bare specifier (`pkg` or `pkg/sub/path`) names: in the nearest
/// `node_modules` from the importer up to the component's root, by the package's
/// `exports` (its `.` entry: a string, or `import` / `default`), `module` or `main`.
fn package_entry(root: &Path, importer: &Path, name: &str) -> Result<PathBuf, String> {
    let mut segments = name.splitn(if name.starts_with('@') { 3 } else { 2 }, '/');
    let package: String = if name.starts_with('@') {
        format!("{}/{}", segments.next().unwrap_or(""), segments.next().unwrap_or(""))
    } else {
        segments.next().unwrap_or("").to_string()
    };
    let subpath = segments.next();
    let mut dir = importer.parent();
    while let Some(current) = dir {
        let candidate = current.join("node_modules").join(&package);
        if candidate.is_dir() {
            return Ok(match subpath {
                Some(sub) => candidate.join(sub),
                None => candidate.join(package_main(&candidate)?),
            });
        }
        if current == root {
            break;
        }
        dir = current.parent();
    }
    Err(format!(
        "the package '{package}' is not in the component's node_modules (install it before deploying the component)"
    ))
}

/// A package's entry file, relative to its directory.
fn package_main(dir: &Path) -> Result<String, String> {
    let manifest = dir.join("package.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else { return Ok("index.js".to_string()) };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", manifest.display()))?;
    let entry = |value: &serde_json::Value| -> Option<String> {
        match value {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(map) => {
                map.get("import").or_else(|| map.get("default")).and_then(|v| v.as_str()).map(str::to_string)
            }
            _ => None,
        }
    };
    let exported = json.get("exports").and_then(|exports| match exports {
        serde_json::Value::Object(map) if map.contains_key(".") => map.get(".").and_then(entry),
        other => entry(other),
    });
    Ok(exported
        .or_else(|| json.get("module").and_then(|v| v.as_str()).map(str::to_string))
        .or_else(|| json.get("main").and_then(|v| v.as_str()).map(str::to_string))
        .unwrap_or_else(|| "index.js".to_string()))
}

impl Resolver for ComponentModules {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        match self.resolve_path(base, name) {
            Ok(path) => Ok(path.to_string_lossy().into_owned()),
            Err(message) => Err(Error::new_resolving_message(base, name, message)),
        }
    }
}

impl Loader for ComponentModules {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        let path = Path::new(name);
        if self.root_of(path).is_none() {
            return Err(Error::new_loading_message(name, "not inside a component"));
        }
        let size = std::fs::metadata(path).map_err(|e| Error::new_loading_message(name, e.to_string()))?.len();
        if size > MAX_MODULE_BYTES {
            return Err(Error::new_loading_message(
                name,
                format!("{size} bytes is over the {MAX_MODULE_BYTES}-byte limit"),
            ));
        }
        let source = std::fs::read(path).map_err(|e| Error::new_loading_message(name, e.to_string()))?;
        Module::declare(ctx.clone(), name, source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> (tempfile::TempDir, ComponentModules, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("resources.js"), "export const a = 1;").expect("write");
        std::fs::create_dir_all(dir.path().join("lib")).expect("mkdir");
        std::fs::write(dir.path().join("lib/util.js"), "export const b = 2;").expect("write");
        std::fs::create_dir_all(dir.path().join("node_modules/pkg/dist")).expect("mkdir");
        std::fs::write(
            dir.path().join("node_modules/pkg/package.json"),
            r#"{"exports": {".": {"import": "./dist/m.js"}}}"#,
        )
        .expect("write");
        std::fs::write(dir.path().join("node_modules/pkg/dist/m.js"), "export default 3;").expect("write");
        let modules = ComponentModules::new([dir.path().to_path_buf()]);
        let entry = std::fs::canonicalize(dir.path().join("resources.js")).expect("canonical");
        (dir, modules, entry.to_string_lossy().into_owned())
    }

    #[test]
    fn relative_imports_stay_inside_the_component() {
        let (_dir, modules, entry) = component();
        let found = modules.resolve_path(&entry, "./lib/util").expect("resolves with .js added");
        assert!(found.ends_with("lib/util.js"));
        let escaped = modules.resolve_path(&entry, "../../etc/passwd").expect_err("outside");
        assert!(escaped.contains("outside the component") || escaped.contains("no file"), "{escaped}");
    }

    #[test]
    fn packages_resolve_through_their_exports() {
        let (_dir, modules, entry) = component();
        let found = modules.resolve_path(&entry, "pkg").expect("package");
        assert!(found.ends_with("node_modules/pkg/dist/m.js"), "{}", found.display());
        let missing = modules.resolve_path(&entry, "left-pad").expect_err("not installed");
        assert!(missing.contains("'left-pad' is not in the component's node_modules"), "{missing}");
    }

    #[test]
    fn node_built_ins_are_refused_by_name_and_importer() {
        let (_dir, modules, entry) = component();
        for name in ["fs", "node:fs", "node:path", "child_process"] {
            let refused = modules.resolve_path(&entry, name).expect_err("built-in");
            assert!(refused.contains("Node built-in module"), "{refused}");
            assert!(refused.contains("resources.js"), "{refused}");
        }
    }
}
