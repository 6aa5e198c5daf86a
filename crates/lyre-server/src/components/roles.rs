//! The `roles` plugin: YAML files (`roles.yaml`) defining roles, applied at each load
//! (Harper's `resources/roles.ts`). A role that does not exist is added; one whose
//! permissions differ is altered; one already as defined is left alone. Harper's
//! short forms are accepted: a role's databases at its top level (without
//! `permission`), a database's tables without `tables`, and a table's attributes
//! as a map (`attributes: {price: {read: true}}`) instead of `attribute_permissions`.

use std::path::Path;

use lyre_core::users::{NewRole, RoleChange};
use lyre_core::{Context, Engine, Value};
use serde_json::{Map, Value as Json};

use super::config::Patterns;

/// One role as a roles file defines it.
#[derive(Debug)]
pub struct RoleDefinition {
    /// The file it came from, for errors.
    file: String,
    /// The role's name (and id, when it is new).
    name: String,
    /// Its permission document, in the long form `add_role` takes.
    permission: Value,
}

/// Reads and normalizes every role the files matching `files` define; fails naming
/// the file (and role) that cannot be read.
pub fn read_files(dir: &Path, files: &Patterns) -> Result<Vec<RoleDefinition>, String> {
    let mut roles = Vec::new();
    for relative in files.globs().map_err(|e| format!("roles.files: {e}"))?.files(dir)? {
        let file = relative.display().to_string();
        let text = std::fs::read_to_string(dir.join(&relative)).map_err(|e| format!("{file}: {e}"))?;
        let document: Option<Map<String, Json>> =
            serde_saphyr::from_str(&text).map_err(|e| format!("{file}: not a map of roles: {e}"))?;
        for (name, role) in document.unwrap_or_default() {
            let permission = normalize(role).map_err(|e| format!("{file}: role '{name}': {e}"))?;
            let permission = serde_json::from_value(permission).map_err(|e| format!("{file}: role '{name}': {e}"))?;
            roles.push(RoleDefinition { file: file.clone(), name, permission });
        }
    }
    Ok(roles)
}

/// Adds or alters each role so it is as defined.
pub async fn apply(engine: &Engine, roles: Vec<RoleDefinition>) -> Result<(), String> {
    let ctx = Context::system();
    let users = engine.users();
    for role in roles {
        let failed = |e: lyre_core::Error| format!("{}: role '{}': {e}", role.file, role.name);
        let existing = users.list_roles(&ctx).map_err(failed)?.into_iter().find(|r| {
            r.get("role").and_then(Value::as_str) == Some(role.name.as_str())
                || (r.get("role").is_none() && r.get("id").and_then(Value::as_str) == Some(role.name.as_str()))
        });
        match existing {
            Some(stored) if stored.get("permission") == Some(&role.permission) => {}
            Some(stored) => {
                let id = stored.get("id").and_then(Value::as_str).unwrap_or(&role.name).to_string();
                let change = RoleChange { id, role: Some(role.name.clone()), permission: role.permission.clone() };
                users.alter_role(&ctx, engine, change).await.map_err(failed)?;
                tracing::info!(role = role.name, file = role.file, "altered a role to its definition");
            }
            None => {
                let new = NewRole { role: role.name.clone(), id: None, permission: role.permission.clone() };
                users.add_role(&ctx, engine, new).await.map_err(failed)?;
                tracing::info!(role = role.name, file = role.file, "added a role");
            }
        }
    }
    Ok(())
}

