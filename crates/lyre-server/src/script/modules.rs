//! Where a script's `import` leads: files inside its own component, and packages in
//! the component's `node_modules`; nothing else.
//!
//! A module's name is its file's canonical path, so two components never share a
//! module and an error's stack names the file. A relative import that leaves the
//! component, a symbolic link out of it, or a Node built-in (`fs`, `node:path`, …)
//! is refused with the name and the importing file; the engine reports it as the
//! component's load error.
//!
//! CommonJS: a package file Node would run as CommonJS (`.cjs`, or `.js` in a
//! package whose `package.json` has no `"type": "module"`) and `.json` files are
//! loaded as an ES module that `require`s them (the prelude's `require`, which
//! reads files through [`install`]): its default export is `module.exports`, and
//! the names assigned to `exports.name` or listed in `module.exports = {…}` are
//! named exports as well.

use std::path::{Path, PathBuf};

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Ctx, Error, Module};

/// The largest module file read (a bundled package can be large; a runaway file is refused).
const MAX_MODULE_BYTES: u64 = 32 << 20;

/// The names Harper's own API is imported by (`import { tables } from 'harperdb'`),
/// and the module Lyre answers them with: its globals.
const HARPER_MODULE_NAMES: &[&str] = &["harperdb", "harper"];
const HARPER_MODULE: &str = "lyre:harper";
const HARPER_MODULE_SOURCE: &str = "const harper = globalThis.__lyre_harper;\n\
export const { Resource, tables, databases, logger, server, transaction, contentTypes, RequestTarget, ClientError, ServerError } = harper;\n\
export default harper;\n";

/// Node's built-in modules Lyre provides (`web.js`'s `nodeModules`), with their
/// named exports: `import { createHash } from 'node:crypto'`. A name added there is
/// added here too (a module's named exports are declared before it runs).
const PROVIDED_NODE_MODULES: &[(&str, &[&str])] = &[
    (
        "crypto",
        &[
            "createHash",
            "createHmac",
            "randomUUID",
            "randomBytes",
            "getRandomValues",
            "timingSafeEqual",
            "webcrypto",
            "subtle",
        ],
    ),
    ("buffer", &["Buffer", "Blob", "File"]),
];
/// Where a provided Node module is loaded from (no file: its source is made here).
const PROVIDED_NODE_PREFIX: &str = "lyre:node/";

/// The module source of the provided Node module `name`.
fn provided_node_source(name: &str) -> Option<String> {
    let (_, exports) = PROVIDED_NODE_MODULES.iter().find(|(provided, _)| *provided == name)?;
    Some(format!(
        "const node = globalThis.__lyre_node['{name}'];\nexport const {{ {} }} = node;\nexport default node;\n",
        exports.join(", ")
    ))
}

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

    /// The text of a module file inside a component, within [`MAX_MODULE_BYTES`].
    fn read(&self, path: &Path) -> Result<String, String> {
        // Canonical first: `/component/../elsewhere` must not pass for inside.
        let path = &std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if self.root_of(path).is_none() {
            return Err(format!("{} is not inside a component", path.display()));
        }
        let size = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
        if size > MAX_MODULE_BYTES {
            return Err(format!("{}: {size} bytes is over the {MAX_MODULE_BYTES}-byte limit", path.display()));
        }
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The component directory holding `path`, if any.
    fn root_of(&self, path: &Path) -> Option<&Path> {
        self.roots.iter().map(PathBuf::as_path).find(|root| path.starts_with(root))
    }

    fn resolve_path(&self, base: &str, name: &str) -> Result<PathBuf, String> {
        self.resolve_as(base, name, Condition::Import)
    }

    fn resolve_as(&self, base: &str, name: &str, condition: Condition) -> Result<PathBuf, String> {
        if HARPER_MODULE_NAMES.contains(&name) {
            return Ok(PathBuf::from(HARPER_MODULE));
        }
        let importer = Path::new(base);
        let shown_base = if base.is_empty() { "the component" } else { base };
        let bare = name.strip_prefix("node:").unwrap_or(name);
        if PROVIDED_NODE_MODULES.iter().any(|(provided, _)| *provided == bare) {
            return Ok(PathBuf::from(format!("{PROVIDED_NODE_PREFIX}{bare}")));
        }
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
            (root, package_entry(root, importer, name, condition)?)
        };
        let found = with_extension(&wanted, condition).ok_or_else(|| format!("no file {}", wanted.display()))?;
        let canonical = std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))?;
        if !canonical.starts_with(root) {
            return Err(format!("'{name}' leads outside the component ({})", canonical.display()));
        }
        Ok(canonical)
    }
}

