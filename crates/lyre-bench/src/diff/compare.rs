//! Comparing two servers' answers: normalisation, the allow-list of documented
//! differences, and the per-kind report with reproductions.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::diff::Request;

/// Properties whose values differ legitimately between two servers (version stamps,
/// storage sizes), and `new_attributes`, which Lyre's write answers carry as Harper
/// 4.7's do and Harper 5's leave out (an addition no client breaks on): removed
/// everywhere before comparing.
const VOLATILE: [&str; 8] = [
    "txn_time",
    "__createdtime__",
    "__updatedtime__",
    "db_size",
    "table_size",
    "db_audit_size",
    "last_updated_record",
    "new_attributes",
];

/// Reproductions kept per kind of request unless told otherwise.
pub const REPRODUCTIONS: usize = 4;

/// Characters of a body a Markdown report shows.
const SHOWN: usize = 300;

/// A documented difference: requests of `kind` whose description contains every one
/// of `contains` count as agreeing, for `reason`.
#[derive(Debug, Clone, Deserialize)]
pub struct Allowed {
    /// A short name.
    pub id: String,
    /// The kind of request (`rest GET query`, `op insert`, ...), or `*`.
    pub kind: String,
    /// Texts the request's description must all contain.
    pub contains: Vec<String>,
    /// Only when the statuses are these (`[lyre, reference]`), if given.
    #[serde(default)]
    pub statuses: Option<[u16; 2]>,
    /// Only when the reference's results relate so to Lyre's, if given: an entry for
    /// a reference that leaves records out (or adds some) then covers no other kind
    /// of difference in the same requests.
    #[serde(default)]
    pub relation: Option<Relation>,
    /// Why the difference is deliberate or the reference is wrong.
    pub reason: String,
}

/// How the reference's results (an array) relate to Lyre's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The reference's are Lyre's with some left out, the rest in Lyre's order.
    Fewer,
    /// The reference's are Lyre's with some added, Lyre's in the reference's order.
    More,
}

impl Relation {
    fn holds(self, lyre: &Value, reference: &Value) -> bool {
        let (Value::Array(a), Value::Array(b)) = (lyre, reference) else { return false };
        match self {
            Relation::Fewer => b.len() < a.len() && is_subsequence(b, a),
            Relation::More => a.len() < b.len() && is_subsequence(a, b),
        }
    }
}

/// Whether every item of `short` appears in `long`, in the same order.
fn is_subsequence(short: &[Value], long: &[Value]) -> bool {
    let mut rest = long.iter();
    short.iter().all(|item| rest.any(|candidate| candidate == item))
}

/// The allow-list file.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AllowList {
    /// Its entries.
    pub allowed: Vec<Allowed>,
}

impl AllowList {
    /// Reads the allow-list (JSON) at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    fn find(&self, request: &Request, statuses: [u16; 2], answers: [&Value; 2]) -> Option<&Allowed> {
        let described = request.describe();
        self.allowed.iter().find(|a| {
            (a.kind == "*" || a.kind == request.kind)
                && a.contains.iter().all(|c| described.contains(c.as_str()))
                && a.statuses.is_none_or(|s| s == statuses)
                && a.relation.is_none_or(|r| r.holds(answers[0], answers[1]))
        })
    }
}

/// A differing request, as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reproduction {
    /// The request.
    pub request: String,
    /// Lyre's status and (normalised) body, whole.
    pub lyre: (u16, String),
    /// The reference's.
    pub reference: (u16, String),
}

/// Agreement figures for one kind of request.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct KindReport {
    /// Requests sent.
    pub total: usize,
    /// Requests whose statuses agree.
    pub status_agree: usize,
    /// Requests whose normalised answers (status and body) agree.
    pub agree: usize,
    /// Differences the allow-list accounts for, by entry.
    pub allowed: BTreeMap<String, usize>,
    /// The first differences the allow-list does not account for.
    pub reproductions: Vec<Reproduction>,
}

/// The whole comparison, by kind of request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Reproductions kept per kind.
    pub limit: usize,
    /// Figures per kind.
    pub kinds: BTreeMap<&'static str, KindReport>,
    /// The allow-list entries that accounted for a difference, with their reasons.
    pub reasons: BTreeMap<String, String>,
}

impl Default for Report {
    fn default() -> Self {
        Self::keeping(REPRODUCTIONS)
    }
}

impl Report {
    /// An empty report that keeps up to `limit` reproductions per kind.
    pub fn keeping(limit: usize) -> Self {
        Self { limit, kinds: BTreeMap::new(), reasons: BTreeMap::new() }
    }

