//! Secondary indexes kept inside the write: entry layout and maintenance.
//!
//! An index entry is `attribute id (u32 BE) ++ encoded value ++ encoded primary key`,
//! stored as a key with no value in the table's index sub-database. Array values are
//! indexed per element; objects and bytes are not indexed; null is.

use std::collections::{BTreeSet, HashSet};

use lyre_store::{KeyValue, TableStore, WriteTxn, encode_key_into, encoded_key_len, index_entry_primary_key};

use crate::catalog::{Attribute, TableSchema};
use crate::error::Result;
use crate::record::computed::Computing;
use crate::record::{decode_entry, decode_object, encode_entry};
use crate::value::{Object, Value};

/// The 4-byte prefix of every entry of `attribute`.
pub(crate) fn attribute_prefix(attribute: &Attribute) -> [u8; 4] {
    attribute.id.to_be_bytes()
}

/// Appends the index entries of `value` for `attribute` of the record keyed `pk`.
/// Returns whether the value was an array (several entries per record).
pub(crate) fn entries_for(
    attribute: &Attribute,
    value: &Value,
    pk: &[u8],
    out: &mut BTreeSet<Vec<u8>>,
) -> Result<bool> {
    match value {
        Value::Array(items) => {
            for item in items {
                if let Some(key) = item.as_key() {
                    out.insert(entry(attribute, key, pk)?);
                }
            }
            Ok(true)
        }
        other => {
            if let Some(key) = other.as_key() {
                out.insert(entry(attribute, key, pk)?);
            }
            Ok(false)
        }
    }
}

fn entry(attribute: &Attribute, key: KeyValue<'_>, pk: &[u8]) -> Result<Vec<u8>> {
    let mut entry = Vec::with_capacity(4 + encoded_key_len(key) + pk.len());
    entry.extend_from_slice(&attribute_prefix(attribute));
    encode_key_into(key, &mut entry)?;
    entry.extend_from_slice(pk);
    Ok(entry)
}

/// Index entries to add and remove, applied in key order at the end of a write job.
///
/// Random index inserts dominate the cost of a write (each one copies a B-tree page);
/// applying a job's changes sorted makes neighbouring entries share the pages they
/// touch. A later change to the same entry replaces an earlier one, so a record
/// written twice in one job nets out.
///
/// When the entries a record had cannot be known (its indexed `@computed` value
/// failed to compute from the stored record), the job sweeps that attribute's index
/// for the record's entries instead ([`IndexChanges::sweep`]).
#[derive(Default)]
pub(crate) struct IndexChanges {
    changes: Vec<IndexChange>,
    sweeps: Vec<Sweep>,
}

/// The entries of one attribute's index that point at any of some records, to
/// remove: one walk of the index however many records of the job need it.
struct Sweep {
    attribute: Attribute,
    pks: HashSet<Vec<u8>>,
}

/// One change: the entry, its first eight bytes as a number (to sort by), and
/// whether it adds the entry or removes it.
struct IndexChange {
    head: u64,
    entry: Vec<u8>,
    present: bool,
}

impl IndexChange {
    fn new(entry: Vec<u8>, present: bool) -> Self {
        let mut head = [0; 8];
        let known = entry.len().min(8);
        head[..known].copy_from_slice(&entry[..known]);
        Self { head: u64::from_be_bytes(head), entry, present }
    }
}

impl IndexChanges {
    fn put(&mut self, entry: Vec<u8>) {
        self.changes.push(IndexChange::new(entry, true));
    }

    fn delete(&mut self, entry: Vec<u8>) {
        self.changes.push(IndexChange::new(entry, false));
    }

    /// Removes every entry of `attribute`'s index that points at record `pk`, those
    /// stored and those this job changed so far; changes made after it apply after
    /// it. For a record whose old entries cannot be worked out: the sweep walks the
    /// attribute's whole index, a cost paid only when computing a value failed.
    fn sweep(&mut self, attribute: &Attribute, pk: &[u8]) {
        let prefix = attribute_prefix(attribute);
        self.changes.retain(|change| !(change.entry.starts_with(&prefix) && points_at(&change.entry, pk)));
        match self.sweeps.iter_mut().find(|sweep| sweep.attribute.id == attribute.id) {
            Some(sweep) => drop(sweep.pks.insert(pk.to_vec())),
            None => self.sweeps.push(Sweep { attribute: attribute.clone(), pks: HashSet::from([pk.to_vec()]) }),
        }
    }

