//! Table and database schemas, and how they change.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::catalog::TableDefinition;
use crate::error::{Error, Result};

/// Attribute set on create in dynamic tables (Harper's name).
pub const CREATED_TIME: &str = "__createdtime__";
/// Attribute set on every write in dynamic tables (Harper's name).
pub const UPDATED_TIME: &str = "__updatedtime__";

/// One attribute of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    /// The attribute's name.
    pub name: String,
    /// Identifier used in index keys; unique within the database, never reused.
    pub id: u32,
    /// Declared type (`String`, `Int`, ...), when the table declares one.
    pub type_name: Option<String>,
    /// Whether a secondary index is kept for it.
    pub indexed: bool,
    /// A vector (HNSW) index kept for it by a derived-index runner, instead of an
    /// ordinary index (`indexed` is then false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<super::VectorIndex>,
    /// Whether it is the primary key.
    pub is_primary_key: bool,
    /// Whether an array value has ever been indexed for it (results then need
    /// de-duplication, since one record has several index entries).
    #[serde(default)]
    pub multi_valued: bool,
    /// The declared shape beyond the type name (list, required, nested fields, time
    /// stamp), for tables defined by a schema.
    #[serde(default)]
    pub shape: Shape,
}

impl Computed {
    /// What its index entries depend on: the version, or else the expression.
    fn identity(&self) -> Option<&str> {
        self.version.as_deref().or(self.from.as_deref())
    }
}

/// What a declared attribute must look like, beyond its type name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// `[T]`: an array of `T`.
    #[serde(default)]
    pub list: bool,
    /// `T!`: may not be null or missing.
    #[serde(default)]
    pub required: bool,
    /// Fields of a nested (non-table) object type.
    #[serde(default)]
    pub fields: Vec<NestedField>,
    /// Set by the server on write.
    #[serde(default)]
    pub stamp: Option<Stamp>,
    /// `@computed`: derived from the record when read or indexed, never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computed: Option<Computed>,
}

/// A computed attribute (`@computed`): its value comes from the record through code
/// the server runs (an [`crate::AttributeComputer`]), is never stored, and a write
/// may not set it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Computed {
    /// `@computed(from: "price * taxRate")`: a JavaScript expression over the
    /// record's attributes; `None`: a function the application registers
    /// (`setComputedAttribute`).
    #[serde(default)]
    pub from: Option<String>,
    /// `@computed(version: "2")`: a new version re-indexes the attribute (the
    /// expression itself serves when none is given).
    #[serde(default)]
    pub version: Option<String>,
    /// `@enumerable`: whole-record reads carry it; otherwise only a projection that
    /// names it does (as Harper's non-enumerable getters).
    #[serde(default)]
    pub enumerable: bool,
}

/// A field of a nested object type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NestedField {
    /// The field's name.
    pub name: String,
    /// Its type name.
    pub type_name: String,
    /// Its shape.
    pub shape: Shape,
}

/// An attribute the server fills in on write (`@createdTime`, `@updatedTime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stamp {
    /// Set when the record is created.
    Created,
    /// Set on every write.
    Updated,
}

/// A `@relationship` field: a join to another table, not a stored attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relationship {
    /// The field's name.
    pub name: String,
    /// The database of the related table.
    pub database: String,
    /// The related table.
    pub table: String,
    /// `from`: the attribute of this table holding the related record's key(s).
    pub from: Option<String>,
    /// `to`: the attribute of the related table holding this record's key.
    pub to: Option<String>,
    /// Whether the field is a list.
    pub list: bool,
}

/// How to create an attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeSpec {
    /// The name.
    pub name: String,
    /// The declared type, if any.
    pub type_name: Option<String>,
    /// Whether to index it.
    pub indexed: bool,
}

/// How to create a table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// The table's name.
    pub name: String,
    /// The primary-key attribute's name.
    pub primary_key: String,
    /// The primary key's declared type, if any.
    pub primary_key_type: Option<String>,
    /// Declared attributes; `None` makes a dynamic table (attributes appear on write).
    pub attributes: Option<Vec<AttributeSpec>>,
    /// Whether changes go to the audit log.
    pub audit: bool,
    /// When its records expire, if they do.
    pub expiration: Option<Expiration>,
    /// The attribute holding each record's own expiry time (`@expiresAt`), if any.
    pub expires_at: Option<String>,
}

