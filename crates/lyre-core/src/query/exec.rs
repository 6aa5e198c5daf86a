//! Walking a driver over one snapshot (records in the driver's order, expired ones
//! skipped), and ordering matches by their sort values.

use std::collections::HashSet;
use std::ops::{Bound, ControlFlow};

use lyre_store::{OwnedKey, ReadTxn, TableStore, decode_key, index_entry_primary_key};

use crate::error::Result;
use crate::index::attribute_prefix;
use crate::query::ast::SortKey;
use crate::query::driver::Driver;
use crate::query::filter::cmp_sort_values;
use crate::query::related::Related;
use crate::record::expiry::Live;
use crate::value::{Object, Value, object_with_capacity};

/// Receives each result of a search (an object, or a bare value or array for
/// `select(a)` and `select([a,b])`); returns `Break` to stop early (the client
/// went away).
pub type Sink<'a> = dyn FnMut(Value) -> ControlFlow<()> + 'a;

/// The value `record` sorts by for `path`: an attribute, or `rel.attr` (through one
/// or more relationships) the first related record's.
pub(crate) fn sort_value(record: &Object, path: &str, related: Option<&Related<'_>>) -> Result<Option<Value>> {
    let Some((name, rest)) = path.split_once('.').filter(|_| record.get(path).is_none()) else {
        return Ok(record.get(path).cloned());
    };
    let Some((related, relationship)) = related.and_then(|r| r.relationship(name).map(|found| (r, found))) else {
        return Ok(None);
    };
    let (schema, _) = related.target(relationship)?;
    match related.records(record, relationship)?.first() {
        Some(target) => sort_value(target, rest, Some(&related.of(&schema))),
        None => Ok(None),
    }
}

pub(crate) fn sort_records(records: &mut [(Vec<Option<Value>>, Object)], keys: &[SortKey]) {
    records.sort_by(|(a, _), (b, _)| {
        for (i, key) in keys.iter().enumerate() {
            let order = cmp_sort_values(a[i].as_ref(), b[i].as_ref());
            let order = if key.descending { order.reverse() } else { order };
            if order.is_ne() {
                return order;
            }
        }
        std::cmp::Ordering::Equal
    });
}

/// Receives each candidate's encoded primary key and record.
pub(crate) type Visit<'a> = dyn FnMut(&[u8], Object) -> Result<ControlFlow<()>> + 'a;

const ALL: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Unbounded, Bound::Unbounded);

