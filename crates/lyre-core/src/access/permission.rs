//! A role's permission document (Harper's shape), read once into a typed form that
//! checks are cheap against:
//!
//! ```json
//! { "super_user": false, "structure_user": true | false | ["db"],
//!   "<database>": { "tables": { "<table>": {
//!       "read": true, "insert": true, "update": true, "delete": false,
//!       "attribute_permissions": [{"attribute_name": "a", "read": true, "insert": false, "update": false}] } } } }
//! ```
//!
//! A database or table the document does not name grants nothing. A non-empty
//! `attribute_permissions` list is a whitelist: unlisted attributes grant nothing,
//! except the primary key, which a listed attribute's grants extend to.

use std::collections::HashMap;

use crate::value::{Object, Value};

/// Which databases a role may change the structure of (tables and attributes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Structure {
    /// None.
    #[default]
    None,
    /// Every database (and it may create and drop databases).
    All,
    /// These databases.
    Databases(Vec<String>),
}

impl Structure {
    /// Whether the role may change the structure of `database`.
    pub fn covers(&self, database: &str) -> bool {
        match self {
            Structure::None => false,
            Structure::All => true,
            Structure::Databases(names) => names.iter().any(|n| n == database),
        }
    }
}

/// What a role grants on one attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttributeGrant {
    /// May read it.
    pub read: bool,
    /// May set it on new records.
    pub insert: bool,
    /// May change it on existing records.
    pub update: bool,
}

/// What a role grants on one table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableGrant {
    /// May read records.
    pub read: bool,
    /// May create records.
    pub insert: bool,
    /// May change records.
    pub update: bool,
    /// May remove records.
    pub delete: bool,
    /// Per-attribute grants; `None` when the table has no attribute list (every
    /// attribute as the table).
    pub attributes: Option<HashMap<String, AttributeGrant>>,
}

impl TableGrant {
    /// Everything, on every attribute (a super user, or a structure user's database).
    pub fn all() -> Self {
        Self { read: true, insert: true, update: true, delete: true, attributes: None }
    }

    /// Whether the grant lets the role see the table at all.
    pub fn describes(&self) -> bool {
        self.read || self.insert || self.update || self.delete
    }

    /// What the role may do with attribute `name` of a table whose primary key is
    /// `primary_key`.
    pub fn attribute(&self, name: &str, primary_key: &str) -> AttributeGrant {
        let table = AttributeGrant { read: self.read, insert: self.insert, update: self.update };
        let Some(attributes) = &self.attributes else { return table };
        if let Some(grant) = attributes.get(name) {
            return and(*grant, table);
        }
        if name == primary_key {
            // The key comes with whatever any listed attribute grants.
            let any = attributes.values().fold(AttributeGrant::default(), |acc, g| AttributeGrant {
                read: acc.read || g.read,
                insert: acc.insert || g.insert,
                update: acc.update || g.update,
            });
            return and(any, table);
        }
        AttributeGrant::default()
    }
}

fn and(a: AttributeGrant, b: AttributeGrant) -> AttributeGrant {
    AttributeGrant { read: a.read && b.read, insert: a.insert && b.insert, update: a.update && b.update }
}

/// A role's permissions, typed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permissions {
    /// May do everything.
    pub super_user: bool,
    /// The legacy replication role flag (kept, grants nothing else here).
    pub cluster_user: bool,
    /// Which databases it may change the structure of.
    pub structure: Structure,
    /// Per database, per table.
    pub tables: HashMap<String, HashMap<String, TableGrant>>,
}

/// Keys of a permission document that are not database names.
pub const RESERVED_KEYS: [&str; 3] = ["super_user", "cluster_user", "structure_user"];

impl Permissions {
    /// Reads a stored permission document. Stored documents were validated when the
    /// role was written; anything unreadable here grants nothing.
    pub fn from_document(document: &Value) -> Self {
        let Value::Object(doc) = document else { return Self::default() };
        let flag = |key: &str| doc.get(key) == Some(&Value::Bool(true));
        let structure = match doc.get("structure_user") {
            Some(Value::Bool(true)) => Structure::All,
            Some(Value::Array(names)) => {
                Structure::Databases(names.iter().filter_map(Value::as_str).map(str::to_string).collect())
            }
            _ => Structure::None,
        };
        let mut tables = HashMap::new();
        for (database, grants) in doc.iter().filter(|(k, _)| !RESERVED_KEYS.contains(&k.as_str())) {
            let Some(Value::Object(listed)) = object(grants).and_then(|g| g.get("tables")) else { continue };
            let per_table = listed.iter().filter_map(|(t, g)| Some((t.clone(), table_grant(object(g)?)))).collect();
            tables.insert(database.clone(), per_table);
        }
        Self { super_user: flag("super_user"), cluster_user: flag("cluster_user"), structure, tables }
    }

