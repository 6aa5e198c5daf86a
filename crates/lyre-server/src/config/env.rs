//! Environment-variable overrides named after config paths, as Harper's.

use serde_json::Value;

/// For every leaf of `defaults` at path `a.b.c`, applies the variable `A_B_C` (matched
/// case-insensitively on the key names) to `tree`, parsed as YAML-like scalar.
pub(super) fn apply_overrides(tree: &mut Value, defaults: &Value, vars: &dyn Fn(&str) -> Option<String>) {
    let mut leaves = Vec::new();
    collect_leaves(defaults, &mut Vec::new(), &mut leaves);
    for path in leaves {
        let name = path.iter().map(|s| s.to_uppercase()).collect::<Vec<_>>().join("_");
        if let Some(raw) = vars(&name) {
            set_path(tree, &path, parse_scalar(&raw));
        }
    }
}

pub(super) fn collect_leaves(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(key.clone());
                collect_leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ => out.push(prefix.clone()),
    }
}

pub(super) fn set_path(tree: &mut Value, path: &[String], value: Value) {
    let mut node = tree;
    for key in path {
        if !node.is_object() {
            *node = Value::Object(Default::default());
        }
        node = match node {
            Value::Object(map) => map.entry(key.clone()).or_insert(Value::Null),
            _ => return,
        };
    }
    *node = value;
}

/// `true`/`false`, numbers and `null` become themselves; anything else is a string.
pub(super) fn parse_scalar(raw: &str) -> Value {
    match raw.trim() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" | "" => Value::Null,
        other => other
            .parse::<u64>()
            .map(Value::from)
            .or_else(|_| other.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::String(raw.to_string())),
    }
}
