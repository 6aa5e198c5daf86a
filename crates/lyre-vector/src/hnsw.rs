//! A hierarchical navigable small world graph (Malkov and Yashunin, 2016): the
//! vector index's in-memory form.
//!
//! Nodes are numbered densely; a node's vector lives in one contiguous array
//! (`dimensions` floats per node), its links in one list per level. Level 0 keeps
//! up to `2·M` links, upper levels `M`. A new node's neighbours are chosen from an
//! `efConstruction`-wide search with the routing heuristic (a candidate already
//! reachable through a closer chosen neighbour is left out, `optimizeRouting`
//! deciding how readily), and then filled up to the limit from those left out.
//!
//! Removing a node reconnects each of its neighbours from its remaining links and
//! the removed node's, so the graph keeps its reach; a link from a node the
//! removed one did not know of is left dangling and skipped (its slot may later hold
//! another node, which is then one more, harmless, link).
//!
//! Every change records which nodes it touched ([`Graph::take_changes`]), so the
//! runner persists only those, in the same transaction as its cursor.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use crate::distance::prepare;
use crate::spec::{Distance, VectorIndex};
use crate::vectors::Vectors;

/// Levels above this are never drawn (a level-16 node is one in 16¹⁶ at M = 16).
const MAX_LEVEL: u8 = 16;

/// A slot without a node.
const EMPTY: u8 = u8::MAX;

/// What a filtered search does with a node it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Return it (if near enough).
    Accept,
    /// Walk through it without returning it.
    Refuse,
    /// Stop the walk now, returning what was accepted so far (the filter proved
    /// too selective for a walk to be worth it).
    Stop,
}

/// A search's filter: every node it reaches is judged.
pub type Filter<'a> = &'a dyn Fn(u32) -> Verdict;

/// A filter that accepts every node.
pub fn accept_all(_: u32) -> Verdict {
    Verdict::Accept
}

/// A distance with a total order, for the heaps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Near(f32, u32);

impl Eq for Near {}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Near {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// A heap's nodes, nearest first.
fn sorted(results: BinaryHeap<Near>) -> Vec<Near> {
    let mut out = results.into_vec();
    out.sort();
    out
}

/// What changed since the last [`Graph::take_changes`]: the nodes whose vector (and
/// key) are new, the nodes whose links changed, and the nodes removed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    /// Nodes added (their vector, key and level must be stored).
    pub added: BTreeSet<u32>,
    /// Nodes whose links changed.
    pub linked: BTreeSet<u32>,
    /// Nodes removed.
    pub removed: BTreeSet<u32>,
    /// Whether the entry point changed.
    pub entry: bool,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.linked.is_empty() && self.removed.is_empty() && !self.entry
    }
}

/// One node as stored and as loaded: what [`Graph::node`] hands out and
/// [`Graph::restore`] takes back.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredNode {
    /// The record's encoded primary key.
    pub key: Vec<u8>,
    /// Its level.
    pub level: u8,
    /// Its vector as the index keeps it.
    pub vector: Vec<f32>,
    /// Its links, one list per level (0 ..= level).
    pub links: Vec<Vec<u32>>,
}

/// The graph. Not synchronised: the runner owns it behind a lock and is the only
/// writer; queries read it under the same lock.
#[derive(Debug, Clone)]
pub struct Graph {
    spec: VectorIndex,
    /// Each slot's vector.
    vectors: Vectors,
    /// Each slot's level, [`EMPTY`] for a free slot.
    levels: Vec<u8>,
    /// Each slot's links per level.
    links: Vec<Vec<Vec<u32>>>,
    /// Each slot's record key.
    keys: Vec<Vec<u8>>,
    by_key: HashMap<Vec<u8>, u32>,
    free: Vec<u32>,
    entry: Option<u32>,
    changes: Changes,
    rng: u64,
}

