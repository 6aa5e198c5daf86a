//! How a derived index lies in the database's `derived` sub-database: under a
//! prefix of its own (its kind's tag, the table's incarnation and the attribute's
//! id), its state (owner epoch, cursor, declaration, readiness), its condemned
//! marker, and under a data prefix the entries its kind stores (see
//! [`DerivedIndex::take_writes`](crate::derived::DerivedIndex::take_writes)).

use lyre_store::{ReadTxn, WriteTxn};
use serde::{Deserialize, Serialize};

use crate::derived::Kind;
use crate::error::{Error, Result};

const STATE: u8 = b'S';
const CONDEMNED: u8 = b'C';
const DATA: u8 = b'D';

/// Entries deleted per writer job when an index is reset or removed.
pub const RESET_BATCH: usize = 20_000;

/// The length of [`prefix`]'s output.
pub const PREFIX_LEN: usize = 5 + 8 + 4;

/// The prefix every entry of the `kind` index on attribute `attribute_id` of
/// incarnation `incarnation` of a table lies under.
pub fn prefix(kind: Kind, incarnation: u64, attribute_id: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN);
    out.extend_from_slice(kind.tag);
    out.extend_from_slice(&incarnation.to_be_bytes());
    out.extend_from_slice(&attribute_id.to_be_bytes());
    out
}

/// The prefix the index's own entries lie under (what its kind stores).
pub fn data_prefix(prefix: &[u8]) -> Vec<u8> {
    key(prefix, DATA)
}

/// The name of the durable log cursor that holds the log for the index under
/// `prefix` (see `db/log.rs`), derived from the prefix so removing the index can
/// release it.
pub fn consumer_name(prefix: &[u8]) -> String {
    let (tag, rest) = prefix.split_at(prefix.len().min(5));
    let id: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    format!("derived:{}{id}", String::from_utf8_lossy(tag))
}

fn key(prefix: &[u8], kind: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 1);
    out.extend_from_slice(prefix);
    out.push(kind);
    out
}

/// A derived index's durable state beside its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexState {
    /// The owner epoch of the runner that last wrote it: minted anew on every
    /// start of a runner; a write from an older epoch is refused.
    pub epoch: u64,
    /// The log position its entries reflect: every entry up to it is applied.
    pub cursor: u64,
    /// The log's epoch the cursor counts in (a restored backup starts another).
    pub log_epoch: u64,
    /// The declaration it was built for ([`Declaration::fingerprint`](crate::derived::Declaration::fingerprint)):
    /// another declaration rebuilds.
    pub declaration: Vec<u8>,
    /// Whether a build has finished: a state without it is a build under way.
    pub ready: bool,
}

fn decode_state(bytes: &[u8]) -> Result<IndexState> {
    rmp_serde::from_slice(bytes).map_err(|e| Error::Corrupt(format!("a derived index's state: {e}")))
}

/// The stored state of the index under `prefix`.
pub fn read_state(txn: &ReadTxn, prefix: &[u8]) -> Result<Option<IndexState>> {
    txn.derived(&key(prefix, STATE))?.map(decode_state).transpose()
}

/// The stored state as the write `txn` sees it.
pub fn read_state_in(txn: &WriteTxn<'_, '_>, prefix: &[u8]) -> Result<Option<IndexState>> {
    txn.derived(&key(prefix, STATE))?.map(decode_state).transpose()
}

/// Writes the index's state.
pub fn write_state(txn: &mut WriteTxn<'_, '_>, prefix: &[u8], state: &IndexState) -> Result<()> {
    let bytes = rmp_serde::to_vec_named(state).map_err(|e| Error::Corrupt(format!("encoding an index state: {e}")))?;
    txn.put_derived(&key(prefix, STATE), &bytes).map_err(Into::into)
}

/// Whether the index under `prefix` is condemned: a rebuild began and has not
/// finished; nothing it holds may be served.
pub fn is_condemned(txn: &ReadTxn, prefix: &[u8]) -> Result<bool> {
    Ok(txn.derived(&key(prefix, CONDEMNED))?.is_some())
}

/// Writes the condemned marker (in its own committed job, before any reset).
pub fn condemn(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<()> {
    Ok(txn.put_derived(&key(prefix, CONDEMNED), &[1])?)
}

/// Clears the condemned marker (with the first state that is ready again).
pub fn clear_condemned(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<()> {
    txn.delete_derived(&key(prefix, CONDEMNED))?;
    Ok(())
}

/// Deletes up to [`RESET_BATCH`] of the index's own entries (not its state or
/// marker); returns whether any are left.
pub fn reset_some(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<bool> {
    Ok(txn.delete_derived_prefix(&data_prefix(prefix), RESET_BATCH)? >= RESET_BATCH)
}

/// Deletes up to [`RESET_BATCH`] of every entry under `prefix` (an index no schema
/// declares any more); returns whether any are left.
pub fn remove_some(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<bool> {
    Ok(txn.delete_derived_prefix(prefix, RESET_BATCH)? >= RESET_BATCH)
}

/// The prefixes of every `kind` index stored in `txn` (one seek per index).
pub fn stored_prefixes(txn: &ReadTxn, kind: Kind) -> Result<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut from = kind.tag.to_vec();
    while let Some((key, _)) = txn.derived_from(&from)? {
        if !key.starts_with(kind.tag) {
            break;
        }
        // A key shorter than a prefix (none is written so) is stepped over.
        let prefix = key.get(..PREFIX_LEN).unwrap_or(key);
        if prefix.len() == PREFIX_LEN {
            out.push(prefix.to_vec());
        }
        match lyre_store::prefix_successor(prefix) {
            Some(next) => from = next,
            None => break,
        }
    }
    Ok(out)
}

/// Puts and deletes `writes` in the `derived` sub-database.
pub fn apply_writes(txn: &mut WriteTxn<'_, '_>, writes: crate::derived::Writes) -> Result<()> {
    for (key, value) in writes {
        match value {
            Some(value) => txn.put_derived(&key, &value)?,
            None => {
                txn.delete_derived(&key)?;
            }
        }
    }
    Ok(())
}
