//! How a vector index lies in the database's `derived` sub-database: under a
//! prefix of its own (the table's incarnation and the attribute's id), its state
//! (cursor, owner epoch, entry point), its condemned marker, and one entry per node
//! for the node's key, level and vector, another for its links (links change far
//! more often than vectors, and are a sixth of their size).

use lyre_store::{ReadTxn, WriteTxn};
use serde::{Deserialize, Serialize};

use crate::catalog::VectorIndex;
use crate::error::{Error, Result};
use crate::vector::{Changes, Graph, StoredNode};

const STATE: u8 = b'S';
const CONDEMNED: u8 = b'C';
const NODE: u8 = b'N';
const LINKS: u8 = b'L';

/// Entries deleted per writer job when a graph is reset.
pub const RESET_BATCH: usize = 20_000;

/// The prefix every entry of the vector index on attribute `attribute_id` of
/// incarnation `incarnation` of a table lies under.
pub fn prefix(incarnation: u64, attribute_id: u32) -> Vec<u8> {
    let mut out = b"hnsw:".to_vec();
    out.extend_from_slice(&incarnation.to_be_bytes());
    out.extend_from_slice(&attribute_id.to_be_bytes());
    out
}

/// The name of the durable log cursor that holds the log for the index under
/// `prefix` (see `db/log.rs`), derived from the prefix so removing the index can
/// release it.
pub fn consumer_name(prefix: &[u8]) -> String {
    let id: String = prefix.iter().skip(ALL_PREFIX.len()).map(|b| format!("{b:02x}")).collect();
    format!("vector-index:{id}")
}

/// The prefix of every vector index's entries.
pub const ALL_PREFIX: &[u8] = b"hnsw:";

/// The length of [`prefix`]'s output.
pub const PREFIX_LEN: usize = 5 + 8 + 4;

fn key(prefix: &[u8], kind: u8, id: Option<u32>) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 5);
    out.extend_from_slice(prefix);
    out.push(kind);
    if let Some(id) = id {
        out.extend_from_slice(&id.to_be_bytes());
    }
    out
}

/// A vector index's durable state beside its nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexState {
    /// The owner epoch of the runner that last wrote it: minted anew on every
    /// start of a runner and every rebuild; a write from an older epoch is refused.
    pub epoch: u64,
    /// The log position its nodes reflect: every entry up to it is applied.
    pub cursor: u64,
    /// The log's epoch the cursor counts in (a restored backup starts another).
    pub log_epoch: u64,
    /// The graph's entry point.
    pub entry: Option<u32>,
    /// The declaration it was built for (another declaration rebuilds).
    pub spec: VectorIndex,
    /// Whether a build has finished: a state without it is a build under way.
    pub ready: bool,
}

/// The stored state of the index under `prefix`.
pub fn read_state(txn: &ReadTxn, prefix: &[u8]) -> Result<Option<IndexState>> {
    txn.derived(&key(prefix, STATE, None))?
        .map(|bytes| rmp_serde::from_slice(bytes).map_err(|e| Error::Corrupt(format!("a vector index's state: {e}"))))
        .transpose()
}

/// The stored state as the write `txn` sees it.
pub fn read_state_in(txn: &WriteTxn<'_, '_>, prefix: &[u8]) -> Result<Option<IndexState>> {
    txn.derived(&key(prefix, STATE, None))?
        .map(|bytes| rmp_serde::from_slice(bytes).map_err(|e| Error::Corrupt(format!("a vector index's state: {e}"))))
        .transpose()
}

/// Writes the index's state.
pub fn write_state(txn: &mut WriteTxn<'_, '_>, prefix: &[u8], state: &IndexState) -> Result<()> {
    let bytes = rmp_serde::to_vec_named(state).map_err(|e| Error::Corrupt(format!("encoding an index state: {e}")))?;
    txn.put_derived(&key(prefix, STATE, None), &bytes).map_err(Into::into)
}

/// Whether the index under `prefix` is condemned: a rebuild began and has not
/// finished; nothing it holds may be served.
pub fn is_condemned(txn: &ReadTxn, prefix: &[u8]) -> Result<bool> {
    Ok(txn.derived(&key(prefix, CONDEMNED, None))?.is_some())
}

