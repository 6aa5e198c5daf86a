//! Expressions compiled from the parsed SQL against a statement's sources, and
//! their evaluation over one row.
//!
//! Compiling resolves every column to the source it reads (so evaluation never
//! looks a name up twice), runs uncorrelated subqueries once, and replaces each
//! aggregate call with a slot the grouping fills.

use std::sync::Arc;

use lyre_core::{Object, Value};
use sqlparser::ast;

use crate::error::{Result, SqlError};
use crate::functions::{self, Function};
use crate::ops::{self, Arith, LikePattern, Truth};

/// One row of a statement: a record (or `None`, null-extended by an outer join) per
/// source, in the order the sources appear in `FROM`.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// The records, one slot per source.
    pub sources: Vec<Option<Arc<Object>>>,
}

impl Row {
    /// The value of `column` of source `source` (`NULL` when absent).
    pub fn get(&self, source: usize, column: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.sources.get(source).and_then(Option::as_ref).and_then(|record| record.get(column)).unwrap_or(&NULL)
    }
}

/// What an expression is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// The row.
    pub row: &'a Row,
    /// The row's group's aggregate results, in the order of the statement's
    /// [`Aggregate`]s (empty outside a grouped statement).
    pub aggregates: &'a [Value],
    /// The statement's time (ms since the epoch): `NOW()` is the same in every row.
    pub now: f64,
}

/// A column of a source.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnRef {
    /// The source's position in `FROM`.
    pub source: usize,
    /// The attribute.
    pub name: String,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `=`.
    Eq,
    /// `<>`, `!=`.
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
}

impl Cmp {
    /// Whether `a op b` holds. An array on the left holds when any element does, as
    /// conditions on a multi-valued attribute match in Lyre's (and Harper's)
    /// indexed search.
    pub fn holds(self, a: &Value, b: &Value) -> Truth {
        use std::cmp::Ordering::*;
        if let (Value::Array(items), false) = (a, matches!(b, Value::Array(_))) {
            let mut any = Some(false);
            for item in items {
                match self.holds(item, b) {
                    Some(true) => return Some(true),
                    None => any = None,
                    Some(false) => {}
                }
            }
            return any;
        }
        let ordering = ops::compare(a, b)?;
        Some(match self {
            Cmp::Eq => ordering == Equal,
            Cmp::NotEq => ordering != Equal,
            Cmp::Lt => ordering == Less,
            Cmp::LtEq => ordering != Greater,
            Cmp::Gt => ordering == Greater,
            Cmp::GtEq => ordering != Less,
        })
    }

    /// The operator with its sides swapped (`a < b` is `b > a`).
    pub fn flipped(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::LtEq => Cmp::GtEq,
            Cmp::Gt => Cmp::Lt,
            Cmp::GtEq => Cmp::LtEq,
            other => other,
        }
    }
}

/// The type a `CAST` converts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastTo {
    /// Whole numbers (truncating).
    Integer,
    /// Any number.
    Number,
    /// Text.
    Text,
    /// `true`/`false`.
    Boolean,
}

/// A compiled expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// A column of a source.
    Column(ColumnRef),
    /// A constant.
    Literal(Value),
    /// `NOT e`.
    Not(Box<Expr>),
    /// `-e`.
    Negate(Box<Expr>),
    /// `a AND b`.
    And(Box<Expr>, Box<Expr>),
    /// `a OR b`.
    Or(Box<Expr>, Box<Expr>),
    /// A comparison.
    Compare(Cmp, Box<Expr>, Box<Expr>),
    /// Arithmetic (or `+` concatenation).
    Arithmetic(Arith, Box<Expr>, Box<Expr>),
    /// `a || b`.
    Concat(Box<Expr>, Box<Expr>),
    /// `e IS [NOT] NULL`.
    IsNull(Box<Expr>, bool),
    /// `e [NOT] IN (list)`.
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `e [NOT] IN (subquery)`: the subquery's first column, computed once.
    InSet(Box<Expr>, Arc<Vec<Value>>, bool),
    /// `e [NOT] BETWEEN low AND high`.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `e [NOT] LIKE pattern` with a constant pattern.
    Like(Box<Expr>, LikePattern, bool),
    /// `e [NOT] REGEXP pattern` with a constant pattern.
    Regexp(Box<Expr>, regex::Regex, bool),
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`.
    Case {
        /// Compared with each `WHEN` when present; else each `WHEN` is a condition.
        operand: Option<Box<Expr>>,
        /// `(WHEN, THEN)` pairs.
        whens: Vec<(Expr, Expr)>,
        /// `ELSE`, `NULL` when absent.
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(e AS type)`.
    Cast(Box<Expr>, CastTo),
    /// A scalar function.
    Call(Function, Vec<Expr>),
    /// An aggregate's result, by its position in the statement's aggregates.
    Aggregate(usize),
}

