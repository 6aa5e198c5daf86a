//! What an `@indexed(type: "HNSW", …)` attribute declares: the vector index's
//! distance and graph options, with Harper's option names and defaults.

use serde::{Deserialize, Serialize};

/// How near two vectors are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Distance {
    /// `1 − cos(a, b)` (Harper's default).
    #[default]
    Cosine,
    /// The squared Euclidean distance: Harper reports it without the square root,
    /// which does not change the order.
    Euclidean,
    /// `−(a · b)`: for vectors whose length carries meaning.
    DotProduct,
}

impl Distance {
    /// Harper's name of the distance (`distance:` in the directive and in a query's sort).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "cosine" => Some(Distance::Cosine),
            "euclidean" => Some(Distance::Euclidean),
            "dotProduct" => Some(Distance::DotProduct),
            _ => None,
        }
    }

    /// The distance's name as Harper spells it.
    pub fn name(self) -> &'static str {
        match self {
            Distance::Cosine => "cosine",
            Distance::Euclidean => "euclidean",
            Distance::DotProduct => "dotProduct",
        }
    }
}

/// A vector (HNSW) index's declaration. Values outside their ranges are refused by
/// [`VectorIndex::check`], so the schema that declares them fails to load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorIndex {
    /// How distance is measured.
    pub distance: Distance,
    /// Connections per node on the upper levels (`M`; level 0 keeps twice as many).
    pub m: u32,
    /// Breadth of the search that picks a new node's neighbours.
    pub ef_construction: u32,
    /// Default breadth of a query's search (`efConstructionSearch`, Harper's name;
    /// a query's `ef` overrides it).
    pub ef_search: u32,
    /// Level normalisation (`mL`, `1 / ln M` by default).
    pub ml: f64,
    /// How readily a candidate neighbour already reachable through a closer one is
    /// left out (0 never, 1 most readily).
    pub optimize_routing: f64,
    /// Stores vectors as int8 for the walk, re-ranking the nearest exactly.
    pub quantization: bool,
    /// How many nodes a filtered query's walk may pass over (refused by the
    /// filter) per unit of its breadth (`ef`) before it ranks exactly what the
    /// filter matches instead.
    pub filter_expansion: u32,
    /// Writes to the table are refused (503, retryable) while the index is more
    /// than this far behind (ms); `None` never refuses.
    pub max_lag_ms: Option<u64>,
}

impl Default for VectorIndex {
    fn default() -> Self {
        Self {
            distance: Distance::Cosine,
            m: 16,
            ef_construction: 100,
            ef_search: 50,
            ml: 1.0 / 16f64.ln(),
            optimize_routing: 0.5,
            quantization: false,
            filter_expansion: 24,
            max_lag_ms: None,
        }
    }
}

impl VectorIndex {
    /// Checks every option's range; the message names the option.
    pub fn check(&self) -> Result<(), String> {
        if !(2..=512).contains(&self.m) {
            return Err(format!("M must be between 2 and 512, not {}", self.m));
        }
        if !(1..=4096).contains(&self.ef_construction) {
            return Err(format!("efConstruction must be between 1 and 4096, not {}", self.ef_construction));
        }
        if !(1..=4096).contains(&self.ef_search) {
            return Err(format!("efConstructionSearch must be between 1 and 4096, not {}", self.ef_search));
        }
        if !(self.ml.is_finite() && self.ml > 0.0 && self.ml <= 10.0) {
            return Err(format!("mL must be a number above 0 and at most 10, not {}", self.ml));
        }
        if !(0.0..=1.0).contains(&self.optimize_routing) {
            return Err(format!("optimizeRouting must be between 0 and 1, not {}", self.optimize_routing));
        }
        if !(1..=1024).contains(&self.filter_expansion) {
            return Err(format!("filterExpansion must be between 1 and 1024, not {}", self.filter_expansion));
        }
        Ok(())
    }
}

/// The most dimensions a vector may have.
pub const MAX_DIMENSIONS: usize = 16_384;
