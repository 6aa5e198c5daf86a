//! What a query says, independent of the protocol that carried it.

use crate::db::derived::IndexWait;
use crate::value::Value;

/// How sibling conditions combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Operator {
    /// Every condition must hold.
    #[default]
    And,
    /// At least one condition must hold.
    Or,
}

/// How an attribute's value is compared with the condition's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparator {
    /// Equal (an array matches if any element is equal).
    Equals,
    /// Not equal.
    NotEqual,
    /// A string containing the value.
    Contains,
    /// A string starting with the value.
    StartsWith,
    /// A string ending with the value.
    EndsWith,
    /// Greater than, in key order (null < booleans < numbers < strings).
    GreaterThan,
    /// Greater than or equal.
    GreaterThanEqual,
    /// Less than.
    LessThan,
    /// Less than or equal.
    LessThanEqual,
    /// Between two values, both inclusive; the value is a two-element array.
    Between,
}

impl Comparator {
    /// Its name in query objects (Harper's: `equals`, `greater_than_equal`, …).
    pub fn name(self) -> &'static str {
        match self {
            Comparator::Equals => "equals",
            Comparator::NotEqual => "not_equal",
            Comparator::Contains => "contains",
            Comparator::StartsWith => "starts_with",
            Comparator::EndsWith => "ends_with",
            Comparator::GreaterThan => "greater_than",
            Comparator::GreaterThanEqual => "greater_than_equal",
            Comparator::LessThan => "less_than",
            Comparator::LessThanEqual => "less_than_equal",
            Comparator::Between => "between",
        }
    }
}

/// A condition tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `attribute comparator value`.
    Compare {
        /// The attribute compared.
        attribute: String,
        /// How.
        comparator: Comparator,
        /// With what.
        value: Value,
    },
    /// Records whose related records (through a `@relationship` field) satisfy
    /// `condition`, evaluated on the related table (`rel.attr==v` in REST).
    Related {
        /// The relationship field's name.
        relationship: String,
        /// The condition on the related records.
        condition: Box<Condition>,
    },
    /// A nested group.
    Group {
        /// How the group's conditions combine.
        operator: Operator,
        /// The group's conditions.
        conditions: Vec<Condition>,
    },
}

/// One sort key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortKey {
    /// The attribute sorted by.
    pub attribute: String,
    /// Largest first when true.
    pub descending: bool,
}

/// Results ordered by distance to a target vector, through the attribute's vector
/// (HNSW) index: Harper's `sort: {attribute, target}`.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSort {
    /// The vector attribute.
    pub attribute: String,
    /// The vector results are near.
    pub target: Vec<f64>,
    /// How wide the search is (defaults to the index's `efConstructionSearch`,
    /// and is never below the results wanted).
    pub ef: Option<usize>,
    /// How many refused nodes a filtered walk passes over per unit of `ef` before
    /// it ranks what the filter matches exactly instead (defaults to the index's
    /// `filterExpansion`).
    pub filter_expansion: Option<u32>,
}

/// A search over one table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    /// How the top-level conditions combine.
    pub operator: Operator,
    /// The conditions; empty matches every record.
    pub conditions: Vec<Condition>,
    /// Sort keys, most significant first; empty keeps the driver's order.
    pub sort: Vec<SortKey>,
    /// Reverse the natural order when no sort is given.
    pub descending: bool,
    /// Matching records to skip.
    pub offset: usize,
    /// Most records to return.
    pub limit: Option<usize>,
    /// Which attributes to return.
    pub select: super::Select,
    /// Nearest first to a target vector (overrides `sort`).
    pub vector: Option<VectorSort>,
    /// How long a vector query waits for its index, and how stale it may be.
    pub index_wait: IndexWait,
}

impl Condition {
    /// Adds to `out` the attributes of its own table the condition compares (for a
    /// condition through a relationship, the relationship's field).
    pub fn attributes_read<'q>(&'q self, out: &mut Vec<&'q str>) {
        match self {
            Condition::Compare { attribute, .. } => out.push(attribute),
            Condition::Related { relationship, .. } => out.push(relationship),
            Condition::Group { conditions, .. } => conditions.iter().for_each(|c| c.attributes_read(out)),
        }
    }

    /// The first attribute the condition (its groups included) compares that
    /// `defined` says its table does not define; a condition through a
    /// relationship names the related table's, which are not judged here.
    pub fn undefined_attribute(&self, defined: &dyn Fn(&str) -> bool) -> Option<&str> {
        match self {
            Condition::Compare { attribute, .. } => (!defined(attribute)).then_some(attribute.as_str()),
            Condition::Related { .. } => None,
            Condition::Group { conditions, .. } => conditions.iter().find_map(|c| c.undefined_attribute(defined)),
        }
    }
}

impl Query {
    /// The attributes of the searched table the query reads: those its conditions
    /// compare (a relationship's field for conditions through it), the first step of
    /// each sort key, and those its projection names. What a role must be able to
    /// read to run it.
    pub fn attributes_read(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.conditions.iter().for_each(|c| c.attributes_read(&mut out));
        out.extend(self.sort.iter().map(|key| key.attribute.split('.').next().unwrap_or_default()));
        out.extend(self.vector.iter().map(|v| v.attribute.as_str()));
        out.extend(self.select.attributes_named());
        out
    }
}