impl Expr {
    /// Evaluates the expression.
    pub fn eval(&self, env: &Env<'_>) -> Result<Value> {
        Ok(match self {
            Expr::Column(column) => env.row.get(column.source, &column.name).clone(),
            Expr::Literal(value) => value.clone(),
            Expr::Not(e) => ops::truth_value(ops::truth(&e.eval(env)?).map(|b| !b)),
            Expr::Negate(e) => match e.eval(env)? {
                Value::Int(i) => i.checked_neg().map_or(Value::Float(-(i as f64)), Value::Int),
                other => ops::number(&other).map_or(Value::Null, |n| ops::from_f64(-n)),
            },
            Expr::And(a, b) => {
                let left = ops::truth(&a.eval(env)?);
                if left == Some(false) {
                    return Ok(Value::Bool(false));
                }
                let right = ops::truth(&b.eval(env)?);
                ops::truth_value(match (left, right) {
                    (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                })
            }
            Expr::Or(a, b) => {
                let left = ops::truth(&a.eval(env)?);
                if left == Some(true) {
                    return Ok(Value::Bool(true));
                }
                let right = ops::truth(&b.eval(env)?);
                ops::truth_value(match (left, right) {
                    (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                })
            }
            Expr::Compare(cmp, a, b) => ops::truth_value(cmp.holds(&a.eval(env)?, &b.eval(env)?)),
            Expr::Arithmetic(op, a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                if *op == Arith::Add && (matches!(a, Value::String(_)) || matches!(b, Value::String(_))) {
                    ops::check_text_size(ops::text(&a).len() + ops::text(&b).len())?;
                }
                ops::arithmetic(*op, &a, &b)
            }
            Expr::Concat(a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                if matches!(a, Value::Null) || matches!(b, Value::Null) {
                    Value::Null
                } else {
                    let (a, b) = (ops::text(&a), ops::text(&b));
                    ops::check_text_size(a.len() + b.len())?;
                    Value::String(a + &b)
                }
            }
            Expr::IsNull(e, negated) => Value::Bool(matches!(e.eval(env)?, Value::Null) != *negated),
            Expr::InList(e, list, negated) => {
                let value = e.eval(env)?;
                let mut found = Some(false);
                for item in list {
                    // Any element of a list value, as `=` and the index match.
                    match Cmp::Eq.holds(&value, &item.eval(env)?) {
                        Some(true) => {
                            found = Some(true);
                            break;
                        }
                        None => found = None,
                        Some(false) => {}
                    }
                }
                ops::truth_value(found.map(|f| f != *negated))
            }
            Expr::InSet(e, set, negated) => {
                let value = e.eval(env)?;
                if matches!(value, Value::Null) {
                    return Ok(Value::Null);
                }
                let found = set.iter().any(|item| Cmp::Eq.holds(&value, item) == Some(true));
                Value::Bool(found != *negated)
            }
            Expr::Between(e, low, high, negated) => {
                let (value, low, high) = (e.eval(env)?, low.eval(env)?, high.eval(env)?);
                let between = |v: &Value| match (Cmp::GtEq.holds(v, &low), Cmp::LtEq.holds(v, &high)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
                // A list value is between when one element is, as the index matches.
                let inside = match &value {
                    Value::Array(items) => Some(items.iter().any(|i| between(i) == Some(true))),
                    scalar => between(scalar),
                };
                ops::truth_value(inside.map(|i| i != *negated))
            }
            // LIKE matches text only (as the index ranges core serves it from do).
            Expr::Like(e, pattern, negated) => match e.eval(env)? {
                Value::Null => Value::Null,
                Value::String(text) => Value::Bool(pattern.matches(&text) != *negated),
                Value::Array(items) => {
                    let any = items.iter().any(|i| matches!(i, Value::String(t) if pattern.matches(t)));
                    Value::Bool(any != *negated)
                }
                _ => Value::Bool(*negated),
            },
            Expr::Regexp(e, regex, negated) => match e.eval(env)? {
                Value::Null => Value::Null,
                value => Value::Bool(regex.is_match(&ops::text(&value)) != *negated),
            },
            Expr::Case { operand, whens, otherwise } => {
                let subject = operand.as_ref().map(|o| o.eval(env)).transpose()?;
                for (when, then) in whens {
                    let hit = match &subject {
                        Some(subject) => ops::equal(subject, &when.eval(env)?) == Some(true),
                        None => ops::truth(&when.eval(env)?) == Some(true),
                    };
                    if hit {
                        return then.eval(env);
                    }
                }
                match otherwise {
                    Some(e) => e.eval(env)?,
                    None => Value::Null,
                }
            }
            Expr::Cast(e, to) => cast(e.eval(env)?, *to),
            Expr::Call(function, args) => {
                let args = args.iter().map(|a| a.eval(env)).collect::<Result<Vec<_>>>()?;
                functions::call(*function, args, env.now)?
            }
            Expr::Aggregate(slot) => env.aggregates.get(*slot).cloned().unwrap_or(Value::Null),
        })
    }

    /// Whether the expression holds for the row (unknown does not).
    pub fn holds(&self, env: &Env<'_>) -> Result<bool> {
        Ok(ops::truth(&self.eval(env)?) == Some(true))
    }

    /// The sources the expression reads.
    pub fn sources(&self, out: &mut Vec<usize>) {
        self.visit(&mut |e| {
            if let Expr::Column(c) = e
                && !out.contains(&c.source)
            {
                out.push(c.source);
            }
        });
    }

    /// Whether the expression may answer differently each time (`RANDOM()`).
    pub fn is_volatile(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Call(Function::Random, _)));
        found
    }

    /// Whether the expression reads an aggregate's result.
    pub fn has_aggregate(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Aggregate(_)));
        found
    }

    /// Calls `f` on this expression and every one inside it.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Column(_) | Expr::Literal(_) | Expr::Aggregate(_) => {}
            Expr::Not(e) | Expr::Negate(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.visit(f),
            Expr::Like(e, ..) | Expr::Regexp(e, ..) | Expr::InSet(e, ..) => e.visit(f),
            Expr::And(a, b)
            | Expr::Or(a, b)
            | Expr::Compare(_, a, b)
            | Expr::Arithmetic(_, a, b)
            | Expr::Concat(a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::InList(e, list, _) => {
                e.visit(f);
                list.iter().for_each(|i| i.visit(f));
            }
            Expr::Between(e, low, high, _) => {
                e.visit(f);
                low.visit(f);
                high.visit(f);
            }
            Expr::Case { operand, whens, otherwise } => {
                if let Some(o) = operand {
                    o.visit(f);
                }
                for (w, t) in whens {
                    w.visit(f);
                    t.visit(f);
                }
                if let Some(o) = otherwise {
                    o.visit(f);
                }
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit(f)),
        }
    }
}