/// Writes the condemned marker (in its own committed job, before any reset).
pub fn condemn(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<()> {
    Ok(txn.put_derived(&key(prefix, CONDEMNED, None), &[1])?)
}

/// Clears the condemned marker (with the first state that is ready again).
pub fn clear_condemned(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<()> {
    txn.delete_derived(&key(prefix, CONDEMNED, None))?;
    Ok(())
}

/// Deletes up to [`RESET_BATCH`] of the index's node and link entries (not its
/// state or marker); returns whether any are left.
pub fn reset_some(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<bool> {
    let nodes = txn.delete_derived_prefix(&key(prefix, NODE, None), RESET_BATCH)?;
    let links = txn.delete_derived_prefix(&key(prefix, LINKS, None), RESET_BATCH - nodes.min(RESET_BATCH))?;
    Ok(nodes + links >= RESET_BATCH)
}

/// Deletes up to [`RESET_BATCH`] of every entry under `prefix` (an index no schema
/// declares any more); returns whether any are left.
pub fn remove_some(txn: &mut WriteTxn<'_, '_>, prefix: &[u8]) -> Result<bool> {
    Ok(txn.delete_derived_prefix(prefix, RESET_BATCH)? >= RESET_BATCH)
}

fn encode_node(node: &StoredNode) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + node.vector.len() * 4 + node.key.len());
    out.push(node.level);
    out.extend_from_slice(&(node.vector.len() as u32).to_le_bytes());
    for x in &node.vector {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&node.key);
    out
}

fn encode_links(links: &[Vec<u32>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(links.iter().map(|l| 4 + l.len() * 4).sum());
    for level in links {
        out.extend_from_slice(&(level.len() as u32).to_le_bytes());
        for id in level {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    out
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
}

fn decode_node(bytes: &[u8]) -> Option<(u8, Vec<f32>, Vec<u8>)> {
    let level = *bytes.first()?;
    let dimensions = u32_at(bytes, 1)? as usize;
    let end = 5usize.checked_add(dimensions.checked_mul(4)?)?;
    let vector = bytes.get(5..end)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Some((level, vector, bytes[end..].to_vec()))
}

fn decode_links(bytes: &[u8]) -> Option<Vec<Vec<u32>>> {
    let (mut at, mut out) = (0, Vec::new());
    while at < bytes.len() {
        let count = u32_at(bytes, at)? as usize;
        at += 4;
        let level = (0..count).map(|i| u32_at(bytes, at + i * 4)).collect::<Option<Vec<u32>>>()?;
        at += count * 4;
        out.push(level);
    }
    Some(out)
}

/// The puts (`Some`) and deletes (`None`) that store what changed in `graph`
/// (taken with [`Graph::take_changes`]) under `prefix`.
pub fn encode_changes(prefix: &[u8], graph: &Graph, changes: &Changes) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for &id in &changes.removed {
        out.push((key(prefix, NODE, Some(id)), None));
        out.push((key(prefix, LINKS, Some(id)), None));
    }
    for &id in changes.added.union(&changes.linked) {
        let Some(node) = graph.node(id) else { continue };
        if changes.added.contains(&id) {
            out.push((key(prefix, NODE, Some(id)), Some(encode_node(&node))));
        }
        out.push((key(prefix, LINKS, Some(id)), Some(encode_links(&node.links))));
    }
    out
}

/// Reads the graph stored under `prefix` (nodes and links; the entry point from
/// `state`).
pub fn read_graph(txn: &ReadTxn, prefix: &[u8], spec: &VectorIndex, state: &IndexState) -> Result<Graph> {
    let corrupt = |what: &str| Error::Corrupt(format!("a vector index's {what} under {prefix:?} cannot be read"));
    let mut graph = Graph::new(spec.clone());
    let node_prefix = key(prefix, NODE, None);
    let links_prefix = key(prefix, LINKS, None);
    let mut links = txn.derived_prefix(&links_prefix)?.peekable();
    for item in txn.derived_prefix(&node_prefix)? {
        let (k, v) = item?;
        let id = k.get(node_prefix.len()..).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        let (Some(id), Some((level, vector, record_key))) = (id, decode_node(v)) else {
            return Err(corrupt("node"));
        };
        let wanted = key(prefix, LINKS, Some(id));
        // Both lists are in id order: skip link entries of ids without a node.
        let mut found = None;
        while let Some(Ok((lk, _))) = links.peek() {
            if *lk < wanted.as_slice() {
                links.next();
            } else {
                break;
            }
        }
        if let Some(Ok((lk, lv))) = links.peek()
            && *lk == wanted.as_slice()
        {
            found = decode_links(lv);
            links.next();
        }
        let node_links = found.ok_or_else(|| corrupt("links"))?;
        let node = StoredNode { key: record_key, level, vector, links: node_links };
        graph.restore(id, node).map_err(|e| Error::Corrupt(format!("a vector index: {e}")))?;
    }
    graph.restore_entry(state.entry);
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nodes and links decode to what was encoded; a short entry is refused.
    #[test]
    fn node_and_links_round_trip() {
        let node = StoredNode {
            key: b"k1".to_vec(),
            level: 2,
            vector: vec![0.5, -1.25, 3.0],
            links: vec![vec![1, 2, 3], vec![4], vec![]],
        };
        let (level, vector, key) = decode_node(&encode_node(&node)).unwrap();
        assert_eq!((level, vector, key), (2, node.vector.clone(), node.key.clone()));
        assert_eq!(decode_links(&encode_links(&node.links)).unwrap(), node.links);
        assert!(decode_node(&encode_node(&node)[..6]).is_none());
        assert!(decode_links(&[5, 0, 0, 0, 1]).is_none());
    }
}
