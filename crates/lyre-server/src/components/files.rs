//! Files inside a component: glob matching, safe relative paths, listing, packing.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// A plugin's file patterns, compiled: globs relative to the component's directory
/// (`*` and `?` within one path segment, `**` across segments, `[...]` classes; a
/// name starting with `.` only matches a pattern that spells the dot), less those
/// matching an `ignore` pattern. A pattern that leaves the component (`..`, or
/// starting with `/`) is refused, as Harper refuses it.
pub struct Globs {
    /// Each pattern with its base: its leading segments without glob characters.
    include: Vec<(String, glob::Pattern)>,
    ignore: Vec<glob::Pattern>,
}

/// How component globs match: `*` stays within a segment, dot files are hidden.
const MATCHING: glob::MatchOptions =
    glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };

impl Globs {
    /// Compiles `patterns` and `ignore` (Harper's `files` and `files.ignore`); `.` is
    /// every file.
    pub fn new(patterns: &[String], ignore: &[String]) -> Result<Globs, String> {
        let compile = |pattern: &String| -> Result<glob::Pattern, String> {
            if pattern.contains("..") || pattern.starts_with('/') || pattern.contains('\0') {
                return Err(format!("file pattern '{pattern}' must not contain '..' or start with '/'"));
            }
            let pattern = match pattern.trim_start_matches("./") {
                "" | "." => "**/*",
                relative => relative,
            };
            glob::Pattern::new(pattern).map_err(|e| format!("bad file pattern '{pattern}': {e}"))
        };
        let include = patterns
            .iter()
            .map(|p| Ok((pattern_base(p.trim_start_matches("./")), compile(p)?)))
            .collect::<Result<_, String>>()?;
        let ignore = ignore.iter().map(compile).collect::<Result<_, String>>()?;
        Ok(Globs { include, ignore })
    }

    /// The patterns' bases (`web` for `web/**`, the whole pattern when it has no glob
    /// characters), in the order given.
    pub fn bases(&self) -> impl Iterator<Item = &str> {
        self.include.iter().map(|(base, _)| base.as_str())
    }

    /// The files under `dir` (not in `node_modules`, not through symbolic links) that
    /// match, as paths relative to `dir`, sorted.
    pub fn files(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        let mut out = Vec::new();
        if !dir.is_dir() {
            return Ok(out);
        }
        walk(dir, true, u64::MAX, &mut |_, relative, is_dir| {
            if !is_dir && self.matches(relative) {
                out.push(relative.to_path_buf());
            }
            Ok(())
        })
        .map_err(|e| format!("{}: {e}", dir.display()))?;
        out.sort();
        Ok(out)
    }

    fn matches(&self, relative: &Path) -> bool {
        self.include.iter().any(|(_, p)| p.matches_path_with(relative, MATCHING))
            && !self.ignore.iter().any(|p| p.matches_path_with(relative, MATCHING))
    }
}

/// A pattern's leading segments that hold no glob characters (micromatch's `scan`
/// base, which Harper strips from URL paths).
fn pattern_base(pattern: &str) -> String {
    let segments: Vec<&str> = pattern.split('/').collect();
    let literal = segments.iter().take_while(|s| !s.contains(['*', '?', '[', '{'])).count();
    segments[..literal].join("/")
}

/// A relative path that cannot leave its base: no root, no `..`, no NUL, and naming
/// something below the base (not the base itself, as `.` would).
pub fn safe_relative(path: &str) -> Result<PathBuf, String> {
    let candidate = Path::new(path);
    let clean = candidate.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let names_something = candidate.components().any(|c| matches!(c, Component::Normal(_)));
    if !clean || !names_something || path.contains('\0') {
        return Err(format!("'{path}' must be a relative path inside the component"));
    }
    Ok(candidate.to_path_buf())
}

