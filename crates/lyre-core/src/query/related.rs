//! Following `@relationship` fields inside one read snapshot.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use lyre_store::{ReadTxn, TableStore, encode_key, index_entry_primary_key, prefix_successor};
use parking_lot::Mutex;

use crate::access::{Action, Context, TableAccess, check_table};
use crate::catalog::{Relationship, TableSchema};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::index::attribute_prefix;
use crate::record::expiry::Live;
use crate::value::{Object, Value};

/// A related table's schema and (when it has any records) storage.
type Target = (Arc<TableSchema>, Option<TableStore>);

/// Resolves the related records of a record, reading the same snapshot as the query.
/// With a viewer, each related table is checked for the viewer's read permission
/// and its records come without the attributes the viewer may not read, so a
/// relationship field or a condition through one shows no more than a direct read.
pub(crate) struct Related<'t> {
    txn: &'t ReadTxn,
    db: &'t Arc<Db>,
    table: &'t TableSchema,
    tables: Mutex<HashMap<String, Target>>,
    viewer: Option<&'t Context>,
    access: Mutex<HashMap<String, TableAccess>>,
}

impl<'t> Related<'t> {
    /// Follows `table`'s relationships in `txn`, seeing everything (the server's own
    /// reads); see [`Related::viewed_by`].
    pub(crate) fn new(txn: &'t ReadTxn, db: &'t Arc<Db>, table: &'t TableSchema) -> Self {
        Self { txn, db, table, tables: Mutex::new(HashMap::new()), viewer: None, access: Mutex::new(HashMap::new()) }
    }

    /// The same, showing only what `viewer` may read.
    pub(crate) fn viewed_by(mut self, viewer: &'t Context) -> Self {
        self.viewer = Some(viewer);
        self
    }

    /// The same snapshot and viewer, following `table`'s relationships (a
    /// projection nested inside a related record).
    pub(crate) fn of<'a>(&'a self, table: &'a TableSchema) -> Related<'a> {
        let related = Related::new(self.txn, self.db, table);
        match self.viewer {
            Some(viewer) => related.viewed_by(viewer),
            None => related,
        }
    }

    /// What the viewer may do on `target` (nothing to check without a viewer).
    fn access(&self, target: &TableSchema) -> Result<Option<TableAccess>> {
        let Some(viewer) = self.viewer else { return Ok(None) };
        let mut known = self.access.lock();
        if let Some(found) = known.get(&target.name) {
            return Ok(Some(found.clone()));
        }
        let access = check_table(viewer, self.db.name(), &target.name, &[Action::Read])?;
        known.insert(target.name.clone(), access.clone());
        Ok(Some(access))
    }

    /// The relationship named `name` of the queried table.
    pub(crate) fn relationship(&self, name: &str) -> Option<&'t Relationship> {
        self.table.relationships.iter().find(|r| r.name == name)
    }

    /// The schema and storage of a related table.
    pub(crate) fn target(&self, relationship: &Relationship) -> Result<Target> {
        let mut tables = self.tables.lock();
        if let Some(found) = tables.get(&relationship.table) {
            return Ok(found.clone());
        }
        let found = target_table(self.db, relationship)?;
        let store = self.txn.table(&found.name)?;
        tables.insert(relationship.table.clone(), (found.clone(), store.clone()));
        Ok((found, store))
    }

    /// The records `record` is related to through `relationship`.
    pub(crate) fn records(&self, record: &Object, relationship: &Relationship) -> Result<Vec<Object>> {
        let (target, store) = self.target(relationship)?;
        let access = self.access(&target)?;
        let Some(store) = store else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let live = Live::of(&target);
        if let Some(from) = &relationship.from {
            let keys: Vec<&Value> = match record.get(from) {
                Some(Value::Array(items)) => items.iter().collect(),
                Some(Value::Null) | None => Vec::new(),
                Some(one) => vec![one],
            };
            for key in keys {
                let Some(k) = key.as_key() else { continue };
                let (encoded, truncated) = encode_key(k)?;
                if truncated {
                    continue;
                }
                if let Some(stored) = self.txn.get_record(&store, &encoded)?
                    && let Some(record) = live.decode(stored)?
                {
                    out.push(record);
                }
            }
        } else if let Some(to) = &relationship.to {
            let Some(own_key) = record.get(&self.table.primary_key) else { return Ok(out) };
            out = records_where(self.txn, &target, &store, to, own_key)?;
        }
        if let Some(access) = access.filter(TableAccess::restricts_attributes) {
            out.iter_mut().for_each(|related| access.strip(related, &target.primary_key));
        }
        Ok(out)
    }
}

/// The related table's schema (same database only).
pub(crate) fn target_table(db: &Arc<Db>, relationship: &Relationship) -> Result<Arc<TableSchema>> {
    if relationship.database != db.name() {
        return Err(Error::invalid(format!(
            "relationship {} crosses databases ({} to {}), which Lyre does not support",
            relationship.name,
            db.name(),
            relationship.database
        )));
    }
    db.schema().table(&relationship.table).cloned().ok_or_else(|| db.table_not_found(&relationship.table))
}

/// Records of `table` whose `attribute` equals (or, for arrays, contains) `value`,
/// through its index when it has one.
pub(crate) fn records_where(
    txn: &ReadTxn,
    table: &TableSchema,
    store: &TableStore,
    attribute: &str,
    value: &Value,
) -> Result<Vec<Object>> {
    let mut out = Vec::new();
    let live = Live::of(table);
    let Some(key) = value.as_key() else { return Ok(out) };
    match table.attribute(attribute) {
        Some(a) if a.is_primary_key => {
            let (encoded, _) = encode_key(key)?;
            if let Some(stored) = txn.get_record(store, &encoded)?
                && let Some(record) = live.decode(stored)?
            {
                out.push(record);
            }
        }
        Some(a) if a.indexed => {
            let mut prefix = attribute_prefix(a).to_vec();
            prefix.extend_from_slice(&encode_key(key)?.0);
            let upper = prefix_successor(&prefix);
            let range = (Bound::Included(&prefix[..]), upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded));
            for entry in txn.index_entries(store, range, false)? {
                let entry = entry?;
                let pk = index_entry_primary_key(entry.get(4..).unwrap_or_default())?;
                if let Some(stored) = txn.get_record(store, pk)?
                    && let Some(record) = live.decode(stored)?
                    && holds(&record, attribute, value)
                    && !out.contains(&record)
                {
                    out.push(record);
                }
            }
        }
        _ => {
            for item in txn.records(store, (Bound::Unbounded, Bound::Unbounded), false)? {
                let Some(record) = live.decode(item?.1)? else { continue };
                if holds(&record, attribute, value) {
                    out.push(record);
                }
            }
        }
    }
    Ok(out)
}

fn holds(record: &Object, attribute: &str, value: &Value) -> bool {
    match record.get(attribute) {
        Some(Value::Array(items)) => items.contains(value),
        Some(v) => v.cmp_scalar(value) == Some(std::cmp::Ordering::Equal),
        None => false,
    }
}
