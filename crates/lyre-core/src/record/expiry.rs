//! Records that expire (`@table(expiration:)`, `@expiresAt`): the rules of what reads
//! may see and when a record may be removed. The sweep that removes them is a
//! service (`services/expiry.rs`).
//!
//! A record of a table with an [`Expiration`](crate::catalog::Expiration) is hidden
//! from every read once `expiration` seconds have passed since its last write
//! ([`Live`]); a record whose `@expiresAt` attribute holds a time (ms since the epoch)
//! is hidden from that time on, whatever the table's rule. A write to a hidden record
//! starts a new record. The expiry service removes it from storage (with its index
//! entries, as a logged delete) `eviction` seconds later, checking each table every
//! `scanInterval` seconds (every second, through the attribute's index, when
//! `@expiresAt` is the only rule).

use lyre_store::decode_record;

use crate::catalog::{Attribute, TableSchema};
use crate::error::Result;
use crate::record::computed::Computing;
use crate::record::entry::{decode_object, decode_object_only};
use crate::time::now_ms;
use crate::value::{Object, Value};

/// Whether records of `table` can expire at all.
pub(crate) fn expires(table: &TableSchema) -> bool {
    table.expiration.is_some() || table.expires_at.is_some()
}

/// When a record stops being visible (ms since the epoch), if it ever does: its own
/// `@expiresAt` time when it holds one (a number), else its last write (`version`)
/// plus the table's `expiration`.
pub(crate) fn hidden_from(table: &TableSchema, version: f64, record: &Object) -> Option<f64> {
    let own = table.expires_at.as_ref().and_then(|name| match record.get(name) {
        Some(Value::Int(ms)) => Some(*ms as f64),
        Some(Value::Float(ms)) if ms.is_finite() => Some(*ms),
        _ => None,
    });
    own.or_else(|| table.expiration.map(|e| version + e.expiration as f64 * 1_000.0))
}

/// When a record may be removed from storage (ms since the epoch), if it ever may:
/// the table's `eviction` seconds after it stops being visible.
pub(crate) fn removable_from(table: &TableSchema, version: f64, record: &Object) -> Option<f64> {
    let eviction = table.expiration.map_or(0.0, |e| e.eviction as f64 * 1_000.0);
    hidden_from(table, version, record).map(|at| at + eviction)
}

/// Which stored records a read may see: every one, or (for a table whose records
/// expire) those not expired when the read began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live<'a> {
    table: &'a TableSchema,
    now: f64,
    /// The attributes a read decodes (`None`: all of them).
    only: Option<&'a [String]>,
    /// Adds the table's `@computed` attributes to what it decodes, when set.
    computing: Option<&'a Computing>,
}

impl<'a> Live<'a> {
    /// What a read of `table` starting now may see.
    pub(crate) fn of(table: &'a TableSchema) -> Self {
        Live::at(table, if expires(table) { now_ms() } else { 0.0 })
    }

    /// What a read of `table` at `now` (ms) may see.
    pub(crate) fn at(table: &'a TableSchema, now: f64) -> Self {
        Live { table, now, only: None, computing: None }
    }

    /// The same, adding the table's `@computed` attributes to every record read
    /// (the whole record is then decoded: the code may read any attribute).
    pub(crate) fn computing(self, computing: &'a Computing) -> Self {
        Live { computing: self.table.has_computed().then_some(computing), ..self }
    }

    /// The same, decoding only the attributes `names` (which must hold the
    /// `@expiresAt` attribute, if the table has one).
    pub(crate) fn decoding_only(self, names: Option<&'a [String]>) -> Self {
        Live { only: names, ..self }
    }

    /// Whether a record last written at `version` (ms) is visible.
    pub(crate) fn sees(&self, version: f64, record: &Object) -> bool {
        hidden_from(self.table, version, record).is_none_or(|at| at > self.now)
    }

    /// Whether a record last written at `version` (ms) is visible, for a table
    /// whose records carry no `@expiresAt` time (only their age can hide them);
    /// `None` when the record itself must be read to tell.
    pub(crate) fn sees_version(&self, version: f64) -> Option<bool> {
        match (&self.table.expiration, &self.table.expires_at) {
            (_, Some(_)) => None,
            (None, None) => Some(true),
            (Some(expiration), None) => Some(!expiration.is_expired(version, self.now)),
        }
    }

    /// Whether a read of just `attribute` may take its values from that attribute's
    /// index instead of the records: it decodes only that attribute, no record can
    /// expire, and no record holds a list there (one entry, one record).
    pub(crate) fn covered_by(&self, attribute: &Attribute) -> bool {
        self.computing.is_none()
            && self.only.is_some_and(|only| only.len() == 1 && only[0] == attribute.name)
            && !expires(self.table)
            && !attribute.multi_valued
    }

    /// The stored record, decoded, unless it has expired.
    pub(crate) fn decode(&self, stored: &[u8]) -> Result<Option<Object>> {
        let record = self.decode_stored(stored)?;
        match (record, self.computing) {
            (Some(mut record), Some(computing)) => {
                // A read that names its attributes computes those and the
                // enumerable ones (a whole record carries those).
                let only = self.only;
                computing.add(self.table, &mut record, |attribute, computed| {
                    computed.enumerable || only.is_none_or(|names| names.contains(&attribute.name))
                })?;
                Ok(Some(record))
            }
            (record, _) => Ok(record),
        }
    }

    /// The stored record, decoded, unless it has expired; nothing computed.
    fn decode_stored(&self, stored: &[u8]) -> Result<Option<Object>> {
        let decode = |stored: &[u8]| match (self.only, self.computing) {
            (Some(names), None) => decode_object_only(stored, names),
            _ => decode_object(stored),
        };
        match (&self.table.expiration, &self.table.expires_at) {
            (None, None) => decode(stored).map(Some),
            // Expiry by age alone: the header says, without decoding the record.
            (Some(expiration), None) => {
                let version = decode_record(stored)?.0.version;
                if expiration.is_expired(version, self.now) { Ok(None) } else { decode(stored).map(Some) }
            }
            (_, Some(_)) => {
                let version = decode_record(stored)?.0.version;
                let record = decode(stored)?;
                Ok(self.sees(version, &record).then_some(record))
            }
        }
    }
}

/// The attribute whose index an expiry sweep can follow instead of walking every
/// record: the `@expiresAt` one, when that is the table's only rule and its index
/// holds one entry per record.
pub(crate) fn sweep_index(table: &TableSchema) -> Option<&Attribute> {
    if table.expiration.is_some() {
        return None;
    }
    let name = table.expires_at.as_ref()?;
    table.attribute(name).filter(|a| a.indexed && !a.multi_valued)
}