/// Fails when any step of `relative` below `base` is a symbolic link: a link placed in
/// a component by hand must not let file operations reach outside it.
pub fn no_links(base: &Path, relative: &Path) -> Result<(), String> {
    let mut path = base.to_path_buf();
    for part in relative.components() {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!("'{}' is a symbolic link", relative.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A component or project name: one path segment.
pub fn safe_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
        return Err(format!("'{name}' is not a valid project name"));
    }
    Ok(())
}

/// Visits `dir`'s directories and regular files below it, each directory before its
/// contents (symbolic links and other kinds are skipped, and `node_modules` when
/// asked), failing once the files add up to more than `limit` bytes. `visit` gets the
/// path, the path relative to `dir`, and whether it is a directory.
fn walk(
    dir: &Path,
    skip_node_modules: bool,
    limit: u64,
    visit: &mut dyn FnMut(&Path, &Path, bool) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&current)?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            if skip_node_modules && entry.file_name() == "node_modules" {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_dir() {
                visit(&path, &relative, true)?;
                stack.push(path);
            } else if kind.is_file() {
                total = total.saturating_add(entry.metadata()?.len());
                if total > limit {
                    return Err(std::io::Error::other(format!("it holds more than {limit} bytes")));
                }
                visit(&path, &relative, false)?;
            }
        }
    }
    Ok(())
}

/// Packs `dir` into a tar archive (skipping `node_modules` when asked): directories
/// and regular files only, at most `limit` bytes of file content.
pub fn pack(dir: &Path, skip_node_modules: bool, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    walk(dir, skip_node_modules, limit, &mut |path, relative, is_dir| match is_dir {
        true => builder.append_dir(relative, path),
        false => builder.append_path_with_name(path, relative),
    })?;
    builder.into_inner()
}

/// Copies `from`'s directories and regular files (not `node_modules`) into `to`, at
/// most `limit` bytes, without holding them in memory; nobody but the owner may write
/// the copies.
pub fn copy_tree(from: &Path, to: &Path, limit: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    walk(from, true, limit, &mut |path, relative, is_dir| {
        let target = to.join(relative);
        if is_dir {
            return std::fs::create_dir_all(&target);
        }
        std::fs::copy(path, &target)?;
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&target)?.permissions());
        std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(mode & 0o755))
    })
}