impl TableSpec {
    /// A dynamic table (attributes appear on write, all indexed), audited, whose
    /// records never expire: what `create_table` makes without `attributes`.
    pub fn dynamic(name: impl Into<String>, primary_key: impl Into<String>) -> Self {
        TableSpec {
            name: name.into(),
            primary_key: primary_key.into(),
            primary_key_type: None,
            attributes: None,
            audit: true,
            expiration: None,
            expires_at: None,
        }
    }
}

/// When a table's records expire (`@table(expiration, eviction, scanInterval)`, or
/// `create_table`'s `expiration`): a record is hidden from every read once
/// `expiration` seconds have passed since it was last written, and removed from
/// storage `eviction` seconds after that by a sweep every `scan_interval` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiration {
    /// Seconds after its last write a record is hidden (at least 1).
    pub expiration: u64,
    /// Further seconds before it is removed from storage.
    pub eviction: u64,
    /// Seconds between sweeps; `None` means a quarter of expiration plus eviction.
    pub scan_interval: Option<u64>,
}

impl Expiration {
    /// The longest any of the three may be, in seconds (a hundred years): larger
    /// values would overflow time arithmetic.
    pub const MAX_SECONDS: u64 = 100 * 365 * 86_400;

    /// How often the table is swept for records to remove (at least every second).
    pub fn sweep_period(&self) -> std::time::Duration {
        let seconds = self.scan_interval.unwrap_or(self.expiration.saturating_add(self.eviction) / 4);
        std::time::Duration::from_secs(seconds.clamp(1, Self::MAX_SECONDS))
    }

    /// Whether a record last written at `version` (ms) is expired at `now` (ms).
    pub fn is_expired(&self, version: f64, now: f64) -> bool {
        version + (self.expiration as f64) * 1_000.0 <= now
    }

    /// Whether a record last written at `version` (ms) is due for removal at `now` (ms).
    pub fn is_evictable(&self, version: f64, now: f64) -> bool {
        version + (self.expiration as f64 + self.eviction as f64) * 1_000.0 <= now
    }
}

/// A table's schema. Immutable once published; changed by copy-on-write in the writer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableSchema {
    /// The database it lives in.
    pub database: String,
    /// The table's name.
    pub name: String,
    /// The primary-key attribute's name.
    pub primary_key: String,
    /// Attributes in Harper's describe order: primary key, timestamps, then first-seen.
    pub attributes: Vec<Attribute>,
    /// Whether changes are audited.
    pub audit: bool,
    /// Whether the attributes were declared (typed table) rather than discovered.
    pub schema_defined: bool,
    /// Creation order within the database.
    pub created_seq: u64,
    /// `@sealed`: properties not declared are rejected.
    #[serde(default)]
    pub sealed: bool,
    /// `@relationship` fields.
    #[serde(default)]
    pub relationships: Vec<Relationship>,
    /// When records expire; `None`: never.
    #[serde(default)]
    pub expiration: Option<Expiration>,
    /// `@expiresAt`: the attribute holding each record's own expiry time (ms since
    /// the epoch), which overrides `expiration` for a record that has one.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Attribute positions by name (foldhash: read on every request, see `Object`).
    #[serde(skip)]
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl TableSchema {
    /// Fails when `definition` names another primary key: a schema cannot change it.
    pub(crate) fn check_primary_key(&self, definition: &TableDefinition) -> Result<()> {
        if self.primary_key == definition.primary_key {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "the primary key of table '{}' is '{}'; a schema cannot change it to '{}'",
            self.name, self.primary_key, definition.primary_key
        )))
    }

    /// Finds an attribute by name.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.by_name.get(name).map(|&i| &self.attributes[i])
    }

    /// The primary-key attribute.
    pub fn primary_key_attribute(&self) -> Option<&Attribute> {
        self.attribute(&self.primary_key)
    }

    /// Whether the table maintains `__createdtime__`/`__updatedtime__`.
    pub fn has_timestamps(&self) -> bool {
        !self.schema_defined
    }

    /// Attributes with a secondary index (never the primary key).
    pub fn indexed_attributes(&self) -> impl Iterator<Item = &Attribute> {
        self.attributes.iter().filter(|a| a.indexed && !a.is_primary_key)
    }

    /// The attributes computed from each record (`@computed`), never stored.
    pub fn computed_attributes(&self) -> impl Iterator<Item = (&Attribute, &Computed)> {
        self.attributes.iter().filter_map(|a| a.shape.computed.as_ref().map(|c| (a, c)))
    }

    /// Whether any attribute is computed (reads and indexes then call the computer).
    pub fn has_computed(&self) -> bool {
        self.attributes.iter().any(|a| a.shape.computed.is_some())
    }

    fn push_attribute(&mut self, attribute: Attribute) {
        self.by_name.insert(attribute.name.clone(), self.attributes.len());
        self.attributes.push(attribute);
    }

    fn reindex(&mut self) {
        self.by_name = self.attributes.iter().enumerate().map(|(i, a)| (a.name.clone(), i)).collect();
    }

    /// Encodes the schema for the catalog.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec_named(self).map_err(|e| Error::Corrupt(format!("encoding a table schema: {e}")))
    }

    /// Decodes a schema stored by [`TableSchema::encode`].
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        let mut schema: TableSchema = rmp_serde::from_slice(bytes)?;
        schema.reindex();
        Ok(schema)
    }

    /// Catalog key of table `name`.
    pub(crate) fn catalog_key(name: &str) -> Vec<u8> {
        format!("table:{name}").into_bytes()
    }
}

