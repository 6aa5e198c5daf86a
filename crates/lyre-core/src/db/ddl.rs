//! Table DDL as writer jobs: creating, defining (`schema.graphql`), dropping tables
//! and adding or dropping attributes, with the index builds they need. Every change
//! is logged in the same transaction as a [`CatalogChange`] naming the table's
//! incarnation, so a log consumer sees a table's definition change exactly where it
//! happened among its records' changes.

use std::sync::Arc;

use lyre_store::{TableStore, WriteTxn};
use serde::{Deserialize, Serialize};

use crate::access::{Action, Context, check_table, require_structure, require_super_user};
use crate::catalog::{
    AttributeSpec, COUNTERS_KEY, CREATED_TIME, SchemaState, TableDefinition, TableSchema, TableSpec, UPDATED_TIME,
    validate_attribute_name, validate_definition_names,
};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::index;
use crate::record::computed::Computing;

/// A change to a table's definition, as the transaction log records it (the
/// `record` of a [`lyre_store::ChangeKind::Catalog`] change, MessagePack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum CatalogChange {
    /// The table was created (a new incarnation begins).
    CreateTable {
        /// Its primary key attribute.
        primary_key: String,
    },
    /// The table was dropped (its storage is released in the same entry).
    DropTable,
    /// An attribute was added.
    AddAttribute {
        /// Its name.
        attribute: String,
        /// Whether it is indexed.
        indexed: bool,
    },
    /// An attribute was removed, with its index and (in dynamic tables) its values.
    DropAttribute {
        /// Its name.
        attribute: String,
    },
    /// An index over existing records was built.
    IndexBuilt {
        /// The attribute indexed.
        attribute: String,
    },
    /// An index was removed.
    IndexDropped {
        /// The attribute no longer indexed.
        attribute: String,
    },
    /// A `schema.graphql` definition changed the table (attributes, types, rules);
    /// the new definition is the database's published schema from this entry on.
    Defined,
}

impl CatalogChange {
    /// Reads a logged catalog change.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(rmp_serde::from_slice(bytes)?)
    }

    fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec_named(self).map_err(|e| Error::Corrupt(format!("encoding a catalog change: {e}")))
    }

    /// Logs this change of `store`'s table in `txn`'s entry.
    pub(crate) fn log(&self, txn: &mut WriteTxn<'_, '_>, store: &TableStore) -> Result<()> {
        Ok(txn.log_catalog(store, self.encode()?)?)
    }
}

/// The storage of table `name`, which `Writer::prepare_table` created before the job.
fn prepared_storage(txn: &WriteTxn<'_, '_>, name: &str) -> Result<TableStore> {
    txn.table(name)?.ok_or_else(|| Error::Corrupt(format!("storage of table '{name}' is missing")))
}

/// Persists `table`'s catalog entry and the database's id counters.
fn persist(txn: &mut WriteTxn<'_, '_>, schema: &crate::catalog::DatabaseSchema, table: &TableSchema) -> Result<()> {
    txn.put_catalog(&TableSchema::catalog_key(&table.name), &table.encode()?)?;
    txn.put_catalog(COUNTERS_KEY, &schema.encode_counters()?)?;
    Ok(())
}

/// Creates or alters the table, then builds and drops indexes as the new definition
/// requires. Everything that can fail for a user reason fails before the first write.
fn apply_definition(
    txn: &mut WriteTxn<'_, '_>,
    state: &mut SchemaState,
    computing: &Computing,
    definition: TableDefinition,
) -> Result<bool> {
    let mut next = (**state).clone();
    let outcome = next.define(&definition)?;
    if !outcome.changed {
        return Ok(false);
    }
    let name = definition.table.as_str();
    let mut store = prepared_storage(txn, name)?;
    if outcome.created {
        // Storage left by an earlier table of the same name is emptied first.
        txn.clear_table(&store)?;
        store = txn.start_incarnation(&store)?;
        CatalogChange::CreateTable { primary_key: definition.primary_key.clone() }.log(txn, &store)?;
    }
    let table = next.table(name).cloned().ok_or_else(|| Error::Corrupt("defined table vanished".into()))?;
    // Changing an attribute between an ordinary and a vector index: a failure
    // building the new kind, or publishing it, aborts the whole job, so the old
    // index, its entries and the catalog stay as they were and keep serving.
    let swapping = swaps_index_kind(state.table(name).map(|t| &**t), &table);
    for attribute in &outcome.drop {
        index::drop_attribute_index(txn, &store, attribute)?;
        CatalogChange::IndexDropped { attribute: attribute.name.clone() }.log(txn, &store)?;
    }
    if swapping {
        crate::failpoint::hit("index-swap-construct")?;
    }
    for attribute in &outcome.build {
        if index::build_attribute_index(txn, computing, &table, attribute)? {
            next.mark_multi_valued(name, &attribute.name)?;
        }
        CatalogChange::IndexBuilt { attribute: attribute.name.clone() }.log(txn, &store)?;
    }
    CatalogChange::Defined.log(txn, &store)?;
    let table = next.table(name).cloned().ok_or_else(|| Error::Corrupt("defined table vanished".into()))?;
    if swapping {
        crate::failpoint::hit("index-swap-publish")?;
    }
    persist(txn, &next, &table)?;
    *state = Arc::new(next);
    Ok(true)
}