/// Unpacks a tar archive (gzipped or not) into `dir`, refusing entries that would
/// escape it and archives over `limit` bytes unpacked.
pub fn unpack(archive: &[u8], dir: &Path, limit: u64) -> Result<(), String> {
    let gzipped = archive.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> =
        if gzipped { Box::new(flate2::read::GzDecoder::new(archive)) } else { Box::new(archive) };
    let mut tar = tar::Archive::new(reader);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut total = 0u64;
    for entry in tar.entries().map_err(|e| format!("invalid archive: {e}"))? {
        let mut entry = entry.map_err(|e| format!("invalid archive: {e}"))?;
        total = total.saturating_add(entry.header().size().unwrap_or(0));
        if total > limit {
            return Err(format!("the archive unpacks to more than {limit} bytes"));
        }
        let path = entry.path().map_err(|e| format!("invalid archive: {e}"))?.into_owned();
        // Archives made by `npm pack` put everything under `package/`.
        let path = path.strip_prefix("package").map(Path::to_path_buf).unwrap_or(path);
        // `tar -C dir .` archives begin with a `./` entry: the directory itself.
        if path.components().all(|c| matches!(c, Component::CurDir)) {
            continue;
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue; // links and devices are not unpacked
        }
        let relative = safe_relative(&path.to_string_lossy())?;
        let target = dir.join(relative);
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
        } else {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            entry.unpack(&target).map_err(|e| format!("unpacking {}: {e}", path.display()))?;
            // Whatever the archive says, nobody but the owner may write the file.
            let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|e| format!("unpacking {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_within_a_segment_and_across_with_two_stars() {
        let dir = tempfile::tempdir().unwrap();
        for file in ["schema.graphql", "schema.graphqlx", "web/index.html", "web/css/site.css", "web/.env", "axxbyyc"] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        let files = |patterns: &[&str], ignore: &[&str]| {
            let strings = |list: &[&str]| list.iter().map(|p| p.to_string()).collect::<Vec<_>>();
            let found = Globs::new(&strings(patterns), &strings(ignore)).unwrap().files(dir.path()).unwrap();
            found.iter().map(|p| p.display().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(files(&["*.graphql"], &[]), ["schema.graphql"]);
        assert_eq!(files(&["a*b*c"], &[]), ["axxbyyc"]);
        assert_eq!(files(&["web/*"], &[]), ["web/index.html"], "* stays within a segment");
        assert_eq!(files(&["web/**"], &[]), ["web/css/site.css", "web/index.html"], "dot files stay hidden");
        assert_eq!(files(&["./web/**"], &["**/*.css"]), ["web/index.html"]);
        assert_eq!(files(&["web/.env"], &[]), ["web/.env"], "a dot spelled out matches");
        assert_eq!(files(&["."], &[]).len(), 5);
        for bad in ["../x/*", "/etc/*", "web/../../x"] {
            assert!(Globs::new(&[bad.to_string()], &[]).is_err(), "{bad}");
        }
        assert_eq!(pattern_base("web/**"), "web");
        assert_eq!(pattern_base("web/static/*.html"), "web/static");
        assert_eq!(pattern_base("index.html"), "index.html");
        assert_eq!(pattern_base("*.graphql"), "");
    }

    #[test]
    fn paths_cannot_escape() {
        assert!(safe_relative("a/b.graphql").is_ok());
        assert!(safe_relative("../etc/passwd").is_err());
        assert!(safe_relative("/etc/passwd").is_err());
        assert!(safe_relative("").is_err());
        assert!(safe_relative(".").is_err());
        assert!(safe_relative("./").is_err());
        assert!(safe_relative("a\0b").is_err());
        assert!(safe_name("shop").is_ok());
        assert!(safe_name("..").is_err());
        assert!(safe_name("a/b").is_err());
    }

    #[test]
    fn pack_and_unpack_round_trip() {
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(from.path().join("sub")).unwrap();
        std::fs::write(from.path().join("schema.graphql"), "type A @table { id: ID @primaryKey }").unwrap();
        std::fs::write(from.path().join("sub/x.txt"), "x").unwrap();
        std::fs::set_permissions(from.path().join("sub/x.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o4777))
            .unwrap();
        let archive = pack(from.path(), true, 1 << 20).unwrap();
        assert!(pack(from.path(), true, 1).is_err(), "over the limit");
        let to = tempfile::tempdir().unwrap();
        unpack(&archive, to.path(), 1 << 20).unwrap();
        assert_eq!(std::fs::read_to_string(to.path().join("sub/x.txt")).unwrap(), "x");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(to.path().join("sub/x.txt")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o7777, 0o755, "no setuid, no group or world write");
        assert!(unpack(&archive, to.path(), 3).unwrap_err().contains("more than"));
        assert!(unpack(b"not a tar archive at all", to.path(), 1 << 20).is_err());
        // `tar -C dir .` archives start with a `./` entry for the directory itself.
        let mut builder = tar::Builder::new(Vec::new());
        builder.append_dir("./", from.path()).unwrap();
        builder.append_path_with_name(from.path().join("schema.graphql"), "./schema.graphql").unwrap();
        let dotted = tempfile::tempdir().unwrap();
        unpack(&builder.into_inner().unwrap(), dotted.path(), 1 << 20).unwrap();
        assert!(dotted.path().join("schema.graphql").is_file());
        // A directory copies the same way, with the same limit.
        let copied = tempfile::tempdir().unwrap();
        copy_tree(from.path(), copied.path(), 1 << 20).unwrap();
        assert_eq!(std::fs::read_to_string(copied.path().join("sub/x.txt")).unwrap(), "x");
        assert!(copy_tree(from.path(), copied.path(), 1).is_err(), "over the limit");
    }
}
