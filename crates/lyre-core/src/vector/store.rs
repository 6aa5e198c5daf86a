//! How a vector graph lies under its index's data prefix (see `derived/store.rs`
//! for the prefix, the state and the marker around it): one entry per node for
//! the node's key, level and vector, another for its links (links change far more
//! often than vectors, and are a sixth of their size), and one for the entry point.

use lyre_store::ReadTxn;

use crate::catalog::VectorIndex;
use crate::derived::Writes;
use crate::error::{Error, Result};
use crate::vector::{Changes, Graph, StoredNode};

const NODE: u8 = b'N';
const LINKS: u8 = b'L';
const ENTRY: u8 = b'E';

fn key(data: &[u8], kind: u8, id: Option<u32>) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 5);
    out.extend_from_slice(data);
    out.push(kind);
    if let Some(id) = id {
        out.extend_from_slice(&id.to_be_bytes());
    }
    out
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
/// (taken with [`Graph::take_changes`]) under the data prefix `prefix`.
pub fn encode_changes(prefix: &[u8], graph: &Graph, changes: &Changes) -> Writes {
    let mut out = Vec::new();
    if changes.entry {
        let entry = graph.entry().map(|id| id.to_be_bytes().to_vec());
        out.push((key(prefix, ENTRY, None), entry));
    }
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

/// Reads the graph stored under the data prefix `prefix`.
pub fn read_graph(txn: &ReadTxn, prefix: &[u8], spec: &VectorIndex) -> Result<Graph> {
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
    let entry = match txn.derived(&key(prefix, ENTRY, None))? {
        None => None,
        Some(bytes) => Some(bytes.try_into().map(u32::from_be_bytes).map_err(|_| corrupt("entry point"))?),
    };
    graph.restore_entry(entry);
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