/// Which of a package's entries a specifier wants: `import`'s or `require`'s.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Condition {
    Import,
    Require,
}

impl Condition {
    fn key(self) -> &'static str {
        match self {
            Condition::Import => "import",
            Condition::Require => "require",
        }
    }
}

/// `path` itself, or with an extension, or its directory's entry (its
/// `package.json` `main`, or `index.js`): the first that is a file.
fn with_extension(path: &Path, condition: Condition) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let name = path.file_name()?.to_str()?;
    let extensions: &[&str] = match condition {
        Condition::Import => &["js", "mjs"],
        Condition::Require => &["js", "cjs", "json"],
    };
    let main = path.is_dir().then(|| package_main(path, condition).ok()).flatten().map(|main| path.join(main));
    extensions
        .iter()
        .map(|ext| path.with_file_name(format!("{name}.{ext}")))
        .chain(main)
        .chain(["index.js", "index.json"].iter().map(|index| path.join(index)))
        .find(|candidate| candidate.is_file())
}

/// Whether Node would run `path` as CommonJS: a `.cjs` file, or a `.js` file in a
/// package whose nearest `package.json` (below `node_modules`) is not `"type":
/// "module"`. The component's own files are ES modules.
fn is_commonjs(path: &Path) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("cjs") => return true,
        Some("js") => {}
        _ => return false,
    }
    if !path.components().any(|c| c.as_os_str() == "node_modules") {
        return false;
    }
    let mut dir = path.parent();
    while let Some(current) = dir {
        if let Ok(text) = std::fs::read_to_string(current.join("package.json")) {
            let kind = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v.get("type").cloned());
            return kind != Some(serde_json::Value::String("module".to_string()));
        }
        if current.file_name().is_some_and(|n| n == "node_modules") {
            break;
        }
        dir = current.parent();
    }
    true
}

/// Whether `s` is a JavaScript identifier (ASCII letters, digits, `_`, `$`).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// The names a CommonJS file exports, as far as its text shows them
/// (`exports.name =`, `module.exports.name =`, `module.exports = { a, b: … }`):
/// what an ES module importing it may name.
fn commonjs_names(source: &str) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for (at, _) in source.match_indices("exports.") {
        let before = source[..at].chars().next_back();
        let standalone = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'));
        let rest = &source[at + "exports.".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$').collect();
        let after = rest[name.len()..].trim_start();
        if standalone && is_identifier(&name) && after.starts_with('=') && !after.starts_with("==") {
            names.insert(name);
        }
    }
    if let Some(at) = source.find("module.exports")
        && let Some(object) = source[at + "module.exports".len()..].trim_start().strip_prefix('=')
        && let Some(body) = object.trim_start().strip_prefix('{')
        && let Some(end) = body.find('}')
    {
        for entry in body[..end].split(',') {
            let key = entry.split(':').next().unwrap_or("").trim().trim_matches(|c| c == '\'' || c == '"');
            if is_identifier(key) {
                names.insert(key.to_string());
            }
        }
    }
    /// Words that cannot be a binding's name in a module.
    const RESERVED: &[&str] = &[
        "arguments",
        "await",
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "debugger",
        "default",
        "delete",
        "do",
        "else",
        "enum",
        "eval",
        "export",
        "extends",
        "false",
        "finally",
        "for",
        "function",
        "if",
        "implements",
        "import",
        "in",
        "instanceof",
        "interface",
        "let",
        "new",
        "null",
        "package",
        "private",
        "protected",
        "public",
        "return",
        "static",
        "super",
        "switch",
        "this",
        "throw",
        "true",
        "try",
        "typeof",
        "var",
        "void",
        "while",
        "with",
        "yield",
    ];
    names.into_iter().filter(|n| !RESERVED.contains(&n.as_str())).collect()
}