    /// Compares one request's two answers.
    pub fn record(&mut self, request: &Request, lyre: (u16, Bytes), reference: (u16, Bytes), allow: &AllowList) {
        let kind = self.kinds.entry(request.kind).or_default();
        kind.total += 1;
        let statuses = [lyre.0, reference.0];
        let (a, b) = (normalise(request, lyre.0, &lyre.1), normalise(request, reference.0, &reference.1));
        if lyre.0 == reference.0 {
            kind.status_agree += 1;
        }
        if lyre.0 == reference.0 && a == b {
            kind.agree += 1;
            return;
        }
        if let Some(allowed) = allow.find(request, statuses, [&a, &b]) {
            *kind.allowed.entry(allowed.id.clone()).or_default() += 1;
            self.reasons.insert(allowed.id.clone(), allowed.reason.clone());
            return;
        }
        if kind.reproductions.len() < self.limit {
            let raw = |status: u16, body: &Bytes, normal: &Value| match status {
                400.. | 0 => Value::String(String::from_utf8_lossy(body).into_owned()).to_string(),
                _ => normal.to_string(),
            };
            kind.reproductions.push(Reproduction {
                request: request.describe(),
                lyre: (lyre.0, raw(lyre.0, &lyre.1, &a)),
                reference: (reference.0, raw(reference.0, &reference.1, &b)),
            });
        }
    }

    /// All requests, and those agreeing: exactly, and counting allowed differences.
    pub fn totals(&self) -> (usize, usize, usize, usize) {
        let total = self.kinds.values().map(|k| k.total).sum();
        let status = self.kinds.values().map(|k| k.status_agree).sum();
        let agree = self.kinds.values().map(|k| k.agree).sum();
        let allowed: usize = self.kinds.values().flat_map(|k| k.allowed.values()).sum();
        (total, status, agree, agree + allowed)
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let (total, status, agree, counted) = self.totals();
        let pct = |n: usize| if total == 0 { 0.0 } else { n as f64 * 100.0 / total as f64 };
        let mut out = format!(
            "{total} requests: status agrees for {status} ({:.1}%), the whole normalised answer for {agree} ({:.1}%), {counted} ({:.1}%) counting allowed differences.\n\n",
            pct(status),
            pct(agree),
            pct(counted)
        );
        out.push_str("| kind | requests | status agrees | answer agrees | allowed |\n|---|---|---|---|---|\n");
        for (name, kind) in &self.kinds {
            let allowed: Vec<String> = kind.allowed.iter().map(|(id, n)| format!("{id} ×{n}")).collect();
            out.push_str(&format!(
                "| {name} | {} | {} | {} | {} |\n",
                kind.total,
                kind.status_agree,
                kind.agree,
                allowed.join(", ")
            ));
        }
        if !self.reasons.is_empty() {
            out.push_str("\n## Allowed differences\n\n");
            for (id, reason) in &self.reasons {
                out.push_str(&format!("- `{id}`: {reason}\n"));
            }
        }
        for (name, kind) in &self.kinds {
            if kind.reproductions.is_empty() {
                continue;
            }
            out.push_str(&format!("\n## {name}: differences not allowed\n\n"));
            for r in &kind.reproductions {
                out.push_str(&format!(
                    "- `{}`\n  - lyre {}: `{}`\n  - reference {}: `{}`\n",
                    r.request,
                    r.lyre.0,
                    shortened(&r.lyre.1),
                    r.reference.0,
                    shortened(&r.reference.1)
                ));
            }
        }
        out
    }
}

fn shortened(text: &str) -> String {
    if text.len() > SHOWN { format!("{}…", &text[..text.floor_char_boundary(SHOWN)]) } else { text.to_owned() }
}

/// What is compared of an answer: an error's body only as "an error" (servers word
/// errors differently; the status says what kind), a success's JSON with volatile
/// properties removed, numbers compared by value, and unordered results sorted.
fn normalise(request: &Request, status: u16, body: &[u8]) -> Value {
    if status >= 400 || status == 0 {
        return Value::String("error".into());
    }
    let mut value =
        serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into()));
    clean(&mut value);
    if request.unordered
        && let Value::Array(items) = &mut value
    {
        items.sort_by_key(canonical);
    }
    value
}

/// `value` as text with every object's keys in order: the same for two values that
/// differ only in key order (which `==` ignores too).
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, String> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            let fields: Vec<String> = sorted.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

fn clean(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for volatile in VOLATILE {
                map.remove(volatile);
            }
            map.values_mut().for_each(clean);
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        Value::Number(n) => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *value = Value::from(f as i64);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_relation_holds_only_for_records_left_out_or_added_in_order() {
        let lyre = json!([{"id": 1}, {"id": 2}, {"id": 3}]);
        assert!(Relation::Fewer.holds(&lyre, &json!([{"id": 1}, {"id": 3}])));
        assert!(!Relation::Fewer.holds(&lyre, &json!([{"id": 3}, {"id": 1}])), "reordered");
        assert!(!Relation::Fewer.holds(&lyre, &json!([{"id": 1}, {"id": 4}])), "another record");
        assert!(!Relation::Fewer.holds(&lyre, &lyre), "the same");
        assert!(Relation::More.holds(&json!([{"id": 2}]), &lyre));
        assert!(!Relation::More.holds(&lyre, &json!({"id": 1})), "not an array");
    }
}