    /// Writes the changes into `store`: the sweeps, then the changes in key order; of
    /// several changes to one entry only the last counts.
    pub(crate) fn apply(self, txn: &mut WriteTxn<'_, '_>, store: &TableStore) -> Result<()> {
        for sweep in &self.sweeps {
            let (lower, upper) = attribute_bounds(&sweep.attribute);
            let range = (std::ops::Bound::Included(&lower[..]), std::ops::Bound::Excluded(&upper[..]));
            let mut found = Vec::new();
            for item in txn.index_entries(store, range)? {
                let entry = item?;
                let pk = index_entry_primary_key(entry.get(lower.len()..).unwrap_or_default());
                if pk.is_ok_and(|pk| sweep.pks.contains(pk)) {
                    found.push(entry.to_vec());
                }
            }
            for entry in &found {
                txn.delete_index_entry(store, entry)?;
            }
            tracing::warn!(
                attribute = %sweep.attribute.name, records = sweep.pks.len(), removed = found.len(),
                "swept an index for the entries of records whose computed value failed to compute"
            );
        }
        for (entry, present) in self.in_key_order() {
            if present {
                txn.put_index_entry(store, &entry)?;
            } else {
                txn.delete_index_entry(store, &entry)?;
            }
        }
        Ok(())
    }

    /// Each changed entry once, in byte order, with whether its last change adds it.
    fn in_key_order(mut self) -> impl Iterator<Item = (Vec<u8>, bool)> {
        // A stable sort keeps same-key changes in the order they were made. Entries
        // whose first eight bytes differ (most, on a bulk write's thousands) order
        // by those as one number, held beside the pointer; the rest by their bytes
        // (a shorter entry, padded with zeros, can tie with a longer one and is
        // ordered there).
        self.changes.sort_by(|a, b| a.head.cmp(&b.head).then_with(|| a.entry.cmp(&b.entry)));
        let mut changes = self.changes.into_iter().peekable();
        std::iter::from_fn(move || {
            loop {
                let change = changes.next()?;
                if changes.peek().is_none_or(|next| next.entry != change.entry) {
                    return Some((change.entry, change.present));
                }
            }
        })
    }
}

/// Whether index `entry` (attribute prefix included) points at record `pk`; an entry
/// that does not parse points nowhere.
fn points_at(entry: &[u8], pk: &[u8]) -> bool {
    index_entry_primary_key(entry.get(4..).unwrap_or_default()).is_ok_and(|p| p == pk)
}

/// Records the index changes of a record going from `old` to `new` (for every index
/// of `table`). Returns the names of attributes that received an array value for the
/// first time.
/// Indexed `@computed` attributes are indexed by what `computing` computes from the
/// records.
pub(crate) fn update_record_indexes(
    changes: &mut IndexChanges,
    computing: &Computing,
    table: &TableSchema,
    pk: &[u8],
    old: Option<&Object>,
    new: Option<&Object>,
) -> Result<Vec<String>> {
    // An old value the code fails to compute now may have been indexed when it
    // could: its entries are swept, as they cannot be named.
    let (old, unknown) = computing.indexed_noting_failures(table, old);
    let new = computing.indexed(table, new);
    let (old, new) = (old.as_deref(), new.as_deref());
    let mut newly_multi = Vec::new();
    for attribute in table.indexed_attributes() {
        if unknown.contains(&attribute.name) {
            changes.sweep(attribute, pk);
        }
        let old_value = old.and_then(|r| r.get(&attribute.name));
        let new_value = new.and_then(|r| r.get(&attribute.name));
        if old_value == new_value {
            continue;
        }
        if let (None, Some(value)) = (old_value, new_value)
            && !matches!(value, Value::Array(_))
        {
            // The common insert: one entry to add, none to remove.
            if let Some(key) = value.as_key() {
                changes.put(entry(attribute, key, pk)?);
            }
            continue;
        }
        let mut before = BTreeSet::new();
        if let Some(v) = old_value {
            entries_for(attribute, v, pk, &mut before)?;
        }
        let mut after = BTreeSet::new();
        if let Some(v) = new_value
            && entries_for(attribute, v, pk, &mut after)?
            && !attribute.multi_valued
        {
            newly_multi.push(attribute.name.clone());
        }
        for gone in before.difference(&after) {
            changes.delete(gone.clone());
        }
        for added in after.difference(&before) {
            changes.put(added.clone());
        }
    }
    Ok(newly_multi)
}

