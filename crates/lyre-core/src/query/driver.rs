//! What drives a search's walk (a key range, an index range, a list of keys, a
//! union) and in what order its results come: the planner's output, the executor's
//! input.

use std::ops::Bound;

use crate::catalog::Attribute;
use crate::query::ast::SortKey;

/// An owned key range.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Range {
    pub(crate) lo: Bound<Vec<u8>>,
    pub(crate) hi: Bound<Vec<u8>>,
}

impl Range {
    pub(crate) fn as_ref(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (self.lo.as_ref().map(Vec::as_slice), self.hi.as_ref().map(Vec::as_slice))
    }
}

/// Where candidate records come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Driver {
    /// Every record in primary-key order.
    Scan { descending: bool },
    /// These primary keys, in this order.
    Keys(Vec<Vec<u8>>),
    /// A primary-key range.
    PrimaryRange { range: Range, descending: bool },
    /// A secondary-index range of one attribute.
    Index { attribute: Attribute, range: Range, descending: bool },
    /// Every record ordered by an indexed attribute, records lacking it last.
    SortIndex { attribute: Attribute, descending: bool },
    /// The union of several drivers (an OR), de-duplicated.
    Union(Vec<Driver>),
}

/// How results are ordered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Order {
    /// The driver's order is the requested one: stream.
    Natural,
    /// Collect and sort (bounded by offset + limit when a limit is given).
    Sort(Vec<SortKey>),
}