/// Whether `next` changes an attribute of `current` between an ordinary index
/// and a vector index (either way).
fn swaps_index_kind(current: Option<&TableSchema>, next: &TableSchema) -> bool {
    let Some(current) = current else { return false };
    next.attributes.iter().any(|after| {
        current.attribute(&after.name).is_some_and(|before| {
            (before.indexed && after.vector.is_some()) || (before.vector.is_some() && after.indexed)
        })
    })
}

impl Db {
    /// Creates a table. Fails if it exists.
    pub async fn create_table(&self, ctx: &Context, spec: TableSpec) -> Result<()> {
        require_structure(ctx, self.name(), "create_table")?;
        if self.schema().table(&spec.name).is_some() {
            return Err(Error::TableExists { database: self.name().to_string(), table: spec.name });
        }
        self.prepare_table(&spec.name).await?;
        let database = self.name().to_string();
        self.write(ctx, "create_table", move |txn, state| {
            if state.table(&spec.name).is_some() {
                return Err(Error::TableExists { database, table: spec.name });
            }
            let store = prepared_storage(txn, &spec.name)?;
            // Storage left by an earlier table of the same name is emptied first.
            txn.clear_table(&store)?;
            let store = txn.start_incarnation(&store)?;
            let schema = Arc::make_mut(state);
            let table = schema.new_table(&spec);
            CatalogChange::CreateTable { primary_key: table.primary_key.clone() }.log(txn, &store)?;
            persist(txn, schema, &table)?;
            schema.tables.insert(table.name.clone(), Arc::new(table));
            Ok(())
        })
        .await
    }

    /// Creates or alters a table to match a schema definition (`schema.graphql`):
    /// missing attributes are added and new indexes built over existing records in
    /// one write; readers keep reading their snapshots meanwhile. Attributes the
    /// definition no longer names are kept (their data stays). Returns whether
    /// anything changed.
    pub async fn define_table(&self, ctx: &Context, definition: TableDefinition) -> Result<bool> {
        require_super_user(ctx)?;
        self.check_definition(&definition)?;
        self.prepare_table(&definition.table).await?;
        let computing = self.computing();
        self.write(ctx, "define_table", move |txn, state| apply_definition(txn, state, &computing, definition)).await
    }

    /// Fails when `definition` cannot be applied to this database as it is now: a
    /// system database, a bad name, or a primary key other than the existing table's.
    /// Lets a schema of several tables be checked whole before any of it is applied.
    pub(crate) fn check_definition(&self, definition: &TableDefinition) -> Result<()> {
        self.refuse_system_change()?;
        validate_definition_names(definition)?;
        match self.schema().table(&definition.table) {
            Some(current) => current.check_primary_key(definition),
            None => Ok(()),
        }
    }

    /// Drops a table and all its records.
    pub async fn drop_table(&self, ctx: &Context, table: &str) -> Result<()> {
        require_structure(ctx, self.name(), "drop_table")?;
        self.refuse_system_change()?;
        let name = table.to_string();
        let database = self.name().to_string();
        self.write(ctx, "drop_table", move |txn, state| {
            if state.table(&name).is_none() {
                return Err(Error::TableNotFound { database, table: name });
            }
            if let Some(store) = txn.table(&name)? {
                crate::blobs::queue_table_freed(txn, &store, &name)?;
                CatalogChange::DropTable.log(txn, &store)?;
                txn.release_table(&store)?;
            }
            txn.delete_catalog(&TableSchema::catalog_key(&name))?;
            Arc::make_mut(state).tables.shift_remove(&name);
            Ok(())
        })
        .await?;
        // Freeing the table's pages walked them: they need not stay in this
        // process's resident memory.
        if let Err(err) = self.release_resident_pages().await {
            tracing::debug!(database = self.name(), error = %err, "releasing resident pages after a drop failed");
        }
        Ok(())
    }