impl Graph {
    /// An empty graph for the declared index.
    pub fn new(spec: VectorIndex) -> Self {
        Self {
            vectors: Vectors::new(spec.distance, spec.quantization),
            spec,
            levels: Vec::new(),
            links: Vec::new(),
            keys: Vec::new(),
            by_key: HashMap::new(),
            free: Vec::new(),
            entry: None,
            changes: Changes::default(),
            rng: 0x9E37_79B9_7F4A_7C15
                ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
        }
    }

    /// The declared index.
    pub fn spec(&self) -> &VectorIndex {
        &self.spec
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether it holds no node.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The vectors' dimensions (0 before the first).
    pub fn dimensions(&self) -> usize {
        self.vectors.dimensions()
    }

    /// The entry point.
    pub fn entry(&self) -> Option<u32> {
        self.entry
    }

    /// Bytes the graph holds (vectors, links, keys), for reports.
    pub fn memory_bytes(&self) -> usize {
        let links: usize =
            self.links.iter().map(|levels| levels.iter().map(|l| l.capacity() * 4 + 24).sum::<usize>()).sum();
        let keys: usize = self.keys.iter().map(|k| k.capacity() + 24).sum();
        self.vectors.memory_bytes() + self.levels.capacity() + links + keys + self.by_key.capacity() * 40
    }

    /// Hands out what changed since the last call, and starts counting afresh.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Node `id` as stored, if the slot holds one.
    pub fn node(&self, id: u32) -> Option<StoredNode> {
        let slot = id as usize;
        (self.levels.get(slot).copied()? != EMPTY).then(|| StoredNode {
            key: self.keys[slot].clone(),
            level: self.levels[slot],
            vector: self.vectors.get(slot),
            links: self.links[slot].clone(),
        })
    }

    /// Node `id`'s links, if the slot holds one.
    pub fn links_of(&self, id: u32) -> Option<&[Vec<u32>]> {
        let slot = id as usize;
        (self.levels.get(slot).copied()? != EMPTY).then(|| self.links[slot].as_slice())
    }

    /// The record key node `id` stands for.
    pub fn key_of(&self, id: u32) -> Option<&[u8]> {
        let slot = id as usize;
        (self.levels.get(slot).copied()? != EMPTY).then(|| self.keys[slot].as_slice())
    }

    /// Puts back a node read from storage (loading a persisted graph), without
    /// recording a change. Nodes may come in any order; call
    /// [`Graph::restore_entry`] once all are in.
    pub fn restore(&mut self, id: u32, node: StoredNode) -> Result<(), String> {
        if self.dimensions() == 0 {
            self.vectors.reset(node.vector.len(), self.levels.len());
        }
        if node.vector.len() != self.dimensions() || node.links.len() != usize::from(node.level) + 1 {
            return Err(format!("node {id} does not match the graph ({} dimensions)", self.dimensions()));
        }
        self.ensure_slot(id);
        let slot = id as usize;
        self.levels[slot] = node.level;
        self.vectors.set(slot, &node.vector);
        self.links[slot] = node.links;
        self.by_key.insert(node.key.clone(), id);
        self.keys[slot] = node.key;
        Ok(())
    }

    /// Sets the entry point after [`Graph::restore`], and the free slots.
    pub fn restore_entry(&mut self, entry: Option<u32>) {
        self.entry = entry.filter(|&id| self.holds(id));
        self.free = (0..self.levels.len() as u32).filter(|&id| !self.holds(id)).rev().collect();
        if self.entry.is_none() && !self.is_empty() {
            self.entry = self.highest_node();
        }
    }

    fn holds(&self, id: u32) -> bool {
        self.levels.get(id as usize).is_some_and(|&l| l != EMPTY)
    }

    fn ensure_slot(&mut self, id: u32) {
        let needed = id as usize + 1;
        if self.levels.len() < needed {
            self.levels.resize(needed, EMPTY);
            self.links.resize_with(needed, Vec::new);
            self.keys.resize_with(needed, Vec::new);
            self.vectors.resize(needed);
        }
    }

    fn distance_to(&self, query: &[f32], id: u32) -> f32 {
        self.vectors.to_query(query, id as usize)
    }

    fn distance_between(&self, a: u32, b: u32) -> f32 {
        self.vectors.between_slots(a as usize, b as usize)
    }

    /// Prepares a query vector (f64, as records hold them) for [`Graph::search`].
    pub fn prepare(&self, vector: &[f64]) -> Vec<f32> {
        prepare(self.spec.distance, vector)
    }

    fn random_level(&mut self) -> u8 {
        // xorshift64*: plenty for drawing levels.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64;
        ((-uniform.ln() * self.spec.ml).floor() as u64).min(u64::from(MAX_LEVEL)) as u8
    }

    fn max_links(&self, level: usize) -> usize {
        let m = self.spec.m as usize;
        if level == 0 { 2 * m } else { m }
    }

    /// Adds (or replaces) the vector of record `key`. The vector must have the
    /// graph's dimensions (the first sets them); the caller checks values are finite.
    pub fn insert(&mut self, key: &[u8], vector: &[f64]) -> Result<(), String> {
        if self.dimensions() == 0 && self.is_empty() {
            self.vectors.reset(vector.len(), self.levels.len());
        }
        if vector.len() != self.dimensions() {
            return Err(format!("a vector of {} dimensions where the index holds {}", vector.len(), self.dimensions()));
        }
        self.remove(key);
        if self.dimensions() == 0 {
            // The graph emptied: the vector sets the dimensions again.
            self.vectors.reset(vector.len(), self.levels.len());
        }
        let prepared = self.prepare(vector);
        let id = match self.free.pop() {
            Some(id) => id,
            None => self.levels.len() as u32,
        };
        self.ensure_slot(id);
        let level = self.random_level();
        let slot = id as usize;
        self.levels[slot] = level;
        self.vectors.set(slot, &prepared);
        self.links[slot] = vec![Vec::new(); usize::from(level) + 1];
        self.keys[slot] = key.to_vec();
        self.by_key.insert(key.to_vec(), id);
        self.changes.added.insert(id);
        self.changes.removed.remove(&id);
        let Some(entry) = self.entry.filter(|&e| e != id) else {
            self.entry = Some(id);
            self.changes.entry = true;
            return Ok(());
        };
        let top = self.levels[entry as usize];
        let mut nearest = Near(self.distance_to(&prepared, entry), entry);
        for l in (usize::from(level) + 1..=usize::from(top)).rev() {
            nearest = self.greedy(&prepared, nearest, l);
        }
        let mut entries = vec![nearest];
        for l in (0..=usize::from(level.min(top))).rev() {
            let found = self.search_layer(&prepared, &entries, self.spec.ef_construction as usize, l, &accept_all, id);
            let chosen = self.select(&found, self.spec.m as usize);
            self.links[slot][l] = chosen.iter().map(|n| n.1).collect();
            for &Near(distance, neighbour) in &chosen {
                self.link(neighbour, id, distance, l);
            }
            entries = found;
        }
        self.changes.linked.insert(id);
        if level > top {
            self.entry = Some(id);
            self.changes.entry = true;
        }
        Ok(())
    }

    /// Adds a link `from → to` at `level`, shrinking `from`'s links with the
    /// heuristic when they pass the limit.
    fn link(&mut self, from: u32, to: u32, distance: f32, level: usize) {
        let limit = self.max_links(level);
        let slot = from as usize;
        if self.links[slot][level].contains(&to) {
            return;
        }
        self.changes.linked.insert(from);
        if self.links[slot][level].len() < limit {
            self.links[slot][level].push(to);
            return;
        }
        let mut candidates: Vec<Near> = self.links[slot][level]
            .iter()
            .filter(|&&n| self.has_level(n, level))
            .map(|&n| Near(self.distance_between(from, n), n))
            .collect();
        candidates.push(Near(distance, to));
        candidates.sort();
        let kept = self.select(&candidates, limit);
        self.links[slot][level] = kept.iter().map(|n| n.1).collect();
    }

    fn has_level(&self, id: u32, level: usize) -> bool {
        self.levels.get(id as usize).is_some_and(|&l| l != EMPTY && usize::from(l) >= level)
    }

    /// Chooses up to `limit` of `candidates` (nearest first) as neighbours: the
    /// routing heuristic, then the nearest of those it left out to fill up.
    fn select(&self, candidates: &[Near], limit: usize) -> Vec<Near> {
        if candidates.len() <= limit || self.spec.optimize_routing == 0.0 {
            return candidates.iter().copied().take(limit).collect();
        }
        // 0.5 is the paper's heuristic; 1 prunes twice as readily, near 0 hardly at all.
        let factor = (1.5 - self.spec.optimize_routing) as f32;
        let mut chosen: Vec<Near> = Vec::with_capacity(limit);
        let mut skipped = Vec::new();
        for &candidate in candidates {
            if chosen.len() >= limit {
                break;
            }
            let shadowed = chosen.iter().any(|c| self.distance_between(candidate.1, c.1) * factor < candidate.0);
            if shadowed { skipped.push(candidate) } else { chosen.push(candidate) }
        }
        for candidate in skipped {
            if chosen.len() >= limit {
                break;
            }
            chosen.push(candidate);
        }
        chosen
    }

    fn greedy(&self, query: &[f32], mut nearest: Near, level: usize) -> Near {
        loop {
            let mut moved = false;
            for &n in &self.links[nearest.1 as usize][level] {
                if !self.has_level(n, level) {
                    continue;
                }
                let d = self.distance_to(query, n);
                if d < nearest.0 {
                    nearest = Near(d, n);
                    moved = true;
                }
            }
            if !moved {
                return nearest;
            }
        }
    }

    /// The best-first search of one level from `entries`: up to `ef` nodes that
    /// `accept` takes, nearest first. Nodes `accept` refuses are walked through but
    /// not returned (a filtered search); once it says stop, the walk ends with what
    /// it has. `skip` is never returned (the node being inserted).
    fn search_layer(
        &self,
        query: &[f32],
        entries: &[Near],
        ef: usize,
        level: usize,
        accept: Filter<'_>,
        skip: u32,
    ) -> Vec<Near> {
        let ef = ef.max(1);
        let mut visited = Visited::new(self.levels.len());
        let mut candidates: BinaryHeap<Reverse<Near>> = BinaryHeap::new();
        let mut results: BinaryHeap<Near> = BinaryHeap::new();
        for &entry in entries {
            if visited.insert(entry.1) {
                candidates.push(Reverse(entry));
                if entry.1 != skip {
                    match accept(entry.1) {
                        Verdict::Accept => results.push(entry),
                        Verdict::Refuse => {}
                        Verdict::Stop => return sorted(results),
                    }
                }
            }
        }
        while results.len() > ef {
            results.pop();
        }
        while let Some(Reverse(current)) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|worst| current.0 > worst.0) {
                break;
            }
            for &n in &self.links[current.1 as usize][level] {
                if !self.has_level(n, level) || !visited.insert(n) {
                    continue;
                }
                let d = self.distance_to(query, n);
                if results.len() < ef || results.peek().is_some_and(|worst| d < worst.0) {
                    candidates.push(Reverse(Near(d, n)));
                    if n == skip {
                        continue;
                    }
                    match accept(n) {
                        Verdict::Accept => {
                            results.push(Near(d, n));
                            if results.len() > ef {
                                results.pop();
                            }
                        }
                        Verdict::Refuse => {}
                        Verdict::Stop => return sorted(results),
                    }
                }
            }
        }
        sorted(results)
    }

    /// Up to `ef` nodes nearest `query` (prepared with [`Graph::prepare`]) that
    /// `accept` takes, nearest first, as (distance, node).
    pub fn search(&self, query: &[f32], ef: usize, accept: Filter<'_>) -> Vec<(f32, u32)> {
        let Some(entry) = self.entry else { return Vec::new() };
        if query.len() != self.dimensions() {
            return Vec::new();
        }
        let mut nearest = Near(self.distance_to(query, entry), entry);
        for level in (1..=usize::from(self.levels[entry as usize])).rev() {
            nearest = self.greedy(query, nearest, level);
        }
        self.search_layer(query, &[nearest], ef, 0, accept, u32::MAX).into_iter().map(|n| (n.0, n.1)).collect()
    }

    /// Removes record `key`'s vector; returns whether it had one. Each neighbour is
    /// reconnected from its other links and the removed node's.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        let Some(id) = self.by_key.remove(key) else { return false };
        let slot = id as usize;
        let links = std::mem::take(&mut self.links[slot]);
        self.levels[slot] = EMPTY;
        self.keys[slot] = Vec::new();
        self.free.push(id);
        self.changes.removed.insert(id);
        self.changes.added.remove(&id);
        self.changes.linked.remove(&id);
        for (level, neighbours) in links.iter().enumerate() {
            for &n in neighbours {
                if !self.has_level(n, level) || !self.links[n as usize][level].contains(&id) {
                    continue;
                }
                let mut pool: Vec<u32> = self.links[n as usize][level].iter().copied().filter(|&x| x != id).collect();
                pool.extend(neighbours.iter().copied().filter(|&x| x != n));
                pool.sort_unstable();
                pool.dedup();
                let mut candidates: Vec<Near> = pool
                    .into_iter()
                    .filter(|&x| self.has_level(x, level))
                    .map(|x| Near(self.distance_between(n, x), x))
                    .collect();
                candidates.sort();
                let kept = self.select(&candidates, self.max_links(level));
                self.links[n as usize][level] = kept.iter().map(|c| c.1).collect();
                self.changes.linked.insert(n);
            }
        }
        if self.entry == Some(id) {
            self.entry = self.highest_node();
            self.changes.entry = true;
        }
        if self.is_empty() {
            self.vectors.reset(0, 0);
            self.levels.clear();
            self.links.clear();
            self.keys.clear();
            self.free.clear();
        }
        true
    }

    /// The node of highest level (a new entry point), if any.
    fn highest_node(&self) -> Option<u32> {
        (0..self.levels.len() as u32).filter(|&id| self.holds(id)).max_by_key(|&id| self.levels[id as usize])
    }

    /// The node standing for record `key`.
    pub fn node_of(&self, key: &[u8]) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Every node id held, for a walk over the whole graph.
    pub fn node_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.levels.len() as u32).filter(|&id| self.holds(id))
    }

    /// The distance of node `id`'s vector from a prepared query.
    pub fn distance_of(&self, query: &[f32], id: u32) -> Option<f32> {
        self.holds(id).then(|| self.distance_to(query, id))
    }

    /// The distance the graph measures.
    pub fn distance(&self) -> Distance {
        self.spec.distance
    }
}

