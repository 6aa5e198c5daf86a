//! Choosing how to find a query's records: checking the query against the schema,
//! picking the [`Driver`] that yields the fewest candidates, and deciding whether
//! its order is the one asked for.

use std::ops::Bound;
use std::sync::Arc;

use lyre_store::{ReadTxn, TableStore, encode_key, encode_string_prefix_into, prefix_successor};

use crate::catalog::TableSchema;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::index::attribute_prefix;
use crate::query::ast::{Comparator, Condition, Operator, Query};
use crate::query::driver::{Driver, Order, Range};
use crate::query::exec::walk;
use crate::query::related::target_table;
use crate::record::expiry::Live;
use crate::record::validate::is_primary_key_value;
use crate::value::Value;

/// Fails unless `path` (part of the sort key `full`) names an attribute of
/// `schema`, or `rel.attr` through at most six relationships.
pub(crate) fn validate_sort_path(
    db: &Arc<Db>,
    schema: &TableSchema,
    path: &str,
    full: &str,
    depth: usize,
) -> Result<()> {
    if schema.attribute(path).is_some() {
        return Ok(());
    }
    let not_defined = || Error::NotDefinedAttribute(full.to_string());
    let (name, rest) = path.split_once('.').filter(|_| depth < 6).ok_or_else(not_defined)?;
    let relationship = schema.relationships.iter().find(|r| r.name == name).ok_or_else(not_defined)?;
    let target = target_table(db, relationship)?;
    validate_sort_path(db, &target, rest, full, depth + 1)
}

pub(crate) fn validate_condition(db: &Arc<Db>, schema: &TableSchema, condition: &Condition) -> Result<()> {
    match condition {
        Condition::Group { conditions, .. } => conditions.iter().try_for_each(|c| validate_condition(db, schema, c)),
        Condition::Related { relationship, condition } => {
            let found = schema
                .relationships
                .iter()
                .find(|r| &r.name == relationship)
                .ok_or_else(|| Error::NotDefinedAttribute(relationship.clone()))?;
            let target = target_table(db, found)?;
            validate_condition(db, &target, condition)
        }
        Condition::Compare { attribute, comparator, value } => {
            if schema.attribute(attribute).is_none() {
                return Err(Error::UnknownAttribute(attribute.clone()));
            }
            if *comparator == Comparator::Between && !matches!(value, Value::Array(b) if b.len() == 2) {
                return Err(Error::invalid(format!(
                    "'between' on {attribute} needs a value of two elements: [low, high]"
                )));
            }
            Ok(())
        }
    }
}

/// Picks the cheapest driver: for an AND, the indexed condition matching the fewest
/// entries (counted up to the best so far); for an OR of indexed conditions, their
/// union; otherwise a scan.
pub(crate) fn choose_driver(
    txn: &ReadTxn,
    db: &Arc<Db>,
    store: &TableStore,
    schema: &TableSchema,
    query: &Query,
) -> Result<Driver> {
    let conditions = &query.conditions;
    if conditions.is_empty() {
        return Ok(Driver::Scan { descending: false });
    }
    if query.operator == Operator::Or && conditions.len() > 1 {
        let parts: Option<Vec<Driver>> =
            conditions.iter().map(|c| condition_driver(txn, db, schema, c)).collect::<Result<_>>()?;
        return Ok(parts.map_or(Driver::Scan { descending: false }, Driver::Union));
    }
    // One condition: its driver, if any, without counting what it yields (counting
    // a wide range would cost as much as reading it).
    if let [only] = conditions.as_slice() {
        return Ok(condition_driver(txn, db, schema, only)?.unwrap_or_else(|| walk_first_attribute(schema, conditions)));
    }
    let mut best: Option<(u64, Driver)> = None;
    for condition in conditions {
        let Some(candidate) = condition_driver(txn, db, schema, condition)? else {
            continue;
        };
        let cap = best.as_ref().map_or(u64::MAX, |(count, _)| *count);
        let count = estimate(txn, store, &candidate, cap)?;
        if best.as_ref().is_none_or(|(c, _)| count < *c) {
            best = Some((count, candidate));
        }
    }
    Ok(best.map_or_else(|| walk_first_attribute(schema, conditions), |(_, d)| d))
}

