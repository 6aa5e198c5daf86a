//! Applying a `schema.graphql` table definition inside a write job.

use std::sync::Arc;

use lyre_store::WriteTxn;

use crate::catalog::TableDefinition;
use crate::catalog::{COUNTERS_KEY, TableSchema};
use crate::db::SchemaState;
use crate::error::{Error, Result};
use crate::index;

/// Creates or alters the table, then builds and drops indexes as the new definition
/// requires. Everything that can fail for a user reason fails before the first write.
pub(crate) fn apply(txn: &mut WriteTxn<'_, '_>, state: &mut SchemaState, definition: TableDefinition) -> Result<bool> {
    let mut next = (**state).clone();
    let outcome = next.define(&definition)?;
    if !outcome.changed {
        return Ok(false);
    }
    let name = definition.table.as_str();
    let store = txn.table(name)?.ok_or_else(|| Error::Corrupt(format!("storage of table '{name}' is missing")))?;
    if outcome.created {
        // Storage left by an earlier table of the same name is emptied first.
        txn.clear_table(&store)?;
    }
    let table = next.table(name).cloned().ok_or_else(|| Error::Corrupt("defined table vanished".into()))?;
    for attribute in &outcome.drop {
        index::drop_attribute_index(txn, &store, attribute)?;
    }
    for attribute in &outcome.build {
        if index::build_attribute_index(txn, &table, attribute)? {
            next.mark_multi_valued(name, &attribute.name)?;
        }
    }
    let table = next.table(name).cloned().ok_or_else(|| Error::Corrupt("defined table vanished".into()))?;
    txn.put_catalog(&TableSchema::catalog_key(name), &table.encode()?)?;
    txn.put_catalog(COUNTERS_KEY, &next.encode_counters()?)?;
    *state = Arc::new(next);
    Ok(true)
}