/// Indexes `attribute` over every existing record of `table` (a new index), computing
/// it through `computing` if it is `@computed`. Returns whether any record held an
/// array for it.
pub(crate) fn build_attribute_index(
    txn: &mut WriteTxn<'_, '_>,
    computing: &Computing,
    table: &TableSchema,
    attribute: &Attribute,
) -> Result<bool> {
    let Some(store) = txn.table(&table.name)? else {
        return Ok(false);
    };
    let mut entries = BTreeSet::new();
    let mut multi = false;
    for item in txn.records(&store, (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded), false)? {
        let (pk, stored) = item?;
        let mut record = decode_object(stored)?;
        if attribute.shape.computed.is_some() {
            // A value the code cannot compute is left out (and logged).
            let _ = computing.add_for_index(table, &mut record, |a| a.name == attribute.name);
        }
        if let Some(value) = record.get(&attribute.name) {
            multi |= entries_for(attribute, value, pk, &mut entries)?;
        }
    }
    for entry in &entries {
        txn.put_index_entry(&store, entry)?;
    }
    Ok(multi)
}

/// Removes every index entry of `attribute`.
pub(crate) fn drop_attribute_index(
    txn: &mut WriteTxn<'_, '_>,
    store: &TableStore,
    attribute: &Attribute,
) -> Result<()> {
    let (lower, upper) = attribute_bounds(attribute);
    txn.delete_index_range(store, (std::ops::Bound::Included(&lower[..]), std::ops::Bound::Excluded(&upper[..])))?;
    Ok(())
}

/// The bounds of `attribute`'s index entries: its prefix, and the next attribute's.
fn attribute_bounds(attribute: &Attribute) -> ([u8; 4], [u8; 4]) {
    (attribute_prefix(attribute), (attribute.id + 1).to_be_bytes())
}

/// Removes `attribute`'s index entries and, in dynamic tables, its values from every
/// record (Harper strips dropped attributes from dynamic tables).
pub(crate) fn drop_attribute_values(
    txn: &mut WriteTxn<'_, '_>,
    table: &TableSchema,
    attribute: &Attribute,
) -> Result<()> {
    let Some(store) = txn.table(&table.name)? else {
        return Ok(());
    };
    if attribute.indexed {
        drop_attribute_index(txn, &store, attribute)?;
    }
    if table.schema_defined {
        return Ok(());
    }
    let mut rewrites = Vec::new();
    for item in txn.records(&store, (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded), false)? {
        let (pk, stored) = item?;
        let mut entry = decode_entry(stored)?;
        if entry.record.shift_remove(&attribute.name).is_some() {
            entry.clock.compact(&entry.record);
            rewrites
                .push((pk.to_vec(), encode_entry(&entry.record, entry.version(), entry.header.flags, &entry.clock)));
        }
    }
    for (pk, stored) in rewrites {
        txn.put_record(&store, pk, stored)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Short entries, zero bytes and shared first eight bytes included: the
        /// order is the bytes' order, and each entry's last change is the one kept.
        #[test]
        fn changes_come_out_in_byte_order_last_change_kept(
            made in proptest::collection::vec((proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..12), any::<bool>()), 0..64)
        ) {
            let mut changes = IndexChanges::default();
            let mut expected = BTreeMap::new();
            for (entry, present) in &made {
                match present {
                    true => changes.put(entry.clone()),
                    false => changes.delete(entry.clone()),
                }
                expected.insert(entry.clone(), *present);
            }
            let got: Vec<(Vec<u8>, bool)> = changes.in_key_order().collect();
            prop_assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
        }
    }
}
