//! The records a subscription starts with: the current records of its scope (one
//! record, the records whose key starts with a prefix, or the whole table), read a
//! page at a time from one snapshot, so a large table is sent without being held.

use std::ops::Bound;

use lyre_store::{decode_key, encode_string_prefix_into, prefix_successor};

use crate::access::{Action, Context};
use crate::error::Result;
use crate::query::SharedSnapshot;
use crate::record::expiry::Live;
use crate::record::validate;
use crate::table::{RecordBody, RecordVersion, Table};
use crate::value::Value;

/// Which of a table's records a subscription covers.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyScope {
    /// Every record.
    Table,
    /// The record with this primary key.
    Record(Value),
    /// The records whose primary key is a string starting with this prefix (`/T/a/`
    /// covers `a/1` and `a/b/2`).
    Prefix(String),
}

impl KeyScope {
    /// Whether the record with primary key `id` (encoded as `key`) is in scope.
    pub fn covers(&self, id: &Value, key: &[u8]) -> bool {
        match self {
            KeyScope::Table => true,
            KeyScope::Record(wanted) => {
                validate::encode_primary_key(wanted).is_ok_and(|encoded| encoded.as_slice() == key)
            }
            KeyScope::Prefix(prefix) => matches!(id, Value::String(s) if s.starts_with(prefix.as_str())),
        }
    }
}

/// One current record.
#[derive(Debug, Clone)]
pub struct CurrentRecord {
    /// Its primary key.
    pub id: Value,
    /// The record, without what the role may not read.
    pub body: RecordBody,
    /// The version of its last write.
    pub version: RecordVersion,
}

/// A page of current records, and where the next page starts.
#[derive(Debug, Clone, Default)]
pub struct CurrentPage {
    /// The records, in key order.
    pub records: Vec<CurrentRecord>,
    /// The encoded key to read after for the next page; `None` when this was the last.
    pub next: Option<Vec<u8>>,
}

impl Table {
    /// Up to `max` records (and about `max_bytes` of them; at least one) in `scope`
    /// after the encoded key `after`, from `snapshot`: what a subscription sends
    /// before the changes that follow the snapshot's log position. Expired records
    /// are left out, and so are the attributes the role may not read.
    pub fn current_page(
        &self,
        ctx: &Context,
        snapshot: &SharedSnapshot,
        scope: &KeyScope,
        after: Option<&[u8]>,
        max: usize,
        max_bytes: usize,
    ) -> Result<CurrentPage> {
        let access = self.access(ctx, &[Action::Read])?;
        let live = Live::of(&self.schema);
        let (lower, upper) = match scope {
            KeyScope::Table => (None, None),
            KeyScope::Record(id) => {
                let key = validate::encode_primary_key(id)?;
                (Some(key.clone()), Some(key))
            }
            KeyScope::Prefix(prefix) => {
                let mut start = Vec::new();
                encode_string_prefix_into(prefix, &mut start);
                let end = prefix_successor(&start);
                (Some(start), end)
            }
        };
        let start = match (after, &lower) {
            (Some(after), _) => Bound::Excluded(after),
            (None, Some(lower)) => Bound::Included(lower.as_slice()),
            (None, None) => Bound::Unbounded,
        };
        let end = match (scope, &upper) {
            (KeyScope::Record(_), Some(key)) => Bound::Included(key.as_slice()),
            (_, Some(end)) => Bound::Excluded(end.as_slice()),
            (_, None) => Bound::Unbounded,
        };
        snapshot.with_txn(|txn| {
            let mut page = CurrentPage::default();
            let Some(store) = txn.table(&self.schema.name)? else { return Ok(page) };
            let (mut bytes, mut last) = (0, None::<&[u8]>);
            for item in txn.records(&store, (start, end), false)? {
                let (key, stored) = item?;
                if page.records.len() >= max.max(1) || (bytes >= max_bytes && !page.records.is_empty()) {
                    page.next = last.map(<[u8]>::to_vec); // more may follow: resume after the last looked at
                    break;
                }
                last = Some(key);
                let id = Value::from(decode_key(key)?.0);
                if !scope.covers(&id, key) {
                    continue; // a prefix cut at the key length limit reads too wide
                }
                if let Some((body, version)) = self.body_of(&access, &live, stored)? {
                    bytes += body.size_hint();
                    page.records.push(CurrentRecord { id, body, version });
                }
            }
            Ok(page)
        })
    }
}