/// `CAST(value AS to)`.
fn cast(value: Value, to: CastTo) -> Value {
    if matches!(value, Value::Null) {
        return Value::Null;
    }
    match to {
        CastTo::Text => Value::String(ops::text(&value)),
        CastTo::Number => ops::number(&value).map_or(Value::Null, ops::from_f64),
        CastTo::Integer => {
            ops::number(&value).filter(|n| n.is_finite()).map_or(Value::Null, |n| Value::Int(n.trunc() as i64))
        }
        CastTo::Boolean => ops::truth_value(ops::truth(&value)),
    }
}

/// The aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateKind {
    /// `COUNT(*)`, `COUNT(e)`, `COUNT(DISTINCT e)`.
    Count,
    /// `SUM`.
    Sum,
    /// `AVG`.
    Avg,
    /// `MIN`.
    Min,
    /// `MAX`.
    Max,
    /// `ARRAY`: the group's values, as an array (Harper's alasql aggregate).
    Array,
    /// `GROUP_CONCAT`: the group's values as text, joined by commas.
    GroupConcat,
}

impl AggregateKind {
    /// The aggregate a function name calls, if any.
    pub fn named(name: &str) -> Option<AggregateKind> {
        Some(match name {
            "COUNT" => AggregateKind::Count,
            "SUM" => AggregateKind::Sum,
            "AVG" => AggregateKind::Avg,
            "MIN" => AggregateKind::Min,
            "MAX" => AggregateKind::Max,
            "ARRAY" => AggregateKind::Array,
            "GROUP_CONCAT" => AggregateKind::GroupConcat,
            _ => return None,
        })
    }
}