    /// The grant on `database.table`, if the document names the table. A structure
    /// user's databases grant everything on every table.
    pub fn table(&self, database: &str, table: &str) -> Option<TableGrant> {
        if self.super_user || self.structure.covers(database) {
            return Some(TableGrant::all());
        }
        self.tables.get(database)?.get(table).cloned()
    }

    /// Whether the role sees `database` at all (some table in it, or its structure).
    pub fn describes_database(&self, database: &str) -> bool {
        if self.super_user {
            return true;
        }
        // The system database (users, roles, sessions) is described to super users only.
        database != crate::catalog::SYSTEM_DATABASE
            && (self.structure.covers(database)
                || self.tables.get(database).is_some_and(|t| t.values().any(TableGrant::describes)))
    }
}

fn object(value: &Value) -> Option<&Object> {
    match value {
        Value::Object(o) => Some(o),
        _ => None,
    }
}

fn table_grant(grant: &Object) -> TableGrant {
    let flag = |o: &Object, key: &str| o.get(key) == Some(&Value::Bool(true));
    let attributes = match grant.get("attribute_permissions") {
        Some(Value::Array(list)) if !list.is_empty() => Some(
            list.iter()
                .filter_map(object)
                .filter_map(|a| {
                    let name = a.get("attribute_name")?.as_str()?.to_string();
                    Some((
                        name,
                        AttributeGrant { read: flag(a, "read"), insert: flag(a, "insert"), update: flag(a, "update") },
                    ))
                })
                .collect(),
        ),
        _ => None,
    };
    TableGrant {
        read: flag(grant, "read"),
        insert: flag(grant, "insert"),
        update: flag(grant, "update"),
        delete: flag(grant, "delete"),
        attributes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(json: &str) -> Permissions {
        Permissions::from_document(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn unnamed_tables_grant_nothing_and_named_ones_their_flags() {
        let p = perms(r#"{"dev":{"tables":{"dog":{"read":true,"insert":false,"update":false,"delete":false}}}}"#);
        let dog = p.table("dev", "dog").unwrap();
        assert!(dog.read && !dog.insert);
        assert!(p.table("dev", "cat").is_none());
        assert!(p.table("prod", "dog").is_none());
        assert!(p.describes_database("dev") && !p.describes_database("prod"));
    }

    #[test]
    fn an_attribute_list_is_a_whitelist_that_extends_to_the_key() {
        let p = perms(
            r#"{"dev":{"tables":{"dog":{"read":true,"insert":true,"update":true,"delete":false,
                "attribute_permissions":[{"attribute_name":"name","read":true,"insert":false,"update":true}]}}}}"#,
        );
        let dog = p.table("dev", "dog").unwrap();
        assert_eq!(dog.attribute("name", "id"), AttributeGrant { read: true, insert: false, update: true });
        assert_eq!(dog.attribute("age", "id"), AttributeGrant::default());
        assert_eq!(dog.attribute("id", "id"), AttributeGrant { read: true, insert: false, update: true });
    }

    #[test]
    fn an_attribute_cannot_grant_more_than_its_table() {
        let p = perms(
            r#"{"dev":{"tables":{"dog":{"read":true,"insert":false,"update":false,"delete":false,
                "attribute_permissions":[{"attribute_name":"name","read":true,"insert":true,"update":true}]}}}}"#,
        );
        assert!(!p.table("dev", "dog").unwrap().attribute("name", "id").insert);
    }

    #[test]
    fn structure_users_own_their_databases() {
        let p = perms(r#"{"structure_user":["dev"]}"#);
        assert!(p.structure.covers("dev") && !p.structure.covers("prod"));
        assert_eq!(p.table("dev", "anything"), Some(TableGrant::all()));
        assert!(p.table("prod", "anything").is_none());
        assert_eq!(perms(r#"{"structure_user":true}"#).structure, Structure::All);
    }
}
