//! The consistency checker: walks a table's secondary indexes against its primary
//! records, in one snapshot, and reports every disagreement.
//!
//! An index is consistent when it holds exactly the entries the stored records imply:
//! no record value without its entry (*missing*), no entry without a record value
//! that implies it (*phantom*: a deleted record or an overwritten value still
//! findable). Crash tests, concurrency tests and operators (the `check_consistency`
//! operation) use it; it reads, never repairs.

use std::collections::BTreeSet;
use std::ops::Bound;

use lyre_store::{ReadTxn, TableStore, decode_key, index_entry_primary_key};

use crate::access::Context;
use crate::catalog::{DatabaseSchema, TableSchema};
use crate::error::Result;
use crate::index::entries_for;
use crate::record::computed::Computing;
use crate::record::decode_object;
use crate::table::Table;
use crate::value::{Object, Value};

/// At most this many problems of each kind are listed (all are counted).
const LISTED: usize = 100;

/// What a check of one table found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsistencyReport {
    /// The table checked.
    pub table: String,
    /// Primary records walked.
    pub records: u64,
    /// Index entries walked.
    pub index_entries: u64,
    /// Entries a record implies that the index lacks: `(attribute, primary key)`.
    pub missing: Vec<(String, Value)>,
    /// Entries no record implies: `(attribute, primary key)`.
    pub phantom: Vec<(String, Value)>,
    /// How many missing entries there were in all.
    pub missing_count: u64,
    /// How many phantom entries there were in all.
    pub phantom_count: u64,
}

impl ConsistencyReport {
    /// Whether the indexes agree with the records exactly.
    pub fn is_consistent(&self) -> bool {
        self.missing_count == 0 && self.phantom_count == 0
    }
}

/// Walks every index of `table` against its records in one snapshot and reports
/// missing and phantom entries. Super users only. A long walk: call it off the
/// async threads.
pub fn check_consistency(table: &Table, ctx: &Context) -> Result<ConsistencyReport> {
    let (txn, store) = table.snapshot(ctx)?;
    let mut report = ConsistencyReport { table: table.schema().name.clone(), ..Default::default() };
    // The table as the snapshot's own catalog describes it: `table` may have been
    // resolved before a write added an attribute (a check of many tables takes a
    // while), or before the table was dropped and made again, and its entries
    // would then read as phantoms.
    let catalog = DatabaseSchema::load(table.database(), txn.catalog_entries()?)?;
    if let (Some(store), Some(schema)) = (store, catalog.table(&report.table)) {
        check_table(&txn, &store, schema, &table.db().computing(), &mut report)?;
    }
    Ok(report)
}

/// Checks every index of `table` (stored in `store`) against its records in the
/// snapshot `txn` (with their indexed `@computed` values, as `computing` computes
/// them).
fn check_table(
    txn: &ReadTxn,
    store: &TableStore,
    table: &TableSchema,
    computing: &Computing,
    report: &mut ConsistencyReport,
) -> Result<()> {
    let everything = (Bound::Unbounded, Bound::Unbounded);
    // Every entry a record implies must be present.
    for item in txn.records(store, everything, false)? {
        let (pk, stored) = item?;
        report.records += 1;
        let record = decode_object(stored)?;
        let record = computing.indexed(table, Some(&record)).unwrap_or_default();
        for (attribute, entry) in implied_entries(table, &record, pk)? {
            if !has_entry(txn, store, &entry)? {
                note(&mut report.missing, &mut report.missing_count, attribute, pk);
            }
        }
    }
    // Every present entry must be implied by the record it points at.
    for item in txn.index_entries(store, everything, false)? {
        let entry = item?;
        report.index_entries += 1;
        let attribute = entry.get(..4).and_then(|p| p.try_into().ok()).map(u32::from_be_bytes);
        let attribute = table.indexed_attributes().find(|a| Some(a.id) == attribute);
        let pk = index_entry_primary_key(entry.get(4..).unwrap_or_default())?;
        let implied = match (attribute, txn.get_record(store, pk)?) {
            (Some(attribute), Some(stored)) => {
                let record = decode_object(stored)?;
                let record = computing.indexed(table, Some(&record)).unwrap_or_default();
                let mut expected = BTreeSet::new();
                if let Some(value) = record.get(&attribute.name) {
                    entries_for(attribute, value, pk, &mut expected)?;
                }
                expected.contains(entry)
            }
            _ => false,
        };
        if !implied {
            let name = attribute.map_or_else(|| "(a dropped attribute)".to_string(), |a| a.name.clone());
            note(&mut report.phantom, &mut report.phantom_count, name, pk);
        }
    }
    Ok(())
}

/// The index entries `record` implies, with their attribute names.
fn implied_entries(table: &TableSchema, record: &Object, pk: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for attribute in table.indexed_attributes() {
        if let Some(value) = record.get(&attribute.name) {
            let mut entries = BTreeSet::new();
            entries_for(attribute, value, pk, &mut entries)?;
            out.extend(entries.into_iter().map(|e| (attribute.name.clone(), e)));
        }
    }
    Ok(out)
}

fn has_entry(txn: &ReadTxn, store: &TableStore, entry: &[u8]) -> Result<bool> {
    Ok(txn.index_entries(store, (Bound::Included(entry), Bound::Included(entry)), false)?.next().transpose()?.is_some())
}

fn note(list: &mut Vec<(String, Value)>, count: &mut u64, attribute: String, pk: &[u8]) {
    *count += 1;
    if list.len() < LISTED {
        let id = decode_key(pk).map(|(key, _)| Value::from(key)).unwrap_or(Value::Null);
        list.push((attribute, id));
    }
}
