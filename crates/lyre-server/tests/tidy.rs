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