/// What [`DatabaseSchema::define`] asks of storage.
#[derive(Debug, Default)]
pub(crate) struct Definition {
    /// The table did not exist.
    pub created: bool,
    /// Anything about the table changed.
    pub changed: bool,
    /// Attributes whose index must be built over the existing records.
    pub build: Vec<Attribute>,
    /// Attributes whose index entries must be removed.
    pub drop: Vec<Attribute>,
}

/// The schema of one database: its tables in creation order.
#[derive(Debug, Clone, Default)]
pub struct DatabaseSchema {
    /// The database's name.
    pub name: String,
    /// Tables in creation order.
    pub tables: IndexMap<String, Arc<TableSchema>, foldhash::fast::RandomState>,
    /// Next attribute id to hand out (ids are never reused within a database, so a
    /// reader holding an older snapshot never mistakes one attribute for another).
    pub(crate) next_attribute_id: u32,
    pub(crate) next_table_seq: u64,
}

/// Catalog key holding the database-wide counters.
pub(crate) const COUNTERS_KEY: &[u8] = b"counters";

impl DatabaseSchema {
    /// An empty schema for database `name`.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_string(), ..Self::default() }
    }

    /// Rebuilds a schema from catalog entries.
    pub(crate) fn load(name: &str, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Self> {
        let mut schema = Self::new(name);
        let mut tables = Vec::new();
        for (key, value) in entries {
            if key == COUNTERS_KEY {
                let (attr, table): (u32, u64) = rmp_serde::from_slice(&value)?;
                schema.next_attribute_id = attr;
                schema.next_table_seq = table;
            } else if key.starts_with(b"table:") {
                tables.push(TableSchema::decode(&value)?);
            }
        }
        tables.sort_by_key(|t| t.created_seq);
        schema.tables = tables.into_iter().map(|t| (t.name.clone(), Arc::new(t))).collect();
        Ok(schema)
    }

    /// The encoded counters, to persist whenever they change.
    pub(crate) fn encode_counters(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(&(self.next_attribute_id, self.next_table_seq))
            .map_err(|e| Error::Corrupt(format!("encoding catalog counters: {e}")))
    }

    /// The table's schema.
    pub fn table(&self, name: &str) -> Option<&Arc<TableSchema>> {
        self.tables.get(name)
    }

    /// Builds the schema of a new table (not yet inserted).
    pub(crate) fn new_table(&mut self, spec: &TableSpec) -> TableSchema {
        let mut table = TableSchema {
            database: self.name.clone(),
            name: spec.name.clone(),
            primary_key: spec.primary_key.clone(),
            attributes: Vec::new(),
            audit: spec.audit,
            schema_defined: spec.attributes.is_some(),
            created_seq: self.next_table_seq,
            sealed: false,
            relationships: Vec::new(),
            expiration: spec.expiration,
            expires_at: spec.expires_at.clone(),
            by_name: HashMap::default(),
        };
        self.next_table_seq += 1;
        let pk = Attribute {
            name: spec.primary_key.clone(),
            id: self.allocate_attribute_id(),
            type_name: spec.primary_key_type.clone(),
            indexed: true,
            vector: None,
            is_primary_key: true,
            multi_valued: false,
            shape: Default::default(),
        };
        table.push_attribute(pk);
        let table_spec_pk = spec.primary_key.as_str();
        match &spec.attributes {
            None => {
                for name in [CREATED_TIME, UPDATED_TIME] {
                    let id = self.allocate_attribute_id();
                    table.push_attribute(Attribute {
                        name: name.into(),
                        id,
                        type_name: None,
                        indexed: true,
                        vector: None,
                        is_primary_key: false,
                        multi_valued: false,
                        shape: Default::default(),
                    });
                }
            }
            Some(specs) => {
                for spec in specs.iter().filter(|s| s.name != table_spec_pk) {
                    let id = self.allocate_attribute_id();
                    table.push_attribute(Attribute {
                        name: spec.name.clone(),
                        id,
                        type_name: spec.type_name.clone(),
                        indexed: spec.indexed,
                        vector: None,
                        is_primary_key: false,
                        multi_valued: false,
                        shape: Default::default(),
                    });
                }
            }
        }
        table
    }

    /// Makes `table` match a schema definition, creating it if absent. Returns what
    /// storage work that needs: indexes to build and to drop. Fails (changing
    /// nothing) when the definition contradicts the table's primary key.
    pub(crate) fn define(&mut self, definition: &TableDefinition) -> Result<Definition> {
        let mut outcome = Definition::default();
        if self.table(&definition.table).is_none() {
            let spec = TableSpec {
                name: definition.table.clone(),
                primary_key: definition.primary_key.clone(),
                primary_key_type: Some(definition.primary_key_type.clone()),
                attributes: Some(Vec::new()),
                audit: definition.audit,
                expiration: definition.expiration,
                expires_at: None, // set below, with the rest of the definition
            };
            let table = self.new_table(&spec);
            self.tables.insert(table.name.clone(), Arc::new(table));
            outcome.created = true;
        }
        let database = self.name.clone();
        let current = self
            .table(&definition.table)
            .cloned()
            .ok_or_else(|| Error::TableNotFound { database, table: definition.table.clone() })?;
        current.check_primary_key(definition)?;
        let mut next = (*current).clone();
        next.schema_defined = true;
        next.sealed = definition.sealed;
        next.audit = definition.audit;
        next.relationships = definition.relationships.clone();
        next.expiration = definition.expiration;
        next.expires_at = definition.expires_at.clone();
        if let Some(pk) = next.by_name.get(&next.primary_key).copied() {
            next.attributes[pk].type_name = Some(definition.primary_key_type.clone());
        }
        for declared in &definition.attributes {
            match next.by_name.get(&declared.name).copied() {
                None => {
                    let attribute = Attribute {
                        name: declared.name.clone(),
                        id: self.allocate_attribute_id(),
                        type_name: Some(declared.type_name.clone()),
                        indexed: declared.indexed,
                        vector: declared.vector.clone(),
                        is_primary_key: false,
                        multi_valued: false,
                        shape: declared.shape.clone(),
                    };
                    if attribute.indexed {
                        outcome.build.push(attribute.clone());
                    }
                    next.push_attribute(attribute);
                }
                Some(i) => {
                    let attribute = &mut next.attributes[i];
                    // A computed attribute whose expression or version changed is
                    // indexed again (its stored entries follow the old code).
                    let recomputed = attribute.shape.computed.as_ref().map(Computed::identity)
                        != declared.shape.computed.as_ref().map(Computed::identity);
                    let (was_indexed, indexed) = (attribute.indexed, declared.indexed);
                    if was_indexed && (!indexed || recomputed) {
                        outcome.drop.push(attribute.clone());
                    }
                    attribute.indexed = declared.indexed;
                    attribute.vector = declared.vector.clone();
                    attribute.type_name = Some(declared.type_name.clone());
                    attribute.shape = declared.shape.clone();
                    if indexed && (!was_indexed || recomputed) {
                        outcome.build.push(attribute.clone());
                    }
                }
            }
        }
        outcome.changed = outcome.created
            || next.attributes != current.attributes
            || next.sealed != current.sealed
            || next.audit != current.audit
            || next.relationships != current.relationships
            || next.expiration != current.expiration
            || next.expires_at != current.expires_at
            || !current.schema_defined;
        self.tables.insert(next.name.clone(), Arc::new(next));
        Ok(outcome)
    }

    /// Adds an attribute to `table` (copy-on-write) and returns it.
    pub(crate) fn add_attribute(&mut self, table: &str, spec: AttributeSpec) -> Result<Attribute> {
        let id = self.allocate_attribute_id();
        let schema = self.table_mut(table)?;
        let attribute = Attribute {
            name: spec.name,
            id,
            type_name: spec.type_name,
            indexed: spec.indexed,
            vector: None,
            is_primary_key: false,
            multi_valued: false,
            shape: Default::default(),
        };
        schema.push_attribute(attribute.clone());
        Ok(attribute)
    }

    /// Removes an attribute from `table`; returns it.
    pub(crate) fn remove_attribute(&mut self, table: &str, name: &str) -> Result<Attribute> {
        let schema = self.table_mut(table)?;
        let index = *schema.by_name.get(name).ok_or_else(|| Error::AttributeNotFound(name.to_string()))?;
        let removed = schema.attributes.remove(index);
        schema.reindex();
        Ok(removed)
    }

    /// Marks `attribute` of `table` as holding arrays.
    pub(crate) fn mark_multi_valued(&mut self, table: &str, attribute: &str) -> Result<()> {
        let schema = self.table_mut(table)?;
        if let Some(&i) = schema.by_name.get(attribute) {
            schema.attributes[i].multi_valued = true;
        }
        Ok(())
    }

    /// A mutable (copied-on-write) table schema.
    pub(crate) fn table_mut(&mut self, table: &str) -> Result<&mut TableSchema> {
        let database = self.name.clone();
        let entry =
            self.tables.get_mut(table).ok_or_else(|| Error::TableNotFound { database, table: table.to_string() })?;
        Ok(Arc::make_mut(entry))
    }

    fn allocate_attribute_id(&mut self) -> u32 {
        let id = self.next_attribute_id;
        self.next_attribute_id += 1;
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(name: &str) -> TableSpec {
        TableSpec::dynamic(name, "id")
    }

    #[test]
    fn dynamic_tables_start_with_key_and_timestamps() {
        let mut db = DatabaseSchema::new("dev");
        let t = db.new_table(&dynamic("dog"));
        let names: Vec<_> = t.attributes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["id", CREATED_TIME, UPDATED_TIME]);
        assert!(t.attribute("id").unwrap().is_primary_key);
        assert_eq!(t.indexed_attributes().count(), 2);
    }

    #[test]
    fn attribute_ids_are_never_reused_and_schemas_round_trip() {
        let mut db = DatabaseSchema::new("dev");
        let t = db.new_table(&dynamic("dog"));
        db.tables.insert("dog".into(), Arc::new(t));
        let a = db.add_attribute("dog", AttributeSpec { name: "x".into(), type_name: None, indexed: true }).unwrap();
        db.remove_attribute("dog", "x").unwrap();
        let b = db.add_attribute("dog", AttributeSpec { name: "x".into(), type_name: None, indexed: true }).unwrap();
        assert_ne!(a.id, b.id);
        let table = db.table("dog").unwrap();
        let decoded = TableSchema::decode(&table.encode().unwrap()).unwrap();
        assert_eq!(decoded.attributes, table.attributes);
        assert_eq!(decoded.attribute("x").unwrap().id, b.id);
    }
}