/// One aggregate call of a statement.
#[derive(Debug, Clone)]
pub struct Aggregate {
    /// Which function.
    pub kind: AggregateKind,
    /// Its argument; `None` for `COUNT(*)`.
    pub arg: Option<Expr>,
    /// `DISTINCT` values only.
    pub distinct: bool,
}

/// The deepest an expression may nest.
pub const MAX_DEPTH: usize = 1_000;

/// How a compiler resolves a column name to a source.
pub trait Scope {
    /// The source and attribute that `qualifier.name` (or `name` alone) names.
    fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<ColumnRef>;
}

/// Runs an uncorrelated subquery, answering its rows' first column.
pub type Subqueries<'a> = dyn FnMut(&ast::Query) -> Result<Vec<Value>> + 'a;

/// Compiles parsed expressions against a scope.
pub struct Compiler<'a> {
    /// How deep the expression being compiled nests here.
    depth: usize,
    scope: &'a dyn Scope,
    subqueries: &'a mut Subqueries<'a>,
    /// Where aggregate calls go; `None` where aggregates are not allowed (`WHERE`,
    /// `ON`, `GROUP BY`).
    aggregates: Option<&'a mut Vec<Aggregate>>,
}

impl<'a> Compiler<'a> {
    /// A compiler resolving names with `scope`, running subqueries with
    /// `subqueries`, collecting aggregates into `aggregates` when allowed.
    pub fn new(
        scope: &'a dyn Scope,
        subqueries: &'a mut Subqueries<'a>,
        aggregates: Option<&'a mut Vec<Aggregate>>,
    ) -> Compiler<'a> {
        Compiler { depth: 0, scope, subqueries, aggregates }
    }

    /// Compiles `expr`; refuses one nesting deeper than [`MAX_DEPTH`] (evaluation
    /// recurses once per level).
    pub fn compile(&mut self, expr: &ast::Expr) -> Result<Expr> {
        if self.depth >= MAX_DEPTH {
            return Err(SqlError::invalid(format!(
                "an expression nests more than {MAX_DEPTH} levels deep (a long chain of AND, OR or operators counts a level each)"
            )));
        }
        self.depth += 1;
        let compiled = self.compile_nested(expr);
        self.depth -= 1;
        compiled
    }

    fn compile_nested(&mut self, expr: &ast::Expr) -> Result<Expr> {
        use ast::Expr as E;
        Ok(match expr {
            E::Identifier(ident) => Expr::Column(self.scope.resolve(None, &ident.value)?),
            E::CompoundIdentifier(parts) => match parts.as_slice() {
                [qualifier, name] => Expr::Column(self.scope.resolve(Some(&qualifier.value), &name.value)?),
                [database, table, name] => {
                    let qualifier = format!("{}.{}", database.value, table.value);
                    Expr::Column(self.scope.resolve(Some(&qualifier), &name.value)?)
                }
                _ => return Err(SqlError::invalid(format!("the column name {expr} has too many parts"))),
            },
            E::Value(value) => Expr::Literal(literal(&value.value)?),
            E::Nested(inner) => self.compile(inner)?,
            E::UnaryOp { op, expr } => {
                let inner = Box::new(self.compile(expr)?);
                match op {
                    ast::UnaryOperator::Not | ast::UnaryOperator::BangNot => Expr::Not(inner),
                    ast::UnaryOperator::Minus => Expr::Negate(inner),
                    ast::UnaryOperator::Plus => *inner,
                    other => return Err(SqlError::unsupported(format!("the operator {other}"))),
                }
            }
            E::BinaryOp { left, op, right } => self.binary(left, op, right)?,
            E::IsNull(e) => Expr::IsNull(Box::new(self.compile(e)?), false),
            E::IsNotNull(e) => Expr::IsNull(Box::new(self.compile(e)?), true),
            E::IsTrue(e) => {
                Expr::Compare(Cmp::Eq, Box::new(self.compile(e)?), Box::new(Expr::Literal(Value::Bool(true))))
            }
            E::IsFalse(e) => {
                Expr::Compare(Cmp::Eq, Box::new(self.compile(e)?), Box::new(Expr::Literal(Value::Bool(false))))
            }
            E::In { expr, target, negated, .. } => {
                let subject = Box::new(self.compile(expr)?);
                match target {
                    ast::InTarget::List(list) => {
                        Expr::InList(subject, list.iter().map(|e| self.compile(e)).collect::<Result<_>>()?, *negated)
                    }
                    ast::InTarget::Subquery(query) => {
                        Expr::InSet(subject, Arc::new((self.subqueries)(query)?), *negated)
                    }
                    other => return Err(SqlError::unsupported(format!("IN {other}"))),
                }
            }
            E::Between { expr, negated, low, high } => Expr::Between(
                Box::new(self.compile(expr)?),
                Box::new(self.compile(low)?),
                Box::new(self.compile(high)?),
                *negated,
            ),
            // Harper's LIKE ignores case (its SQL runs on AlaSQL's); so does Lyre's.
            E::Like { negated, any: false, expr, pattern, escape_char } => {
                self.like(expr, pattern, escape_char.as_deref(), *negated, true)?
            }
            E::ILike { negated, any: false, expr, pattern, escape_char } => {
                self.like(expr, pattern, escape_char.as_deref(), *negated, true)?
            }
            E::RLike { negated, expr, pattern, .. } => self.regexp(expr, pattern, *negated)?,
            E::Case { operand, conditions, else_result, .. } => Expr::Case {
                operand: operand.as_ref().map(|o| self.compile(o).map(Box::new)).transpose()?,
                whens: conditions
                    .iter()
                    .map(|w| Ok((self.compile(&w.condition)?, self.compile(&w.result)?)))
                    .collect::<Result<_>>()?,
                otherwise: else_result.as_ref().map(|e| self.compile(e).map(Box::new)).transpose()?,
            },
            E::Cast { expr, data_type, .. } => Expr::Cast(Box::new(self.compile(expr)?), cast_type(data_type)?),
            E::Exists { subquery, negated } => {
                let found = !(self.subqueries)(subquery)?.is_empty();
                Expr::Literal(Value::Bool(found != *negated))
            }
            E::Subquery(query) => {
                let mut values = (self.subqueries)(query)?;
                if values.len() > 1 {
                    return Err(SqlError::invalid("a subquery used as a value returned more than one row"));
                }
                Expr::Literal(values.pop().unwrap_or(Value::Null))
            }
            E::Function(function) => self.function(function)?,
            E::Ceil { expr, field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime) } => {
                Expr::Call(Function::Ceil, vec![self.compile(expr)?])
            }
            E::Floor { expr, field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime) } => {
                Expr::Call(Function::Floor, vec![self.compile(expr)?])
            }
            E::Extract { field, expr, .. } => {
                let part = Expr::Literal(Value::String(field.to_string().to_ascii_lowercase()));
                Expr::Call(Function::Extract, vec![self.compile(expr)?, part])
            }
            E::Substring { expr, substring_from, substring_for, .. } => {
                let mut args = vec![self.compile(expr)?];
                if let Some(from) = substring_from {
                    args.push(self.compile(from)?);
                }
                if let Some(length) = substring_for {
                    args.push(self.compile(length)?);
                }
                Expr::Call(Function::Substring, args)
            }
            E::Trim { trim_where, trim_what: None, expr, trim_characters: None } => {
                let function = match trim_where {
                    None | Some(ast::TrimWhereField::Both) => Function::Trim,
                    Some(ast::TrimWhereField::Leading) => Function::LTrim,
                    Some(ast::TrimWhereField::Trailing) => Function::RTrim,
                };
                Expr::Call(function, vec![self.compile(expr)?])
            }
            other => return Err(SqlError::unsupported(format!("the expression {other}"))),
        })
    }

    fn binary(&mut self, left: &ast::Expr, op: &ast::BinaryOperator, right: &ast::Expr) -> Result<Expr> {
        use ast::BinaryOperator as B;
        if matches!(op, B::Regexp) {
            return self.regexp(left, right, false);
        }
        let (a, b) = (Box::new(self.compile(left)?), Box::new(self.compile(right)?));
        Ok(match op {
            B::And => Expr::And(a, b),
            B::Or => Expr::Or(a, b),
            B::Eq => Expr::Compare(Cmp::Eq, a, b),
            B::NotEq => Expr::Compare(Cmp::NotEq, a, b),
            B::Lt => Expr::Compare(Cmp::Lt, a, b),
            B::LtEq => Expr::Compare(Cmp::LtEq, a, b),
            B::Gt => Expr::Compare(Cmp::Gt, a, b),
            B::GtEq => Expr::Compare(Cmp::GtEq, a, b),
            B::Plus => Expr::Arithmetic(Arith::Add, a, b),
            B::Minus => Expr::Arithmetic(Arith::Sub, a, b),
            B::Multiply => Expr::Arithmetic(Arith::Mul, a, b),
            B::Divide => Expr::Arithmetic(Arith::Div, a, b),
            B::Modulo => Expr::Arithmetic(Arith::Mod, a, b),
            B::StringConcat => Expr::Concat(a, b),
            other => return Err(SqlError::unsupported(format!("the operator {other}"))),
        })
    }

    fn like(
        &mut self,
        expr: &ast::Expr,
        pattern: &ast::Expr,
        escape: Option<&ast::Expr>,
        negated: bool,
        case_insensitive: bool,
    ) -> Result<Expr> {
        let subject = Box::new(self.compile(expr)?);
        let Expr::Literal(Value::String(pattern)) = self.compile(pattern)? else {
            return Err(SqlError::unsupported("LIKE with a pattern that is not a string constant"));
        };
        let escape = match escape.map(|e| self.compile(e)).transpose()? {
            None => None,
            Some(Expr::Literal(Value::String(e))) if e.chars().count() == 1 => e.chars().next(),
            Some(_) => return Err(SqlError::invalid("LIKE's ESCAPE must be one character")),
        };
        Ok(Expr::Like(subject, LikePattern::new(&pattern, escape, case_insensitive), negated))
    }

    fn regexp(&mut self, expr: &ast::Expr, pattern: &ast::Expr, negated: bool) -> Result<Expr> {
        let subject = Box::new(self.compile(expr)?);
        let Expr::Literal(Value::String(pattern)) = self.compile(pattern)? else {
            return Err(SqlError::unsupported("REGEXP with a pattern that is not a string constant"));
        };
        // The size limit keeps a hostile pattern from taking the memory of a huge
        // compiled automaton.
        let regex = regex::RegexBuilder::new(&pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|err| SqlError::invalid(format!("REGEXP pattern '{pattern}' is not valid: {err}")))?;
        Ok(Expr::Regexp(subject, regex, negated))
    }

    fn function(&mut self, function: &ast::Function) -> Result<Expr> {
        let name = function.name.to_string().to_ascii_uppercase();
        if function.over.is_some() {
            return Err(SqlError::unsupported(format!("the window function {name}")));
        }
        let (args, distinct) = match &function.args {
            ast::FunctionArguments::None => (Vec::new(), false),
            ast::FunctionArguments::Subquery(_) => {
                return Err(SqlError::unsupported(format!("{name} over a subquery")));
            }
            ast::FunctionArguments::List(list) if !list.clauses.is_empty() => {
                // `SEPARATOR`, an `ORDER BY` inside the call, …: not run, so refused.
                return Err(SqlError::unsupported(format!("{name} with `{}`", list.clauses[0])));
            }
            ast::FunctionArguments::List(list) => (
                list.args.iter().collect::<Vec<_>>(),
                matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)),
            ),
        };
        // MAX and MIN of several arguments are scalar, as in Harper.
        let scalar_extreme = matches!(name.as_str(), "MAX" | "MIN") && args.len() > 1;
        if let Some(kind) = AggregateKind::named(&name).filter(|_| !scalar_extreme) {
            let arg = match args.as_slice() {
                [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)]
                    if kind == AggregateKind::Count && !distinct =>
                {
                    None
                }
                [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))] => Some(self.compile(e)?),
                _ => return Err(SqlError::invalid(format!("{name} takes one argument"))),
            };
            if arg.as_ref().is_some_and(Expr::has_aggregate) {
                return Err(SqlError::invalid(format!("{name} cannot contain another aggregate")));
            }
            let Some(aggregates) = self.aggregates.as_deref_mut() else {
                return Err(SqlError::invalid(format!("the aggregate {name} is not allowed here")));
            };
            aggregates.push(Aggregate { kind, arg, distinct });
            return Ok(Expr::Aggregate(aggregates.len() - 1));
        }
        let callee = match name.as_str() {
            "MAX" if scalar_extreme => Some(Function::Greatest),
            "MIN" if scalar_extreme => Some(Function::Least),
            other => Function::named(other),
        };
        let Some(callee) = callee else {
            return Err(SqlError::unsupported(format!("the function {name}")));
        };
        if distinct {
            return Err(SqlError::unsupported(format!("DISTINCT in {name}")));
        }
        let args = args
            .into_iter()
            .map(|arg| match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => self.compile(e),
                other => Err(SqlError::unsupported(format!("the argument {other} of {name}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        callee.check_arity(args.len())?;
        Ok(Expr::Call(callee, args))
    }
}

/// A SQL literal as a value.
pub fn literal(value: &ast::Value) -> Result<Value> {
    use ast::Value as V;
    Ok(match value {
        V::Number(text, _) => match text.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => {
                Value::Float(text.parse::<f64>().map_err(|_| SqlError::invalid(format!("{text} is not a number")))?)
            }
        },
        V::SingleQuotedString(s) | V::DoubleQuotedString(s) | V::EscapedStringLiteral(s) => Value::String(s.clone()),
        V::Boolean(b) => Value::Bool(*b),
        V::Null => Value::Null,
        other => return Err(SqlError::unsupported(format!("the literal {other}"))),
    })
}

/// The conversion `CAST(… AS data_type)` asks for.
fn cast_type(data_type: &ast::DataType) -> Result<CastTo> {
    let name = data_type.to_string().to_ascii_uppercase();
    let base = name.split('(').next().unwrap_or_default().trim();
    Ok(match base {
        b if b.contains("INT") || b == "SIGNED" || b == "UNSIGNED" => CastTo::Integer,
        "FLOAT" | "DOUBLE" | "REAL" | "DECIMAL" | "NUMERIC" | "NUMBER" | "DEC" | "DOUBLE PRECISION" | "FLOAT4"
        | "FLOAT8" => CastTo::Number,
        "CHAR" | "VARCHAR" | "TEXT" | "STRING" | "NVARCHAR" | "CHARACTER" | "CHARACTER VARYING" => CastTo::Text,
        "BOOL" | "BOOLEAN" => CastTo::Boolean,
        _ => return Err(SqlError::unsupported(format!("CAST to {name}"))),
    })
}
