//! Checking a role's permission document before it is stored, with Harper's
//! messages: problems with the document as a whole and with the databases and
//! tables it names go to `main_permissions`; problems inside one table's grant go to
//! `schema_permissions["<database>_<table>"]`, each message naming the attribute or
//! key it is about.

use crate::access::permission::RESERVED_KEYS;
use crate::error::PermissionErrors;
use crate::value::Value;

/// What validation needs to know of the catalog.
pub trait CatalogView: Sync {
    /// Whether database `name` exists.
    fn has_database(&self, name: &str) -> bool;
    /// The attribute names of `database.table`, if the table exists.
    fn table_attributes(&self, database: &str, table: &str) -> Option<Vec<String>>;
}

const ACTIONS: [&str; 4] = ["read", "insert", "update", "delete"];
const ATTRIBUTE_ACTIONS: [&str; 3] = ["read", "insert", "update"];

/// Checks `permission` against `catalog`.
pub fn validate_permission(permission: &Value, catalog: &dyn CatalogView) -> PermissionErrors {
    let mut errors = PermissionErrors::default();
    let Value::Object(doc) = permission else {
        errors.main.push("Permission can't be blank".into());
        return errors;
    };
    for flag in ["super_user", "cluster_user"] {
        if doc.get(flag).is_some_and(|v| !matches!(v, Value::Bool(_) | Value::Null)) {
            errors.main.push(format!("Value for '{flag}' permission must be a boolean"));
        }
    }
    if doc.get("super_user") == Some(&Value::Bool(true)) && doc.keys().any(|k| k != "super_user") {
        errors.main.push("Roles with 'super_user' set to true cannot have other permissions set.".into());
    }
    match doc.get("structure_user") {
        None | Some(Value::Bool(_) | Value::Null) => {}
        Some(Value::Array(names)) => {
            for name in names {
                match name.as_str() {
                    Some(db) if catalog.has_database(db) => {}
                    Some(db) => errors.main.push(format!("database '{db}' does not exist")),
                    None => errors.main.push(format!("database '{name}' does not exist")),
                }
            }
        }
        Some(_) => errors.main.push("Value for 'structure_user' permission must be a boolean or Array".into()),
    }
    for (database, grant) in doc.iter().filter(|(k, _)| !RESERVED_KEYS.contains(&k.as_str())) {
        if !catalog.has_database(database) {
            errors.main.push(format!("database '{database}' does not exist"));
            continue;
        }
        let tables = match grant {
            Value::Object(g) => g.get("tables"),
            _ => None,
        };
        let Some(Value::Object(tables)) = tables else {
            errors.main.push(format!("Permissions for database '{database}' must be an object with a 'tables' object"));
            continue;
        };
        for (table, grant) in tables {
            let Some(attributes) = catalog.table_attributes(database, table) else {
                errors.main.push(format!("Table '{database}.{table}' does not exist"));
                continue;
            };
            let found = table_errors(database, table, grant, &attributes);
            if !found.is_empty() {
                errors.tables.insert(format!("{database}_{table}"), found);
            }
        }
    }
    errors
}

fn table_errors(database: &str, table: &str, grant: &Value, attributes: &[String]) -> Vec<String> {
    let mut errors = Vec::new();
    let Value::Object(grant) = grant else {
        return vec![format!("Permissions for table '{database}.{table}' must be an object")];
    };
    for key in grant.keys() {
        if !ACTIONS.contains(&key.as_str()) && key != "attribute_permissions" {
            errors.push(format!("Invalid table permission key value '{key}'"));
        }
    }
    for action in ACTIONS {
        let upper = action.to_uppercase();
        match grant.get(action) {
            None => errors.push(format!("Missing table {upper} permission")),
            Some(Value::Bool(_)) => {}
            Some(_) => errors.push(format!("Table {upper} permission must be a boolean")),
        }
    }
    let list = match grant.get("attribute_permissions") {
        None | Some(Value::Null) => return errors,
        Some(Value::Array(list)) => list,
        Some(_) => {
            errors.push("Value for 'attribute_permissions' must be an array".into());
            return errors;
        }
    };
    let table_denies = |action: &str| grant.get(action) == Some(&Value::Bool(false));
    let mut conflict = false;
    for entry in list {
        let Value::Object(entry) = entry else {
            errors.push("Permission object in 'attribute_permission' missing an 'attribute_name'".into());
            continue;
        };
        for key in entry.keys() {
            if !ATTRIBUTE_ACTIONS.contains(&key.as_str()) && key != "attribute_name" && key != "delete" {
                errors.push(format!("Invalid attribute permission key value '{key}'"));
            }
        }
        let Some(name) = entry.get("attribute_name").and_then(Value::as_str) else {
            errors.push("Permission object in 'attribute_permission' missing an 'attribute_name'".into());
            continue;
        };
        if !attributes.iter().any(|a| a == name) {
            errors.push(format!("Invalid attribute '{name}' in 'attribute_permissions'"));
        }
        for action in ATTRIBUTE_ACTIONS {
            let upper = action.to_uppercase();
            match entry.get(action) {
                None => errors.push(format!("{upper} attribute permission missing for '{name}'")),
                Some(Value::Bool(granted)) => conflict |= *granted && table_denies(action),
                Some(_) => errors.push(format!("{upper} attribute permission for '{name}' must be a boolean")),
            }
        }
    }
    if conflict {
        errors.push(format!(
            "You have a conflict with TABLE permissions for '{database}.{table}' being false and ATTRIBUTE permissions being true"
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Catalog;

    impl CatalogView for Catalog {
        fn has_database(&self, name: &str) -> bool {
            name == "dev"
        }
        fn table_attributes(&self, database: &str, table: &str) -> Option<Vec<String>> {
            (database == "dev" && table == "dog").then(|| vec!["id".into(), "name".into()])
        }
    }

    fn check(json: &str) -> PermissionErrors {
        validate_permission(&serde_json::from_str(json).unwrap(), &Catalog)
    }

    #[test]
    fn a_well_formed_document_passes() {
        let ok = check(
            r#"{"structure_user":["dev"],"dev":{"tables":{"dog":{"read":true,"insert":false,"update":false,"delete":false,
                "attribute_permissions":[{"attribute_name":"name","read":true,"insert":false,"update":false}]}}}}"#,
        );
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn problems_name_their_database_table_attribute_or_key() {
        let errors = check(
            r#"{"super_user":"yes","prod":{"tables":{}},"dev":{"tables":{"cat":{},"dog":{"read":true,"insert":1,"update":false,
                "fly":true,"attribute_permissions":[{"attribute_name":"age","read":true,"insert":false,"update":false},
                {"attribute_name":"name","read":true,"insert":false,"update":true}]}}}}"#,
        );
        assert_eq!(
            errors.main,
            [
                "Value for 'super_user' permission must be a boolean",
                "database 'prod' does not exist",
                "Table 'dev.cat' does not exist"
            ]
        );
        assert_eq!(
            errors.tables["dev_dog"],
            [
                "Invalid table permission key value 'fly'",
                "Table INSERT permission must be a boolean",
                "Missing table DELETE permission",
                "Invalid attribute 'age' in 'attribute_permissions'",
                "You have a conflict with TABLE permissions for 'dev.dog' being false and ATTRIBUTE permissions being true",
            ]
        );
    }

    #[test]
    fn a_super_user_role_has_nothing_else() {
        assert_eq!(
            check(r#"{"super_user":true,"structure_user":true}"#).main,
            ["Roles with 'super_user' set to true cannot have other permissions set."]
        );
    }
}
