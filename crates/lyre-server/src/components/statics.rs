//! The `static` plugin: which of a component's files are served over the REST port,
//! at which URL paths, and what a path that names none of them gets (Harper's
//! `server/static.ts`, with its `deriveURLPath` and `resolveBaseURLPath`).
//!
//! A [`Site`] is built at each load from the files that match then; a request's path
//! is looked up in it exactly, so nothing outside those files (`..`, links, dot
//! files) can be reached; a file replaced by a link afterwards is refused when asked for. `http/rest/statics.rs` sends what [`Site::find`] names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::config::{NotFound, StaticOptions};
use super::files::{no_links, safe_relative};

/// One component's static files.
#[derive(Debug, PartialEq)]
pub struct Site {
    /// The component's directory.
    dir: PathBuf,
    /// Where the site is served (`/`, `/docs/`): always starts and ends with `/`.
    base: String,
    /// URL path to file.
    files: HashMap<String, PathBuf>,
    /// Directories holding an `index.html`: with a trailing slash, the file; without,
    /// `None` (redirected to the slash).
    indexes: HashMap<String, Option<PathBuf>>,
    extensions: Vec<String>,
    fallthrough: bool,
    not_found: Option<(PathBuf, u16)>,
}

/// What a site answers a path with.
#[derive(Debug, PartialEq)]
pub enum Found<'a> {
    /// This file, with this status (200, or the `notFound` status).
    File(&'a Path, u16),
    /// A directory named without its trailing slash: `301` to this location.
    Redirect(String),
    /// Nothing here and no `notFound` file: `404 File not found`.
    Missing,
    /// Nothing here: the request goes on (to the next site, then to REST).
    Pass,
}

impl Site {
    /// The site component `name` in `dir` serves with `options`; fails naming the
    /// option that is wrong.
    pub fn build(name: &str, dir: &Path, options: &StaticOptions) -> Result<Site, String> {
        let base = base_url_path(name, options.url_path.as_deref())?;
        let globs = options.files.globs().map_err(|e| format!("static.files: {e}"))?;
        let bases: Vec<String> = globs.bases().map(str::to_string).collect();
        let mut files = HashMap::new();
        let mut indexes = HashMap::new();
        for relative in globs.files(dir)? {
            let Some(relative_text) = relative.to_str() else { continue };
            let url = format!("{base}{}", strip_base(&bases, relative_text));
            if let Some(directory) = url.strip_suffix("index.html")
                && directory.ends_with('/')
            {
                if directory.len() > 1 {
                    indexes.entry(directory[..directory.len() - 1].to_string()).or_insert(None);
                }
                indexes.insert(directory.to_string(), Some(dir.join(&relative)));
            }
            files.insert(url, dir.join(relative));
        }
        let not_found = match &options.not_found {
            None => None,
            Some(NotFound::File(file)) => Some((not_found_file(dir, file)?, 404)),
            Some(NotFound::WithStatus { file, status_code }) => {
                if !(200..=599).contains(status_code) {
                    return Err(format!("static.notFound.statusCode must be an HTTP status, not {status_code}"));
                }
                Some((not_found_file(dir, file)?, *status_code))
            }
        };
        let extensions = options.extensions.iter().map(|e| e.trim_start_matches('.').to_string()).collect();
        let indexes = if options.index { indexes } else { HashMap::new() };
        Ok(Site {
            dir: dir.to_path_buf(),
            base,
            files,
            indexes,
            extensions,
            fallthrough: options.fallthrough,
            not_found,
        })
    }

    /// What `path` (percent-decoded) gets: the file it names; its directory's index
    /// (or a redirect to the directory with a slash); the file with one of the
    /// extensions appended; else, under this site's URL path with `fallthrough` off,
    /// the `notFound` file or a 404; else nothing, and the request goes on.
    /// A file that has become a symbolic link (or sits under one) since the site
    /// was built is not served: 404.
    pub fn find(&self, path: &str) -> Found<'_> {
        match self.lookup(path) {
            Found::File(file, _) if self.linked(file) => Found::Missing,
            found => found,
        }
    }

    /// Whether `file`, or a directory between the component's and it, is a link.
    fn linked(&self, file: &Path) -> bool {
        file.strip_prefix(&self.dir).map_or(true, |relative| no_links(&self.dir, relative).is_err())
    }

    fn lookup(&self, path: &str) -> Found<'_> {
        if let Some(file) = self.files.get(path) {
            return Found::File(file, 200);
        }
        match self.indexes.get(path) {
            Some(Some(index)) => return Found::File(index, 200),
            Some(None) => return Found::Redirect(format!("{path}/")),
            None => {}
        }
        for extension in &self.extensions {
            if let Some(file) = self.files.get(&format!("{path}.{extension}")) {
                return Found::File(file, 200);
            }
        }
        let under_base = path.starts_with(&self.base) || format!("{path}/") == self.base;
        if self.fallthrough || !under_base {
            return Found::Pass;
        }
        match &self.not_found {
            Some((file, status)) => Found::File(file, *status),
            None => Found::Missing,
        }
    }

    /// Whether the site serves no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// `urlPath` as a base path: `/` when unset; `x` and `/x` are `/x/`; `./x` is