/// A role's definition in Harper's long form: the permission document, with every
/// database's `tables`, every table's four flags as booleans, and attributes as
/// `attribute_permissions`.
fn normalize(role: Json) -> Result<Json, String> {
    let Json::Object(mut role) = role else { return Err("a role must be a map".into()) };
    let mut permission = match role.remove("permission") {
        Some(Json::Object(permission)) => permission,
        Some(Json::Null) | None => {
            // The short form: the role is its permission; `access` is Harper's
            // application-defined flags, not a database.
            role.remove("access");
            role
        }
        Some(_) => return Err("'permission' must be a map".into()),
    };
    for (database, grant) in permission.iter_mut() {
        if lyre_core::access::RESERVED_KEYS.contains(&database.as_str()) {
            continue;
        }
        let Json::Object(grant) = grant else { return Err(format!("database '{database}' must be a map")) };
        if grant.get("tables").is_some_and(Json::is_null) {
            grant.insert("tables".into(), Json::Object(Map::new()));
        }
        if !grant.contains_key("tables") {
            let tables = std::mem::take(grant);
            grant.insert("tables".into(), Json::Object(tables));
        }
        let Some(Json::Object(tables)) = grant.get_mut("tables") else {
            return Err(format!("'{database}.tables' must be a map"));
        };
        for (table, flags) in tables.iter_mut() {
            let Json::Object(flags) = flags else { return Err(format!("table '{database}.{table}' must be a map")) };
            for flag in ["read", "insert", "update", "delete"] {
                let value = truthy(flags.get(flag));
                flags.insert(flag.into(), Json::Bool(value));
            }
            if let Some(attributes) = flags.remove("attributes").filter(|a| !a.is_null()) {
                let Json::Object(attributes) = attributes else {
                    return Err(format!("'{database}.{table}.attributes' must be a map"));
                };
                let list = attributes
                    .into_iter()
                    .map(|(name, attribute)| match attribute {
                        Json::Object(mut attribute) => {
                            attribute.insert("attribute_name".into(), Json::String(name));
                            Ok(Json::Object(attribute))
                        }
                        _ => Err(format!("attribute '{database}.{table}.{name}' must be a map")),
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                flags.insert("attribute_permissions".into(), Json::Array(list));
            }
            match flags.get_mut("attribute_permissions") {
                None | Some(Json::Null) => {
                    flags.insert("attribute_permissions".into(), Json::Null);
                }
                Some(Json::Array(list)) => {
                    for attribute in list {
                        let Json::Object(attribute) = attribute else {
                            return Err(format!("'{database}.{table}.attribute_permissions' must hold maps"));
                        };
                        for flag in ["read", "insert", "update"] {
                            let value = truthy(attribute.get(flag));
                            attribute.insert(flag.into(), Json::Bool(value));
                        }
                    }
                }
                Some(_) => return Err("attribute_permissions must be an array if defined".into()),
            }
        }
    }
    Ok(Json::Object(permission))
}

/// JavaScript's `Boolean(value)`, which Harper applies to every flag.
fn truthy(value: Option<&Json>) -> bool {
    match value {
        None | Some(Json::Null) | Some(Json::Bool(false)) => false,
        Some(Json::Number(n)) => n.as_f64().is_some_and(|n| n != 0.0 && !n.is_nan()),
        Some(Json::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_forms_become_the_long_form() {
        let short = json!({
            "super_user": false,
            "shop": {"products": {"read": true, "insert": 1, "attributes": {"cost": {"read": false, "update": "yes"}}}},
            "access": {"beta": true},
        });
        let long = json!({
            "super_user": false,
            "shop": {"tables": {"products": {
                "read": true, "insert": true, "update": false, "delete": false,
                "attribute_permissions": [{"attribute_name": "cost", "read": false, "insert": false, "update": true}],
            }}},
        });
        assert_eq!(normalize(short).unwrap(), long);
        let already = json!({"permission": {"shop": {"tables": {"orders": {"read": true}}}}});
        assert_eq!(
            normalize(already).unwrap(),
            json!({"shop": {"tables": {"orders": {
                "read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": null,
            }}}})
        );
        assert!(normalize(json!({"shop": {"t": {"attribute_permissions": {"a": 1}}}})).unwrap_err().contains("array"));
        assert!(normalize(json!(["not", "a", "map"])).is_err());
        assert!(normalize(json!({"shop": 3})).unwrap_err().contains("'shop'"));
        // Harper's flags are not databases; nulls are as good as absent.
        let flags = normalize(json!({"cluster_user": false, "permission": null, "shop": {"tables": null}})).unwrap();
        assert_eq!(flags, json!({"cluster_user": false, "shop": {"tables": {}}}));
        let no_attributes = normalize(json!({"shop": {"t": {"read": true, "attributes": null}}})).unwrap();
        assert_eq!(no_attributes["shop"]["tables"]["t"]["attribute_permissions"], Json::Null);
    }
}
