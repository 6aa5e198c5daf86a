//! A vector query's run: the records nearest a target vector, nearest first.
//!
//! Without conditions it walks the HNSW graph. With conditions that an index
//! narrows (the planner's driver is not a full scan), it ranks exactly what the
//! driver yields: a selective filter is cheaper to rank whole than to find by
//! walking a graph mostly made of records it refuses. With conditions no index
//! narrows, the walk itself filters: nodes whose record fails the conditions are
//! walked through but not returned, so a filter still yields `limit` results. The
//! walk passes over at most `filterExpansion × ef` refused nodes before it has found `ef`
//! matches; a filter that refuses more ranks exactly what it matches instead.
//!
//! Either way each result is read from the query's snapshot (a node the snapshot
//! does not hold, or holds no longer matching, is dropped), decoding only the
//! attributes the query reads. A graph of float vectors measures distances as
//! they are stored (f32, as Harper stores vectors), so its distances are the
//! answer's; one of int8 codes only approximates them, so its results are ranked
//! again exactly from the records' own vectors.

use std::cell::Cell;
use std::ops::ControlFlow;

use lyre_store::{ReadTxn, TableStore};

use crate::access::TableAccess;
use crate::catalog::{TableSchema, VectorIndex, read_vector};
use crate::db::derived::LiveIndex;
use crate::error::{Error, Result};
use crate::query::ast::{Query, VectorSort};
use crate::query::driver::Driver;
use crate::query::exec::{Sink, walk};
use crate::query::filter::matches_all;
use crate::query::related::Related;
use crate::query::select::DISTANCE;
use crate::record::expiry::Live;
use crate::value::{Object, Value};
use crate::vector::Verdict;
use crate::vector::declared::graph_of;
use crate::vector::distance::exact;

/// Results returned when a vector query names no limit.
const DEFAULT_RESULTS: usize = 100;

/// What a vector query's run reads.
pub(crate) struct Nearest<'a> {
    pub txn: &'a ReadTxn,
    pub store: &'a TableStore,
    pub schema: &'a TableSchema,
    pub live: Live<'a>,
    pub live_with_vector: Live<'a>,
    pub driver: &'a Driver,
    pub query: &'a Query,
    pub vector: &'a VectorSort,
    pub index: &'a LiveIndex,
    pub related: Option<&'a Related<'a>>,
    pub access: &'a TableAccess,
}