/// With no range to drive an AND, walk the index of its first indexed attribute:
/// as costly as a scan, but results come in that attribute's value order, as
/// Harper returns them. Records lacking the attribute never match a comparison, so
/// they are not walked.
fn walk_first_attribute(schema: &TableSchema, conditions: &[Condition]) -> Driver {
    let first = conditions.iter().find_map(|c| match c {
        Condition::Compare { attribute, .. } => {
            schema.attribute(attribute).filter(|a| a.indexed && !a.is_primary_key).cloned()
        }
        Condition::Group { .. } | Condition::Related { .. } => None,
    });
    // Every comparison, `!=` included, matches only records that hold the attribute,
    // so the attribute's index entries are the candidates.
    match first {
        Some(attribute) => {
            let range = Range {
                lo: Bound::Included(attribute_prefix(&attribute).to_vec()),
                hi: Bound::Excluded((attribute.id + 1).to_be_bytes().to_vec()),
            };
            Driver::Index { attribute, range, descending: false }
        }
        None => Driver::Scan { descending: false },
    }
}

/// Counts the candidates `driver` yields, stopping at `cap`.
fn estimate(txn: &ReadTxn, store: &TableStore, driver: &Driver, cap: u64) -> Result<u64> {
    let mut count = 0u64;
    match driver {
        Driver::Keys(keys) => return Ok(keys.len() as u64),
        Driver::Index { range, .. } => {
            for entry in txn.index_entries(store, range.as_ref(), false)? {
                entry?;
                count += 1;
                if count >= cap {
                    break;
                }
            }
        }
        Driver::PrimaryRange { range, .. } => {
            for record in txn.records(store, range.as_ref(), false)? {
                record?;
                count += 1;
                if count >= cap {
                    break;
                }
            }
        }
        Driver::Union(parts) => {
            let mut total = 0u64;
            for part in parts {
                total = total.saturating_add(estimate(txn, store, part, cap.saturating_sub(total))?);
                if total >= cap {
                    break;
                }
            }
            return Ok(total);
        }
        _ => return Ok(u64::MAX),
    }
    Ok(count)
}

/// The driver a single condition can use: an index range, or for a relationship
/// condition the keys its related matches point at.
fn condition_driver(
    txn: &ReadTxn,
    db: &Arc<Db>,
    schema: &TableSchema,
    condition: &Condition,
) -> Result<Option<Driver>> {
    match condition {
        Condition::Related { relationship, condition } => related_driver(txn, db, schema, relationship, condition),
        // A nested OR (SQL's `IN` list, a LIKE prefix in each case spelling) is the
        // union of its parts' drivers, when each part has one; primary keys merge
        // into one key list.
        Condition::Group { operator: Operator::Or, conditions } if !conditions.is_empty() => {
            let parts: Option<Vec<Driver>> =
                conditions.iter().map(|c| condition_driver(txn, db, schema, c)).collect::<Result<_>>()?;
            let Some(parts) = parts else { return Ok(None) };
            if parts.iter().all(|p| matches!(p, Driver::Keys(_))) {
                let mut keys: Vec<Vec<u8>> =
                    parts.into_iter().flat_map(|p| if let Driver::Keys(k) = p { k } else { Vec::new() }).collect();
                keys.sort();
                keys.dedup();
                return Ok(Some(Driver::Keys(keys)));
            }
            Ok(Some(Driver::Union(parts)))
        }
        other => indexed_driver(schema, other),
    }
}