/// `/<component>/x/`; `..` anywhere is refused.
fn base_url_path(name: &str, url_path: Option<&str>) -> Result<String, String> {
    let url_path = url_path.unwrap_or("");
    if url_path.contains("..") {
        return Err(format!("static.urlPath must not contain '..'. Received: '{url_path}'"));
    }
    let mut base = if url_path.is_empty() { "/".to_string() } else { url_path.to_string() };
    if base == "." || base.starts_with("./") {
        base = format!("/{name}{}", &base[1..]);
    }
    if !base.starts_with('/') {
        base.insert(0, '/');
    }
    if !base.ends_with('/') {
        base.push('/');
    }
    Ok(base)
}

/// A matched file's path under the site's URL path: without the base of the first
/// pattern it lies under (`web/css/a.css` under `web/**` is `css/a.css`; a pattern
/// naming one file serves it by its name).
fn strip_base<'a>(bases: &[String], relative: &'a str) -> &'a str {
    for base in bases.iter().filter(|b| !b.is_empty()) {
        if relative == base {
            return relative.rsplit('/').next().unwrap_or(relative);
        }
        if let Some(rest) = relative.strip_prefix(base.as_str()).and_then(|r| r.strip_prefix('/')) {
            return rest;
        }
    }
    relative
}

/// The `notFound` file: inside the component, not through a link, and present.
fn not_found_file(dir: &Path, file: &str) -> Result<PathBuf, String> {
    let relative = safe_relative(file).map_err(|e| format!("static.notFound: {e}"))?;
    no_links(dir, &relative).map_err(|e| format!("static.notFound: {e}"))?;
    let path = dir.join(relative);
    if !path.is_file() {
        return Err(format!("static.notFound: the file '{file}' does not exist"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::config::Patterns;

    fn options(files: &str) -> StaticOptions {
        StaticOptions {
            files: Patterns::One(files.to_string()),
            url_path: None,
            index: true,
            extensions: Vec::new(),
            fallthrough: true,
            not_found: None,
        }
    }

    fn component() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in ["web/index.html", "web/about.html", "web/docs/index.html", "web/css/site.css", "web/.secret"] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, file).unwrap();
        }
        dir
    }

    #[test]
    fn url_paths_drop_the_pattern_base_and_sit_under_url_path() {
        let dir = component();
        let site = Site::build("app", dir.path(), &options("web/**")).unwrap();
        let web = |f: &str| dir.path().join("web").join(f);
        assert_eq!(site.find("/about.html"), Found::File(&web("about.html"), 200));
        assert_eq!(site.find("/css/site.css"), Found::File(&web("css/site.css"), 200));
        assert_eq!(site.find("/"), Found::File(&web("index.html"), 200));
        assert_eq!(site.find("/docs/"), Found::File(&web("docs/index.html"), 200));
        assert_eq!(site.find("/docs"), Found::Redirect("/docs/".into()));
        assert_eq!(site.find("/.secret"), Found::Pass, "dot files are not matched");
        assert_eq!(site.find("/web/about.html"), Found::Pass);
        assert_eq!(site.find("/../web/about.html"), Found::Pass);
        assert_eq!(site.find("/about"), Found::Pass, "no extensions configured");

        let mut under = options("web/*.html");
        under.url_path = Some("./site".into());
        under.extensions = vec!["html".into()];
        under.index = false;
        let site = Site::build("app", dir.path(), &under).unwrap();
        assert_eq!(site.find("/app/site/about"), Found::File(&web("about.html"), 200));
        assert_eq!(site.find("/app/site/"), Found::Pass, "index off");
        assert_eq!(site.find("/about.html"), Found::Pass);

        let one = Site::build("app", dir.path(), &options("web/about.html")).unwrap();
        assert_eq!(one.find("/about.html"), Found::File(&web("about.html"), 200));
    }

    #[test]
    fn without_fallthrough_misses_under_the_site_get_not_found() {
        let dir = component();
        let mut spa = options("web/**");
        spa.url_path = Some("app".into());
        spa.fallthrough = false;
        let site = Site::build("x", dir.path(), &spa).unwrap();
        assert_eq!(site.find("/app/nowhere"), Found::Missing);
        assert_eq!(site.find("/other/path"), Found::Pass, "outside the site, REST answers");
        spa.not_found = Some(NotFound::WithStatus { file: "web/index.html".into(), status_code: 200 });
        let site = Site::build("x", dir.path(), &spa).unwrap();
        assert_eq!(site.find("/app/route/in/the/client"), Found::File(&dir.path().join("web/index.html"), 200));
        spa.not_found = Some(NotFound::File("web/missing.html".into()));
        assert!(Site::build("x", dir.path(), &spa).unwrap_err().contains("does not exist"));
        spa.not_found = Some(NotFound::File("../etc/passwd".into()));
        assert!(Site::build("x", dir.path(), &spa).unwrap_err().contains("static.notFound"));
        spa.not_found = None;
        spa.url_path = Some("../up".into());
        assert!(Site::build("x", dir.path(), &spa).unwrap_err().contains("urlPath"));
    }

    #[test]
    fn base_url_paths_follow_harper() {
        for (given, expected) in [
            (None, "/"),
            (Some(""), "/"),
            (Some("/"), "/"),
            (Some("static"), "/static/"),
            (Some("/static/"), "/static/"),
            (Some("v1/static"), "/v1/static/"),
            (Some("./static"), "/comp/static/"),
            (Some("."), "/comp/"),
            (Some("./"), "/comp/"),
        ] {
            assert_eq!(base_url_path("comp", given).unwrap(), expected, "{given:?}");
        }
        assert!(base_url_path("comp", Some("./..")).is_err());
    }
}