/// The nodes one search has seen: a bit per slot.
struct Visited(Vec<u64>);

impl Visited {
    fn new(slots: usize) -> Self {
        Self(vec![0; slots.div_ceil(64)])
    }

    /// Marks `id`; returns whether it was new.
    fn insert(&mut self, id: u32) -> bool {
        let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
        match self.0.get_mut(word) {
            Some(w) if *w & bit == 0 => {
                *w |= bit;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::exact;

    use crate::testing::clustered;

    fn key(i: usize) -> Vec<u8> {
        (i as u64).to_be_bytes().to_vec()
    }

    fn recall(graph: &Graph, data: &[Option<Vec<f64>>], queries: &[Vec<f64>], k: usize, ef: usize) -> f64 {
        let mut hits = 0;
        for query in queries {
            let mut exact_order: Vec<(f64, usize)> = data
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.as_ref().map(|v| (exact(graph.distance(), query, v), i)))
                .collect();
            exact_order.sort_by(|a, b| a.0.total_cmp(&b.0));
            let truth: BTreeSet<Vec<u8>> = exact_order.iter().take(k).map(|(_, i)| key(*i)).collect();
            let found = graph.search(&graph.prepare(query), ef.max(k), &accept_all);
            hits +=
                found.iter().take(k).filter(|(_, id)| truth.contains(graph.key_of(*id).unwrap_or_default())).count();
        }
        hits as f64 / (queries.len() * k) as f64
    }

    /// Recall@10 against brute force on clustered data, for each distance, after
    /// inserts, then after replacing and removing a third of the vectors.
    #[test]
    fn recall_holds_through_inserts_updates_and_removals() {
        for distance in [Distance::Cosine, Distance::Euclidean, Distance::DotProduct] {
            let spec = VectorIndex { distance, ..VectorIndex::default() };
            let mut graph = Graph::new(spec);
            // Data, replacements and queries all drawn around the same centres.
            let pool = clustered(2_550, 32, 30, 7);
            let (points, rest) = pool.split_at(2_000);
            let (moved, queries) = rest.split_at(500);
            let mut data: Vec<Option<Vec<f64>>> = points.iter().cloned().map(Some).collect();
            for (i, v) in points.iter().enumerate() {
                graph.insert(&key(i), v).unwrap();
            }
            // A narrow search (ef 16 for 10 results) shows a poorly linked graph.
            let before = recall(&graph, &data, queries, 10, 16);
            assert!(before >= 0.95, "{distance:?}: recall {before}");
            for i in 0..500 {
                if i % 2 == 0 {
                    graph.insert(&key(i * 3), &moved[i]).unwrap();
                    data[i * 3] = Some(moved[i].clone());
                } else {
                    assert!(graph.remove(&key(i * 3)));
                    data[i * 3] = None;
                }
            }
            assert_eq!(graph.len(), 1_750);
            let after = recall(&graph, &data, queries, 10, 16);
            assert!(after >= 0.95, "{distance:?}: recall after churn {after}");
        }
    }

    /// With int8 vectors the walk is approximate; re-ranking what a wider search
    /// finds by exact distance (as queries do, from the records) keeps recall,
    /// for a quarter of the vectors' memory.
    #[test]
    fn quantised_graph_with_exact_reranking_keeps_recall() {
        for distance in [Distance::Cosine, Distance::Euclidean, Distance::DotProduct] {
            let quantized = VectorIndex { distance, quantization: true, ..VectorIndex::default() };
            let (mut graph, mut full) =
                (Graph::new(quantized), Graph::new(VectorIndex { distance, ..VectorIndex::default() }));
            let pool = clustered(2_050, 32, 30, 17);
            let (points, queries) = pool.split_at(2_000);
            for (i, v) in points.iter().enumerate() {
                graph.insert(&key(i), v).unwrap();
                full.insert(&key(i), v).unwrap();
            }
            assert!(graph.vectors.memory_bytes() * 3 < full.vectors.memory_bytes());
            let mut hits = 0;
            for query in queries {
                let mut exact_order: Vec<(f64, usize)> =
                    points.iter().enumerate().map(|(i, v)| (exact(distance, query, v), i)).collect();
                exact_order.sort_by(|a, b| a.0.total_cmp(&b.0));
                let truth: BTreeSet<Vec<u8>> = exact_order.iter().take(10).map(|(_, i)| key(*i)).collect();
                let mut found: Vec<(f64, Vec<u8>)> = graph
                    .search(&graph.prepare(query), 40, &accept_all)
                    .into_iter()
                    .map(|(_, id)| {
                        let k = graph.key_of(id).unwrap().to_vec();
                        let i = u64::from_be_bytes(k.clone().try_into().unwrap()) as usize;
                        (exact(distance, query, &points[i]), k)
                    })
                    .collect();
                found.sort_by(|a, b| a.0.total_cmp(&b.0));
                hits += found.iter().take(10).filter(|(_, k)| truth.contains(k)).count();
            }
            let recall = hits as f64 / (queries.len() * 10) as f64;
            assert!(recall >= 0.95, "{distance:?}: recall {recall}");
        }
    }

    /// A filtered search returns only accepted nodes, still `ef` of them when
    /// enough exist, nearest first.
    #[test]
    fn filtered_search_returns_only_accepted_nodes() {
        let mut graph = Graph::new(VectorIndex::default());
        let points = clustered(2_000, 16, 10, 3);
        for (i, v) in points.iter().enumerate() {
            graph.insert(&key(i), v).unwrap();
        }
        let wanted = |id: u32| graph.key_of(id).is_some_and(|k| k[7] % 7 == 0);
        let filter = |id: u32| if wanted(id) { Verdict::Accept } else { Verdict::Refuse };
        let found = graph.search(&graph.prepare(&points[5]), 20, &filter);
        assert_eq!(found.len(), 20);
        assert!(found.iter().all(|(_, id)| wanted(*id)));
        assert!(found.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    /// A filter that says stop ends the walk at once: no node is judged after it,
    /// and what was accepted before it is returned.
    #[test]
    fn a_filter_can_stop_the_walk() {
        let mut graph = Graph::new(VectorIndex::default());
        let points = clustered(2_000, 16, 10, 5);
        for (i, v) in points.iter().enumerate() {
            graph.insert(&key(i), v).unwrap();
        }
        let judged = std::cell::Cell::new(0usize);
        let filter = |_: u32| {
            judged.set(judged.get() + 1);
            match judged.get() {
                1..=3 => Verdict::Accept,
                4..=49 => Verdict::Refuse,
                _ => Verdict::Stop,
            }
        };
        let found = graph.search(&graph.prepare(&points[9]), 100, &filter);
        assert_eq!(judged.get(), 50, "no node is judged after the stop");
        assert_eq!(found.len(), 3);
        assert!(found.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    /// Changes name what to persist; restoring the persisted nodes gives a graph
    /// that answers the same.
    #[test]
    fn restored_graph_answers_as_the_original() {
        let mut graph = Graph::new(VectorIndex::default());
        let points = clustered(500, 8, 5, 11);
        for (i, v) in points.iter().enumerate() {
            graph.insert(&key(i), v).unwrap();
        }
        let removed = graph.node_of(&key(3)).unwrap();
        graph.take_changes();
        graph.remove(&key(3));
        let changes = graph.take_changes();
        assert!(changes.removed.contains(&removed) && !changes.linked.is_empty());
        let mut restored = Graph::new(VectorIndex::default());
        for id in graph.node_ids() {
            restored.restore(id, graph.node(id).unwrap()).unwrap();
        }
        restored.restore_entry(graph.entry());
        let query = restored.prepare(&points[42]);
        assert_eq!(graph.search(&query, 10, &accept_all), restored.search(&query, 10, &accept_all));
        assert!(graph.take_changes().is_empty());
    }

    /// A vector of other dimensions is refused; removing every node resets them.
    #[test]
    fn dimensions_are_fixed_by_the_first_vector_until_empty() {
        let mut graph = Graph::new(VectorIndex::default());
        graph.insert(b"a", &[1.0, 2.0]).unwrap();
        assert!(graph.insert(b"b", &[1.0, 2.0, 3.0]).is_err());
        assert!(graph.remove(b"a"));
        graph.insert(b"b", &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(graph.dimensions(), 3);
    }
}