    /// Adds an attribute to a table and indexes the existing records for it.
    /// Structure users may, and so may a role that may insert into the table without
    /// an attribute list (as in Harper, where inserting a new property creates the
    /// attribute anyway).
    pub async fn create_attribute(&self, ctx: &Context, table: &str, spec: AttributeSpec) -> Result<()> {
        if let Err(refused) = require_structure(ctx, self.name(), "create_attribute") {
            // A role whose grant lists attributes may not add others.
            if check_table(ctx, self.name(), table, &[Action::Insert])?.restricts_attributes() {
                return Err(refused);
            }
        }
        self.refuse_system_change()?;
        validate_attribute_name(&spec.name)?;
        let table = table.to_string();
        let database = self.name().to_string();
        let computing = self.computing();
        self.write(ctx, "create_attribute", move |txn, state| {
            let existing = state
                .table(&table)
                .ok_or_else(|| Error::TableNotFound { database: database.clone(), table: table.clone() })?;
            if existing.attribute(&spec.name).is_some() {
                return Err(Error::AttributeExists { database, table, attribute: spec.name });
            }
            let store = prepared_storage(txn, &table)?;
            let schema = Arc::make_mut(state);
            let attribute = schema.add_attribute(&table, spec)?;
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            CatalogChange::AddAttribute { attribute: attribute.name.clone(), indexed: attribute.indexed }
                .log(txn, &store)?;
            if attribute.indexed {
                let multi = index::build_attribute_index(txn, &computing, &updated, &attribute)?;
                if multi {
                    schema.mark_multi_valued(&table, &attribute.name)?;
                }
                CatalogChange::IndexBuilt { attribute: attribute.name.clone() }.log(txn, &store)?;
            }
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            persist(txn, schema, &updated)
        })
        .await
    }

    /// Removes an attribute: its index, and (in dynamic tables) its values. An
    /// attribute the table does not have is already gone: nothing changes and the
    /// drop succeeds, as in Harper.
    pub async fn drop_attribute(&self, ctx: &Context, table: &str, attribute: &str) -> Result<()> {
        require_structure(ctx, self.name(), "drop_attribute")?;
        self.refuse_system_change()?;
        let table = table.to_string();
        let attribute = attribute.to_string();
        let database = self.name().to_string();
        self.write(ctx, "drop_attribute", move |txn, state| {
            let existing =
                state.table(&table).ok_or_else(|| Error::TableNotFound { database, table: table.clone() })?;
            let Some(found) = existing.attribute(&attribute) else { return Ok(()) };
            if found.is_primary_key {
                return Err(Error::invalid("You cannot drop a hash attribute"));
            }
            if existing.has_timestamps() && (attribute == CREATED_TIME || attribute == UPDATED_TIME) {
                return Err(Error::invalid(format!("cannot drop internal timestamp attribute: {attribute}")));
            }
            let dropped = found.clone();
            let existing = existing.clone();
            let store = prepared_storage(txn, &table)?;
            CatalogChange::DropAttribute { attribute: attribute.clone() }.log(txn, &store)?;
            index::drop_attribute_values(txn, &existing, &dropped)?;
            let schema = Arc::make_mut(state);
            schema.remove_attribute(&table, &attribute)?;
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            txn.put_catalog(&TableSchema::catalog_key(&table), &updated.encode()?)?;
            Ok(())
        })
        .await
    }

    /// Indexes again the indexed `@computed` attributes `attributes` of `table`
    /// (others are left alone): the server calls this when the code computing them
    /// changed without the schema changing (a script's function registered,
    /// replaced or gone), since the schema defined the index before any script
    /// could compute it. Returns how many attributes were indexed again.
    pub async fn reindex_computed(&self, ctx: &Context, table: &str, attributes: Vec<String>) -> Result<usize> {
        require_super_user(ctx)?;
        let computing = self.computing();
        let table = table.to_string();
        let database = self.name().to_string();
        self.write(ctx, "reindex_computed", move |txn, state| {
            let existing =
                state.table(&table).cloned().ok_or_else(|| Error::TableNotFound { database, table: table.clone() })?;
            let registered: Vec<_> = existing
                .computed_attributes()
                .filter(|(attribute, _)| attribute.indexed && attributes.contains(&attribute.name))
                .map(|(attribute, _)| attribute.clone())
                .collect();
            if registered.is_empty() {
                return Ok(0);
            }
            let store = prepared_storage(txn, &table)?;
            let mut multi = Vec::new();
            for attribute in &registered {
                index::drop_attribute_index(txn, &store, attribute)?;
                CatalogChange::IndexDropped { attribute: attribute.name.clone() }.log(txn, &store)?;
                if index::build_attribute_index(txn, &computing, &existing, attribute)? && !attribute.multi_valued {
                    multi.push(attribute.name.clone());
                }
                CatalogChange::IndexBuilt { attribute: attribute.name.clone() }.log(txn, &store)?;
            }
            if !multi.is_empty() {
                let schema = Arc::make_mut(state);
                for name in &multi {
                    schema.mark_multi_valued(&table, name)?;
                }
                let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
                persist(txn, schema, &updated)?;
            }
            Ok(registered.len())
        })
        .await
    }
}