impl Nearest<'_> {
    /// Streams the nearest records to `sink`.
    pub(crate) fn run(self, sink: &mut Sink<'_>) -> Result<()> {
        let query = self.query;
        let wanted = query.offset.saturating_add(query.limit.unwrap_or(DEFAULT_RESULTS));
        if query.limit == Some(0) {
            return Ok(());
        }
        // The graph's own declaration: during a change of declaration, the one it was built for.
        let spec = graph_of(self.index.read().as_ref())?.spec().clone();
        let mut found = if query.conditions.is_empty() || !matches!(self.driver, Driver::Scan { .. }) {
            if query.conditions.is_empty() {
                self.walk_graph(&spec, wanted, false)?
            } else {
                self.rank_driver(&spec, wanted)?
            }
        } else {
            self.walk_graph(&spec, wanted, true)?
        };
        found.sort_by(|a, b| a.0.total_cmp(&b.0));
        let with_distance = query.select.names_distance();
        let key = self.schema.primary_key.as_str();
        for (distance, mut record) in found.into_iter().skip(query.offset).take(wanted - query.offset) {
            if with_distance {
                record.insert(DISTANCE.to_string(), Value::Float(distance));
            }
            let projected = query.select.project_value(self.schema, record, self.related)?;
            if sink(self.access.strip_value(projected, key)).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// The record stored under `key` in the snapshot, decoded by `live`, if it is
    /// live and matches the query's conditions.
    fn matching(&self, key: &[u8], live: Live<'_>) -> Result<Option<Object>> {
        let Some(stored) = self.txn.get_record(self.store, key)? else { return Ok(None) };
        let Some(record) = live.decode(stored)? else { return Ok(None) };
        Ok(matches_all(self.query.operator, &self.query.conditions, &record, self.related)?.then_some(record))
    }

    /// `record` with its exact distance from the target, if it holds a vector of
    /// the target's dimensions.
    fn scored(&self, spec: &VectorIndex, record: Object) -> Option<(f64, Object)> {
        let vector = record.get(&self.vector.attribute).and_then(|v| read_vector(v).ok())?;
        (vector.len() == self.vector.target.len()).then(|| (exact(spec.distance, &self.vector.target, &vector), record))
    }

    /// The graph's nearest nodes, read (and, for int8 codes, re-ranked); when
    /// `filtered`, the walk passes over nodes whose records fail the conditions.
    fn walk_graph(&self, spec: &VectorIndex, wanted: usize, filtered: bool) -> Result<Vec<(f64, Object)>> {
        let quantized = spec.quantization;
        let mut ef = self.vector.ef.unwrap_or(spec.ef_search as usize).max(wanted);
        if quantized {
            // int8 distances only approximate the order: re-rank more, exactly.
            ef = ef.max(wanted.saturating_mul(4));
        }
        // Until it has accepted `ef` nodes, a filtered walk passes over at most this
        // many refused ones; past them the filter is selective enough that ranking
        // what it matches exactly is the better answer (and the cheaper one, as the
        // walk would go on reading).
        let budget = ef.saturating_mul(self.vector.filter_expansion.unwrap_or(spec.filter_expansion) as usize);
        let (refused, accepted) = (Cell::new(0usize), Cell::new(0usize));
        let gave_up = Cell::new(false);
        let failed = Cell::new(None::<Error>);
        let hits: Vec<(f32, Vec<u8>)> = {
            let held = self.index.read();
            let graph = graph_of(held.as_ref())?;
            let query = graph.prepare(&self.vector.target);
            let accept = |id: u32| -> Verdict {
                if !filtered {
                    return Verdict::Accept;
                }
                let Some(key) = graph.key_of(id) else { return Verdict::Refuse };
                match self.matching(key, self.live) {
                    Ok(Some(_)) => {
                        accepted.set(accepted.get() + 1);
                        Verdict::Accept
                    }
                    Ok(None) if refused.get() < budget || accepted.get() >= ef => {
                        refused.set(refused.get() + 1);
                        Verdict::Refuse
                    }
                    Ok(None) => {
                        gave_up.set(true);
                        Verdict::Stop
                    }
                    Err(err) => {
                        failed.set(Some(err));
                        Verdict::Stop
                    }
                }
            };
            let found = graph.search(&query, ef, &accept);
            if let Some(err) = failed.take() {
                return Err(err);
            }
            if gave_up.get() {
                drop(held);
                return self.rank_driver(spec, wanted);
            }
            let keep = if quantized { found.len() } else { wanted };
            found.into_iter().take(keep).filter_map(|(d, id)| graph.key_of(id).map(|k| (d, k.to_vec()))).collect()
        };
        let mut out = Vec::with_capacity(hits.len());
        for (distance, key) in hits {
            if quantized {
                if let Some(record) = self.matching(&key, self.live_with_vector)?
                    && let Some(found) = self.scored(spec, record)
                {
                    out.push(found);
                }
            } else if let Some(record) = self.matching(&key, self.live)? {
                out.push((f64::from(distance), record));
            }
        }
        Ok(out)
    }

    /// Every record the driver yields that matches, ranked exactly; the nearest
    /// `wanted` are kept as it goes.
    fn rank_driver(&self, spec: &VectorIndex, wanted: usize) -> Result<Vec<(f64, Object)>> {
        let mut kept: Vec<(f64, Object)> = Vec::new();
        let _whole = walk(self.txn, self.store, self.live_with_vector, self.driver, &mut |_, record| {
            if !matches_all(self.query.operator, &self.query.conditions, &record, self.related)? {
                return Ok(ControlFlow::Continue(()));
            }
            if let Some(found) = self.scored(spec, record) {
                kept.push(found);
                if kept.len() >= wanted.saturating_mul(2).max(1024) {
                    kept.sort_by(|a, b| a.0.total_cmp(&b.0));
                    kept.truncate(wanted);
                }
            }
            Ok(ControlFlow::Continue(()))
        })?
        .is_continue();
        Ok(kept)
    }
}
