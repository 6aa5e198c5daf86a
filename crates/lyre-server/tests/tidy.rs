//! Tidy checks run by `cargo test`: documentation headers, forbidden macros, the
//! crate boundary, and that ARCHITECTURE.md names only paths that exist.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&repo_root().join("crates"), &mut files);
    assert!(files.len() > 20, "found only {} Rust files", files.len());
    files
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let missing: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap_or_default().starts_with("//!"))
        .collect();
    assert!(missing.is_empty(), "files without a leading //! doc: {missing:?}");
}

#[test]
fn no_debugging_leftovers() {
    for file in all_rust_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        // Built at run time so this file does not match itself.
        for forbidden in ["dbg", "todo", "unimplemented"].map(|m| format!("{m}!(")) {
            assert!(!text.contains(forbidden.as_str()), "{} contains {forbidden}", file.display());
        }
    }
}

#[test]
fn the_server_does_not_depend_on_the_store() {
    let manifest = std::fs::read_to_string(repo_root().join("crates/lyre-server/Cargo.toml")).expect("manifest");
    assert!(!manifest.contains("lyre-store"), "lyre-server must reach storage only through lyre-core");
}

#[test]
fn architecture_names_only_existing_paths() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let relative: Vec<String> =
        files.iter().map(|f| f.strip_prefix(&root).unwrap_or(f).to_string_lossy().into_owned()).collect();
    let mut checked = 0;
    for (i, quoted) in text.split('`').enumerate() {
        let looks_like_path =
            quoted.ends_with(".rs") || quoted.ends_with(".sh") || (quoted.ends_with('/') && !quoted.contains(' '));
        if i % 2 == 0 || !looks_like_path || quoted.contains('<') {
            continue;
        }
        checked += 1;
        let exists = root.join(quoted).exists()
            || relative.iter().any(|f| f.ends_with(quoted) || f.contains(&format!("/{quoted}")));
        assert!(exists, "ARCHITECTURE.md names `{quoted}`, which does not exist");
    }
    assert!(checked > 30, "only {checked} paths checked; is the parser broken?");
}

/// The layers of lyre-core as ARCHITECTURE.md states them (the fenced `layers`
/// block): each top-level module of `crates/lyre-core/src` with its layer number.
fn core_layers() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let block = text.split("```layers\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a ```layers block");
    let mut layers = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (head, modules) = line.split_once(':').expect("`N name: module module ...`");
        let number: usize = head.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a layer number");
        layers.extend(modules.split_whitespace().map(|m| (m.trim_end_matches('/').to_string(), number)));
    }
    assert!(layers.len() >= 10, "the layers block names only {} modules", layers.len());
    layers
}

/// The top-level modules of lyre-core a line of code names (`crate::x`), comments aside.
fn modules_named(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            // `crate::{a, b::c}`: every name at the top of the group.
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or_default();
                out.extend(group.split(',').map(|p| p.trim().split("::").next().unwrap_or_default().to_string()));
            }
        } else {
            out.push(name);
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

/// The layer a file of `crates/lyre-core/src` belongs to (its top-level module's).
fn layer_of(relative: &Path, layers: &[(String, usize)]) -> Option<usize> {
    let top = relative.components().next()?.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
    layers.iter().find(|(m, _)| *m == top).map(|(_, n)| *n)
}

/// Every `crate::` reference in lyre-core that runs up the layers: `(file, line, module)`.
fn upward_imports(src: &Path, layers: &[(String, usize)]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("inside src").to_path_buf();
        if relative == Path::new("lib.rs") || relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue; // the crate root declares every layer; test modules may reach anything
        }
        let own = layer_of(&relative, layers).unwrap_or_else(|| panic!("{} is in no layer", relative.display()));
        let text = std::fs::read_to_string(&file).expect("readable file");
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break; // unit tests close the file
            }
            for module in modules_named(line) {
                let theirs = layers.iter().find(|(m, _)| *m == module).map(|(_, n)| *n);
                let theirs = theirs
                    .unwrap_or_else(|| panic!("{}:{} names `{module}`, in no layer", relative.display(), number + 1));
                if theirs > own {
                    found.push(format!(
                        "{}:{} imports `{module}` (layer {theirs}) from layer {own}",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn core_modules_import_only_their_own_layer_or_lower() {
    let layers = core_layers();
    let upward = upward_imports(&repo_root().join("crates/lyre-core/src"), &layers);
    assert!(upward.is_empty(), "imports running up the layers of lyre-core:\n{}", upward.join("\n"));
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    // A file of the `record` layer naming `services`, in a copy of the tree's shape.
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::create_dir_all(dir.path().join("record")).expect("record/");
    std::fs::write(
        dir.path().join("record/entry.rs"),
        "//! x\nuse crate::services::Jobs; // up\nuse crate::error::Error;\n",
    )
    .expect("a file");
    std::fs::write(dir.path().join("error.rs"), "//! x\n/// See [`crate::services`].\npub struct Error;\n")
        .expect("a file");
    let found = upward_imports(dir.path(), &core_layers());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("record/entry.rs:2 imports `services`"), "{found:?}");
}

/// Lines of lyre-core outside `allowed` (paths under `src/`) containing `needle`.
fn uses_outside(needle: &str, allowed: &[&str]) -> Vec<String> {
    let src = repo_root().join("crates/lyre-core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("inside src").to_string_lossy().into_owned();
        if allowed.iter().any(|a| relative.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable file");
        for (number, line) in text.lines().enumerate() {
            if line.split("//").next().unwrap_or_default().contains(needle) {
                found.push(format!("{relative}:{}", number + 1));
            }
        }
    }
    found
}

#[test]
fn only_the_database_reaches_its_writer_and_only_the_log_api_reads_the_log() {
    let writer = uses_outside("self.writer", &["db/mod.rs"]);
    assert!(writer.is_empty(), "the writer is reached outside `Db::write`: {writer:?}");
    for reading in ["log_from(", "log_sized_from(", "prune_log("] {
        let found = uses_outside(reading, &["db/log.rs"]);
        assert!(found.is_empty(), "the log is read outside db/log.rs with {reading}: {found:?}");
    }
}