/// Evaluates a relationship condition on the related table first, then drives this
/// table by the keys that lead to the matches: their `to` values are this table's
/// keys; for `from`, this table's index on the `from` attribute is probed with them.
fn related_driver(
    txn: &ReadTxn,
    db: &Arc<Db>,
    schema: &TableSchema,
    name: &str,
    inner: &Condition,
) -> Result<Option<Driver>> {
    let Some(relationship) = schema.relationships.iter().find(|r| r.name == name) else { return Ok(None) };
    let target = target_table(db, relationship)?;
    let Some(target_store) = txn.table(&target.name)? else { return Ok(Some(Driver::Keys(Vec::new()))) };
    let inner_query = Query { conditions: vec![inner.clone()], ..Query::default() };
    let driver = choose_driver(txn, db, &target_store, &target, &inner_query)?;
    let mut matches = Vec::new();
    // The inner condition may itself follow the target's relationships (`a.b.c`).
    let related = crate::query::related::Related::new(txn, db, &target);
    let _ = walk(txn, &target_store, Live::of(&target), &driver, &mut |_, record| {
        if crate::query::filter::matches(inner, &record, Some(&related))? {
            matches.push(record);
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    let mut keys = std::collections::BTreeSet::new();
    if let Some(to) = &relationship.to {
        for record in &matches {
            let values: Vec<&Value> = match record.get(to) {
                Some(Value::Array(items)) => items.iter().collect(),
                Some(v) => vec![v],
                None => Vec::new(),
            };
            for value in values.into_iter().filter(|v| is_primary_key_value(v)) {
                if let Some(key) = value.as_key() {
                    keys.insert(encode_key(key)?.0);
                }
            }
        }
        return Ok(Some(Driver::Keys(keys.into_iter().collect())));
    }
    let Some(from) = relationship.from.as_deref().and_then(|f| schema.attribute(f)).filter(|a| a.indexed) else {
        return Ok(None);
    };
    let parts = matches
        .iter()
        .filter_map(|record| record.get(&target.primary_key))
        .map(|key| {
            indexed_driver(
                schema,
                &Condition::Compare {
                    attribute: from.name.clone(),
                    comparator: Comparator::Equals,
                    value: key.clone(),
                },
            )
        })
        .collect::<Result<Option<Vec<_>>>>()?;
    Ok(parts.map(Driver::Union))
}

/// The driver a single condition can use, if its attribute is indexed and its
/// comparator maps to a key range.
fn indexed_driver(schema: &TableSchema, condition: &Condition) -> Result<Option<Driver>> {
    let Condition::Compare { attribute, comparator, value } = condition else {
        return Ok(None);
    };
    let Some(attribute) = schema.attribute(attribute) else {
        return Ok(None);
    };
    if !attribute.indexed && !attribute.is_primary_key {
        return Ok(None);
    }
    let prefix: Vec<u8> = if attribute.is_primary_key { Vec::new() } else { attribute_prefix(attribute).to_vec() };
    let start = if attribute.is_primary_key { Bound::Unbounded } else { Bound::Included(prefix.clone()) };
    let end = if attribute.is_primary_key {
        Bound::Unbounded
    } else {
        Bound::Excluded((attribute.id + 1).to_be_bytes().to_vec())
    };
    // `at(v)`: the entries of exactly v; `after(v)`: the first entry past them.
    let keyed = |v: &Value| -> Result<Option<(Vec<u8>, bool)>> {
        let Some(key) = v.as_key() else {
            return Ok(None);
        };
        let (encoded, truncated) = encode_key(key)?;
        let mut full = prefix.clone();
        full.extend_from_slice(&encoded);
        Ok(Some((full, truncated)))
    };
    let after = |k: &[u8]| prefix_successor(k).map_or(Bound::Unbounded, Bound::Excluded);
    let range = match comparator {
        Comparator::Equals => {
            let Some((k, truncated)) = keyed(value)? else {
                return Ok(None);
            };
            if attribute.is_primary_key {
                let exact = is_primary_key_value(value) && !truncated;
                return Ok(Some(Driver::Keys(if exact { vec![k] } else { Vec::new() })));
            }
            Range { hi: after(&k), lo: Bound::Included(k) }
        }
        Comparator::GreaterThan | Comparator::GreaterThanEqual => {
            let Some((k, truncated)) = keyed(value)? else {
                return Ok(None);
            };
            let strict = *comparator == Comparator::GreaterThan && !truncated;
            let lo = if strict { bound_to_lo(after(&k)) } else { Bound::Included(k) };
            Range { lo, hi: end }
        }
        Comparator::LessThan | Comparator::LessThanEqual => {
            let Some((k, truncated)) = keyed(value)? else {
                return Ok(None);
            };
            let strict = *comparator == Comparator::LessThan && !truncated;
            let hi = if strict { Bound::Excluded(k) } else { min_hi(after(&k), &end) };
            // A null is below no value but null (`filter.rs`): past the nulls.
            let lo = match keyed(&Value::Null)? {
                Some((null, _)) if *value != Value::Null => bound_to_lo(after(&null)),
                _ => start,
            };
            Range { lo, hi }
        }
        Comparator::Between => {
            let Value::Array(bounds) = value else {
                return Ok(None);
            };
            let (Some((lo, _)), Some((hi, _))) = (keyed(&bounds[0])?, keyed(&bounds[1])?) else {
                return Ok(None);
            };
            Range { lo: Bound::Included(lo), hi: min_hi(after(&hi), &end) }
        }
        Comparator::StartsWith => {
            let Value::String(s) = value else {
                return Ok(None);
            };
            let mut k = prefix.clone();
            encode_string_prefix_into(s, &mut k);
            Range { hi: after(&k), lo: Bound::Included(k) }
        }
        Comparator::NotEqual | Comparator::Contains | Comparator::EndsWith => return Ok(None),
    };
    Ok(Some(if attribute.is_primary_key {
        Driver::PrimaryRange { range, descending: false }
    } else {
        Driver::Index { attribute: attribute.clone(), range, descending: false }
    }))
}

fn bound_to_lo(bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        // Past the last possible key: an empty range.
        Bound::Unbounded => Bound::Excluded(vec![0xFF; 8]),
        Bound::Excluded(k) => Bound::Included(k),
        Bound::Included(k) => Bound::Included(k),
    }
}

/// The tighter of two exclusive upper bounds.
fn min_hi(a: Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (&a, b) {
        (Bound::Excluded(x), Bound::Excluded(y)) if y < x => b.clone(),
        (Bound::Unbounded, _) => b.clone(),
        _ => a,
    }
}

/// Decides whether the driver's order satisfies the sort, switching to an index walk
/// when a single indexed sort key has no better driver.
pub(crate) fn order_for(schema: &TableSchema, query: &Query, driver: &mut Driver) -> Order {
    let [key] = query.sort.as_slice() else {
        if query.sort.is_empty() {
            set_descending(driver, query.descending);
            return Order::Natural;
        }
        return Order::Sort(query.sort.clone());
    };
    let Some(attribute) = schema.attribute(&key.attribute) else {
        return Order::Sort(query.sort.clone());
    };
    match driver {
        Driver::Scan { descending } if attribute.is_primary_key => *descending = key.descending,
        Driver::Scan { .. } if attribute.indexed => {
            *driver = Driver::SortIndex { attribute: attribute.clone(), descending: key.descending }
        }
        Driver::PrimaryRange { descending, .. } if attribute.is_primary_key => *descending = key.descending,
        Driver::Index { attribute: driving, descending, .. } if driving.id == attribute.id && !driving.multi_valued => {
            *descending = key.descending
        }
        _ => return Order::Sort(query.sort.clone()),
    }
    Order::Natural
}

fn set_descending(driver: &mut Driver, reverse: bool) {
    match driver {
        Driver::Scan { descending }
        | Driver::PrimaryRange { descending, .. }
        | Driver::Index { descending, .. }
        | Driver::SortIndex { descending, .. } => *descending = reverse,
        Driver::Keys(keys) if reverse => keys.reverse(),
        Driver::Keys(_) | Driver::Union(_) => {}
    }
}