/// The ES module standing in for a CommonJS or JSON file.
fn commonjs_wrapper(path: &str, source: &str) -> String {
    let quoted = serde_json::Value::String(path.to_string()).to_string();
    let mut wrapper = format!("const exported = globalThis.__lyre_require({quoted});\nexport default exported;\n");
    let names = if path.ends_with(".json") { Vec::new() } else { commonjs_names(source) };
    if !names.is_empty() {
        wrapper.push_str(&format!("export const {{ {} }} = exported;\n", names.join(", ")));
    }
    wrapper
}

/// Adds to `native` the functions the prelude's `require` reads CommonJS files
/// with: `resolveRequire(from, name)`, a file's canonical path by Node's `require`
/// rules inside the component; `readModule(path)`, its text.
pub fn install<'js>(
    ctx: &Ctx<'js>,
    native: &rquickjs::Object<'js>,
    modules: &ComponentModules,
) -> rquickjs::Result<()> {
    let resolver = modules.clone();
    native.set(
        "resolveRequire",
        rquickjs::Function::new(ctx.clone(), move |ctx: Ctx<'js>, from: String, name: String| {
            resolver
                .resolve_as(&from, &name, Condition::Require)
                .map(|path| path.to_string_lossy().into_owned())
                .map_err(|message| rquickjs::Exception::throw_message(&ctx, &format!("require('{name}'): {message}")))
        })?,
    )?;
    let reader = modules.clone();
    native.set(
        "readModule",
        rquickjs::Function::new(ctx.clone(), move |ctx: Ctx<'js>, path: String| {
            reader.read(Path::new(&path)).map_err(|message| rquickjs::Exception::throw_message(&ctx, &message))
        })?,
    )?;
    Ok(())
}

/// The file a bare specifier (`pkg` or `pkg/sub/path`) names: in the nearest
/// `node_modules` from the importer up to the component's root, by the package's
/// `exports` (its `.` entry: a string, or `import` / `default`), `module` or `main`.
fn package_entry(root: &Path, importer: &Path, name: &str, condition: Condition) -> Result<PathBuf, String> {
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
                None => candidate.join(package_main(&candidate, condition)?),
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

/// A package's entry file for `condition`, relative to its directory.
fn package_main(dir: &Path, condition: Condition) -> Result<String, String> {
    let manifest = dir.join("package.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else { return Ok("index.js".to_string()) };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", manifest.display()))?;
    let entry = |value: &serde_json::Value| -> Option<String> {
        match value {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(map) => {
                map.get(condition.key()).or_else(|| map.get("default")).and_then(|v| v.as_str()).map(str::to_string)
            }
            _ => None,
        }
    };
    let exported = json.get("exports").and_then(|exports| match exports {
        serde_json::Value::Object(map) if map.contains_key(".") => map.get(".").and_then(entry),
        other => entry(other),
    });
    let module = json.get("module").filter(|_| condition == Condition::Import);
    Ok(exported
        .or_else(|| module.and_then(|v| v.as_str()).map(str::to_string))
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
        if name == HARPER_MODULE {
            return Module::declare(ctx.clone(), name, HARPER_MODULE_SOURCE);
        }
        if let Some(source) = name.strip_prefix(PROVIDED_NODE_PREFIX).and_then(provided_node_source) {
            return Module::declare(ctx.clone(), name, source);
        }
        let path = Path::new(name);
        let source = self.read(path).map_err(|message| Error::new_loading_message(name, message))?;
        if is_commonjs(path) || name.ends_with(".json") {
            return Module::declare(ctx.clone(), name, commonjs_wrapper(name, &source));
        }
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
    fn commonjs_exports_are_found_in_the_text() {
        let source = "exports.a = 1;\nmodule.exports.b = 2;\nnotexports.c = 3;\nexports.d == 4;\n";
        assert_eq!(commonjs_names(source), ["a", "b"]);
        let source = "module.exports = { parse, 'format': f, default: x, stringify: s, delete: d };";
        assert_eq!(commonjs_names(source), ["format", "parse", "stringify"]);
        let wrapper = commonjs_wrapper("/c/node_modules/p/i.js", "exports.x = 1;");
        assert!(wrapper.contains("__lyre_require(\"/c/node_modules/p/i.js\")"), "{wrapper}");
        assert!(wrapper.contains("export const { x } = exported;"), "{wrapper}");
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
