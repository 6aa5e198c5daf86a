//! The vector index as a kind of derived index: a declared `@indexed(type: "HNSW")`
//! attribute ([`Declared`]) and its graph, kept by the derived-index runtime
//! (`derived/`) like any other kind.

use std::any::Any;

use lyre_store::ReadTxn;

use crate::catalog::{VectorIndex, read_vector};
use crate::derived::{Declaration, DerivedIndex, Kind, Writes};
use crate::error::{Error, Result};
use crate::value::Value;
use crate::vector::Graph;
use crate::vector::store::{encode_changes, read_graph};

/// The vector index's kind (its stored entries lie under `hnsw:`).
pub const KIND: Kind = Kind { name: "vector", tag: b"hnsw:" };

/// A vector index declared on an attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// The attribute it indexes.
    pub attribute: String,
    /// Its options.
    pub spec: VectorIndex,
}

impl Declaration for Declared {
    fn kind(&self) -> Kind {
        KIND
    }

    fn attribute(&self) -> &str {
        &self.attribute
    }

    fn fingerprint(&self) -> Vec<u8> {
        // What the graph is built from; the query-time options (`efConstructionSearch`,
        // `filterExpansion`, `maxLagMilliseconds`) change without a rebuild. Encoding
        // numbers and an enum into a Vec cannot fail; were it to, an empty
        // fingerprint only means one needless rebuild.
        let s = &self.spec;
        rmp_serde::to_vec(&(s.distance, s.m, s.ef_construction, s.ml, s.optimize_routing, s.quantization))
            .unwrap_or_default()
    }

    fn max_lag_ms(&self) -> Option<u64> {
        self.spec.max_lag_ms
    }

    fn empty(&self) -> Box<dyn DerivedIndex> {
        Box::new(Graph::new(self.spec.clone()))
    }

    fn load(&self, txn: &ReadTxn, prefix: &[u8]) -> Result<Box<dyn DerivedIndex>> {
        Ok(Box::new(read_graph(txn, prefix, &self.spec)?))
    }
}

impl DerivedIndex for Graph {
    fn apply(&mut self, key: &[u8], value: Option<&Value>) -> std::result::Result<(), String> {
        match value.and_then(|value| read_vector(value).ok()) {
            Some(vector) => self.insert(key, &vector).inspect_err(|_| {
                self.remove(key);
            }),
            None => {
                self.remove(key);
                Ok(())
            }
        }
    }

    fn clear(&mut self) {
        let keys: Vec<Vec<u8>> = self.node_ids().filter_map(|id| self.key_of(id).map(<[u8]>::to_vec)).collect();
        for key in keys {
            self.remove(&key);
        }
    }

    fn take_writes(&mut self, prefix: &[u8]) -> Writes {
        let changes = self.take_changes();
        encode_changes(prefix, self, &changes)
    }

    fn len(&self) -> usize {
        Graph::len(self)
    }

    fn memory_bytes(&self) -> usize {
        Graph::memory_bytes(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The graph `index` holds, if it is a vector index.
pub fn graph_of(index: &dyn DerivedIndex) -> Result<&Graph> {
    index
        .as_any()
        .downcast_ref::<Graph>()
        .ok_or_else(|| Error::Corrupt("an index served as a vector index holds no graph".to_string()))
}