/// Feeds every candidate record of `driver` to `visit`, in the driver's order.
/// Records `live` does not see (expired ones) are skipped.
pub(crate) fn walk(
    txn: &ReadTxn,
    store: &TableStore,
    live: Live,
    driver: &Driver,
    visit: &mut Visit<'_>,
) -> Result<ControlFlow<()>> {
    match driver {
        Driver::Scan { descending } => scan(txn, store, live, ALL, *descending, visit),
        Driver::PrimaryRange { range, descending } => scan(txn, store, live, range.as_ref(), *descending, visit),
        Driver::Keys(keys) => {
            for key in keys {
                let Some(stored) = txn.get_record(store, key)? else { continue };
                if let Some(record) = live.decode(stored)?
                    && visit(key, record)?.is_break()
                {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        }
        Driver::Index { attribute, range, descending } => {
            let covering = live.covered_by(attribute).then_some(attribute.name.as_str());
            index_walk(txn, store, live, range.as_ref(), *descending, attribute.multi_valued, covering, visit)
        }
        Driver::SortIndex { attribute, descending } => {
            let prefix = attribute_prefix(attribute);
            let end = (attribute.id + 1).to_be_bytes();
            let name = &attribute.name;
            // Records lacking the attribute sort before every value, as Harper 5 sorts
            // them: first ascending, last descending.
            if !*descending && scan(txn, store, live, ALL, false, &mut lacking_or_all(name, true, visit))?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            let range = (Bound::Included(&prefix[..]), Bound::Excluded(&end[..]));
            if index_walk(
                txn,
                store,
                live,
                range,
                *descending,
                attribute.multi_valued,
                None,
                &mut lacking_or_all(name, false, visit),
            )?
            .is_break()
            {
                return Ok(ControlFlow::Break(()));
            }
            if *descending {
                return scan(txn, store, live, ALL, false, &mut lacking_or_all(name, true, visit));
            }
            Ok(ControlFlow::Continue(()))
        }
        Driver::Union(parts) => {
            let mut seen = HashSet::new();
            for part in parts {
                let mut once = |pk: &[u8], record: Object| {
                    if seen.insert(pk.to_vec()) { visit(pk, record) } else { Ok(ControlFlow::Continue(())) }
                };
                if walk(txn, store, live, part, &mut once)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        }
    }
}

/// Passes every record on, or (when `only_lacking`) only those without `name`.
fn lacking_or_all<'v>(
    name: &'v str,
    only_lacking: bool,
    visit: &'v mut Visit<'_>,
) -> impl FnMut(&[u8], Object) -> Result<ControlFlow<()>> + 'v {
    move |pk, record| {
        if only_lacking && record.contains_key(name) { Ok(ControlFlow::Continue(())) } else { visit(pk, record) }
    }
}

fn scan(
    txn: &ReadTxn,
    store: &TableStore,
    live: Live,
    range: (Bound<&[u8]>, Bound<&[u8]>),
    descending: bool,
    visit: &mut Visit<'_>,
) -> Result<ControlFlow<()>> {
    for item in txn.records(store, range, descending)? {
        let (pk, stored) = item?;
        let Some(record) = live.decode(stored)? else { continue };
        if visit(pk, record)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Walks an index range, handing over each entry's record. With `covering` (the
/// indexed attribute, when [`Live::covered_by`] allows), a record is built from the
/// entry's value alone wherever the index key holds that value exactly, without
/// reading the record: a join that needs only its key reads no records. (An entry
/// whose record is missing, which only a bug in index maintenance leaves and the
/// consistency checker reports, then answers its value instead of being skipped.)
#[allow(clippy::too_many_arguments)]
fn index_walk(
    txn: &ReadTxn,
    store: &TableStore,
    live: Live,
    range: (Bound<&[u8]>, Bound<&[u8]>),
    descending: bool,
    dedupe: bool,
    covering: Option<&str>,
    visit: &mut Visit<'_>,
) -> Result<ControlFlow<()>> {
    let mut seen = HashSet::new();
    for entry in txn.index_entries(store, range, descending)? {
        let entry = entry?;
        let entry = entry.get(4..).unwrap_or_default();
        let pk = index_entry_primary_key(entry)?;
        // One record has several entries when its value is an array.
        if dedupe && !seen.insert(pk.to_vec()) {
            continue;
        }
        if let Some(name) = covering
            && let Some(value) = exact_key_value(entry)?
        {
            let mut record = object_with_capacity(1);
            record.insert(name.to_string(), value);
            if visit(pk, record)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            continue;
        }
        // An entry without its record would be a bug in index maintenance; the
        // consistency checker reports those, a query skips them.
        let Some(stored) = txn.get_record(store, pk)? else {
            continue;
        };
        let Some(record) = live.decode(stored)? else { continue };
        if visit(pk, record)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// The value an index entry (`value ++ primary key`) was written for, when its key
/// holds it exactly: not a truncated string, not a zero (the key drops a negative
/// zero's sign), and not an integer of 2^53 or more, which may have been a float
/// (a key writes both alike, and a float that large is written as a float). Below
/// that an integral float comes back as the integer, which every format writes the
/// same way.
fn exact_key_value(entry: &[u8]) -> Result<Option<Value>> {
    const FLOAT_INTEGERS: u64 = 1 << 53;
    Ok(match decode_key(entry)?.0 {
        OwnedKey::Str { truncated: true, .. } | OwnedKey::Array(_) => None,
        OwnedKey::Int(i) if i == 0 || i.unsigned_abs() >= FLOAT_INTEGERS => None,
        key => Some(Value::from(key)),
    })
}
