//! `SELECT`: binding `FROM` to tables, pushing conditions into core's indexed
//! search, joining, grouping, projecting, ordering and paging.
//!
//! Every table is read through [`Table::search_in`] on the statement's one snapshot
//! of its database, so a statement sees one commit per database. A condition on one
//! table that core can answer (a comparison, `BETWEEN`, `IN` of constants, a `LIKE`
//! prefix) becomes a core condition, so an index serves it; every condition is
//! checked again on the joined row, so pushing one down never changes an answer. A
//! join on the other table's primary key or an indexed attribute looks each key up;
//! other joins hash the smaller side's keys. Intermediate rows are charged against
//! the statement's memory budget.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use lyre_core::query::{Comparator, Condition, Operator, Query, Select, SharedSnapshot, SortKey};
use lyre_core::{Context, Db, Engine, Object, Table, Value};
use sqlparser::ast;

use crate::error::{Result, SqlError};
use crate::expr::{Aggregate, AggregateKind, Cmp, ColumnRef, Compiler, Env, Expr, Row, Scope};
use crate::ops;

/// Rows of an indexed join whose keys are looked up in one search. Core checks
/// every condition again on each record it reads, so the OR of a batch's keys costs
/// its length per record: 512 made the 10,000 × 100,000 join 1.15 s, one search a
/// row 0.33 s, 32 0.23 s (lyre-bench sql --kind join, release build).
const LOOKUP_BATCH: usize = 32;

/// The largest `LIMIT` + `OFFSET` whose sort a single-table query leaves to core
/// (larger pages, or none, are sorted here, charged to the statement's budget).
const CORE_SORT_WINDOW: usize = 10_000;

/// The database a table named without one is looked up in (Harper's default).
pub const DEFAULT_DATABASE: &str = "data";

/// The rows a query answers, with their columns in order.
#[derive(Debug, Default)]
pub struct Rows {
    /// One object per row, keyed by column name.
    pub rows: Vec<Object>,
}

/// One statement's reading state: who reads, its snapshots (one per database), its
/// time, and how much of its memory budget it has used.
pub struct Statement<'e> {
    engine: &'e Engine,
    ctx: &'e Context,
    snapshots: HashMap<String, SharedSnapshot>,
    budget: Budget,
    /// The statement's time (ms): every `NOW()` in it agrees.
    pub now: f64,
    /// How each table was read, for `EXPLAIN`.
    pub plan: Vec<String>,
}

/// A source in `FROM`.
struct Source {
    /// What of each record the statement reads: every attribute when a `*` covers
    /// the source, else only the attributes it names (decoding less).
    read: Select,
    /// The name columns are qualified with: the alias, else the table's name.
    alias: String,
    /// `database.table`, also accepted as a qualifier.
    qualified: Option<String>,
    /// Attributes known to exist (for resolving unqualified names).
    columns: Vec<String>,
    kind: SourceKind,
}

enum SourceKind {
    Table { table: Table, snapshot: SharedSnapshot },
    Derived { rows: Vec<Arc<Object>> },
}

impl Source {
    fn table(&self) -> Option<&Table> {
        match &self.kind {
            SourceKind::Table { table, .. } => Some(table),
            SourceKind::Derived { .. } => None,
        }
    }

    /// Whether a lookup by `column` is served by the primary key or an index.
    fn indexes(&self, column: &str) -> bool {
        self.table().is_some_and(|t| {
            let schema = t.schema();
            schema.primary_key == column || schema.attributes.iter().any(|a| a.name == column && a.indexed)
        })
    }
}

/// How each source after the first joins the ones before it, with its `ON`.
type Joins = Vec<(JoinKind, Option<ast::Expr>)>;

/// How a source joins the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinKind {
    Inner,
    Left,
    Right,
    /// `FULL [OUTER] JOIN`: a left and a right join's unmatched rows both.
    Full,
    Cross,
}

impl JoinKind {
    /// Whether rows of the sources before it that match nothing are kept.
    fn keeps_unmatched_outer(self) -> bool {
        matches!(self, JoinKind::Left | JoinKind::Full)
    }

    /// Whether rows of the joined source that match nothing are kept.
    fn keeps_unmatched_inner(self) -> bool {
        matches!(self, JoinKind::Right | JoinKind::Full)
    }
}

/// The sources of a statement, as the compiler resolves names against them.
struct Sources<'s>(&'s [Source]);

impl Scope for Sources<'_> {
    fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<ColumnRef> {
        match qualifier {
            Some(q) => {
                let (at, _) = self
                    .0
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.alias == q || s.qualified.as_deref() == Some(q))
                    .ok_or_else(|| SqlError::invalid(format!("unknown table or alias '{q}' in column '{q}.{name}'")))?;
                if !self.0[at].columns.iter().any(|c| c == name) {
                    return Err(unknown_column(&format!("{q}.{name}")));
                }
                Ok(ColumnRef { source: at, name: name.to_string() })
            }
            None => {
                let mut found = self.0.iter().enumerate().filter(|(_, s)| s.columns.iter().any(|c| c == name));
                match (found.next(), found.next()) {
                    (Some((at, _)), None) => Ok(ColumnRef { source: at, name: name.to_string() }),
                    (Some(_), Some(_)) => Err(SqlError::invalid(format!(
                        "ambiguous column reference {name}: more than one table has it; qualify it with the table's name or alias"
                    ))),
                    (None, _) => Err(unknown_column(name)),
                }
            }
        }
    }
}

/// Harper's message for a column no source has.
fn unknown_column(name: &str) -> SqlError {
    SqlError::invalid(format!("unknown column {name}"))
}

/// A compiled projection item.
enum Item {
    /// `*` or `alias.*`: every column of these sources.
    Wildcard(Vec<usize>),
    /// An expression and the column name it answers under.
    Expr(Expr, String),
}

/// A row after grouping: a representative row and its group's aggregate results.
struct Grouped {
    row: Row,
    aggregates: Vec<Value>,
}

impl<'e> Statement<'e> {
    /// A statement read by `ctx` over `engine`, with `budget` bytes for intermediate
    /// results, at time `now` (ms).
    pub fn new(engine: &'e Engine, ctx: &'e Context, budget: usize, now: f64) -> Statement<'e> {
        Statement {
            engine,
            ctx,
            snapshots: HashMap::new(),
            budget: Budget { limit: budget, used: 0 },
            now,
            plan: Vec::new(),
        }
    }

    /// The table `name` names (`db.table`, or `table` in the default database),
    /// with the statement's snapshot of its database.
    pub fn table(&mut self, name: &ast::ObjectName) -> Result<(Table, SharedSnapshot)> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|part| match part {
                ast::ObjectNamePart::Identifier(ident) => Ok(ident.value.clone()),
                other => Err(SqlError::unsupported(format!("the table name {other}"))),
            })
            .collect::<Result<_>>()?;
        let (database, table) = match parts.as_slice() {
            [table] => (DEFAULT_DATABASE.to_string(), table.clone()),
            [database, table] => (database.clone(), table.clone()),
            _ => return Err(SqlError::invalid(format!("'{name}' is not a table name: use database.table"))),
        };
        let db: Arc<Db> = self.engine.database(&database)?;
        let table = db.table(&table)?;
        let snapshot = match self.snapshots.get(&database) {
            Some(snapshot) => snapshot.clone(),
            None => {
                let snapshot = db.shared_snapshot()?;
                self.snapshots.insert(database, snapshot.clone());
                snapshot
            }
        };
        Ok((table, snapshot))
    }

    /// Who runs the statement.
    pub fn ctx(&self) -> &'e Context {
        self.ctx
    }

    /// Charges `bytes` of intermediate results against the budget.
    fn charge(&mut self, bytes: usize) -> Result<()> {
        self.budget.charge(bytes)
    }

    /// Runs a query (a `SELECT`, possibly parenthesized, with its `ORDER BY` and
    /// `LIMIT`).
    pub fn query(&mut self, query: &ast::Query) -> Result<Rows> {
        if query.with.is_some() {
            return Err(SqlError::unsupported("WITH"));
        }
        if query.fetch.is_some() {
            return Err(SqlError::unsupported("FETCH"));
        }
        let (limit, offset) = self.paging(query.limit_clause.as_ref())?;
        let order: &[ast::OrderByExpr] = match &query.order_by {
            None => &[],
            Some(ast::OrderBy { kind: ast::OrderByKind::Expressions(keys), .. }) => keys,
            Some(_) => return Err(SqlError::unsupported("ORDER BY ALL")),
        };
        match query.body.as_ref() {
            ast::SetExpr::Select(select) => self.select(select, order, limit, offset),
            ast::SetExpr::Query(inner) if order.is_empty() && limit.is_none() && offset == 0 => self.query(inner),
            ast::SetExpr::SetOperation { op, .. } => Err(SqlError::unsupported(op)),
            other => Err(SqlError::unsupported(format!("the query {other}"))),
        }
    }

    /// `LIMIT` and `OFFSET` as numbers.
    fn paging(&mut self, clause: Option<&ast::LimitClause>) -> Result<(Option<usize>, usize)> {
        let count = |this: &mut Self, e: &ast::Expr, what: &str| -> Result<usize> {
            let value = this.constant(e)?;
            match value {
                Value::Int(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
                other => {
                    Err(SqlError::invalid(format!("{what} must be a whole number of rows, not {}", ops::text(&other))))
                }
            }
        };
        Ok(match clause {
            None => (None, 0),
            Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
                if !limit_by.is_empty() {
                    return Err(SqlError::unsupported("LIMIT BY"));
                }
                let limit = limit.as_ref().map(|l| count(self, l, "LIMIT")).transpose()?;
                let offset = offset.as_ref().map(|o| count(self, &o.value, "OFFSET")).transpose()?.unwrap_or(0);
                (limit, offset)
            }
            Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
                (Some(count(self, limit, "LIMIT")?), count(self, offset, "OFFSET")?)
            }
        })
    }

    /// Evaluates an expression that reads no table.
    pub fn constant(&mut self, expr: &ast::Expr) -> Result<Value> {
        let compiled = self.compile(&[], expr, None)?;
        compiled.eval(&Env { row: &Row::default(), aggregates: &[], now: self.now })
    }

    /// Compiles `expr` against `sources`; subqueries run in this statement.
    fn compile(
        &mut self,
        sources: &[Source],
        expr: &ast::Expr,
        aggregates: Option<&mut Vec<Aggregate>>,
    ) -> Result<Expr> {
        let scope = Sources(sources);
        let mut run = |query: &ast::Query| -> Result<Vec<Value>> {
            let rows = self.query(query)?;
            Ok(rows.rows.into_iter().map(|row| row.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null)).collect())
        };
        let mut compiler = Compiler::new(&scope, &mut run, aggregates);
        compiler.compile(expr)
    }

    fn select(
        &mut self,
        select: &ast::Select,
        order: &[ast::OrderByExpr],
        limit: Option<usize>,
        offset: usize,
    ) -> Result<Rows> {
        refuse_unsupported(select)?;
        // `TOP n` (as Harper takes it) is a LIMIT: the smaller of the two holds.
        let limit = match select.top.as_ref().and_then(|top| top.quantity.as_ref()) {
            Some(quantity) => {
                let top = match quantity {
                    ast::TopQuantity::Constant(n) => usize::try_from(*n).unwrap_or(usize::MAX),
                    ast::TopQuantity::Expr(e) => match self.constant(e)? {
                        Value::Int(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                        other => {
                            return Err(SqlError::invalid(format!(
                                "TOP must be a whole number of rows, not {}",
                                ops::text(&other)
                            )));
                        }
                    },
                };
                Some(limit.map_or(top, |limit| limit.min(top)))
            }
            None => limit,
        };
        let (sources, joins) = self.bind(&select.from)?;

        // Conditions: WHERE's conjuncts, and each join's ON.
        let conjuncts = match &select.selection {
            Some(selection) => split_and(self.compile(&sources, selection, None)?),
            None => Vec::new(),
        };
        let ons = joins
            .iter()
            .map(|(_, on)| on.as_ref().map(|on| self.compile(&sources, on, None)).transpose())
            .collect::<Result<Vec<_>>>()?;

        // Grouping and projection.
        let mut aggregates = Vec::new();
        let group_by = match &select.group_by {
            ast::GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => {
                exprs.iter().map(|e| self.compile(&sources, e, None)).collect::<Result<Vec<_>>>()?
            }
            _ => return Err(SqlError::unsupported("GROUP BY ALL or GROUP BY modifiers")),
        };
        let items = self.projection(&sources, &select.projection, &mut aggregates)?;
        let having = select.having.as_ref().map(|h| self.compile(&sources, h, Some(&mut aggregates))).transpose()?;
        let order = self.order(&sources, order, &items, &mut aggregates)?;
        let grouped = !group_by.is_empty() || !aggregates.is_empty();
        let distinct = match &select.distinct {
            None | Some(ast::Distinct::All) => false,
            Some(ast::Distinct::Distinct) => true,
            Some(ast::Distinct::On(_)) => return Err(SqlError::unsupported("DISTINCT ON")),
        };
        let named =
            self.require_reads(&sources, &conjuncts, &ons, &group_by, &items, having.as_ref(), &order, &aggregates)?;
        // A table no `*` covers is read for the attributes the statement names, not
        // decoded whole (core reads a lone indexed join key from its index alone).
        let mut sources = sources;
        for (at, (source, names)) in sources.iter_mut().zip(named).enumerate() {
            let covered = items.iter().any(|item| matches!(item, Item::Wildcard(which) if which.contains(&at)));
            if !covered && source.table().is_some() {
                source.read = Select::Attributes(names);
            }
        }

        // A single table whose every condition core answers exactly can stream in
        // index order, reading only the rows the page needs.
        let streamable = sources.len() == 1 && !grouped && !distinct && having.is_none();
        let pushed = pushdown(&conjuncts, 0);
        // Core sorts what no index orders by holding up to twice its window, outside
        // the statement's budget: it gets the sort only with a LIMIT that bounds that.
        let window_bounded = limit.is_some_and(|l| l.saturating_add(offset) <= CORE_SORT_WINDOW);
        let sort_pushed =
            streamable && window_bounded && sources[0].table().is_some() && pushed.exact && order_pushable(&order);
        let now = self.now;
        let passes = |row: &Row| -> Result<bool> {
            let env = Env { row, aggregates: &[], now };
            conjuncts.iter().try_fold(true, |all, c| Ok(all && c.holds(&env)?))
        };
        let mut grouper = grouped.then(|| Grouper::new(&group_by, &aggregates, now));
        let mut kept: Vec<Row> = Vec::new();
        // With no order, grouping or DISTINCT, the page is the first rows that pass:
        // the scan (or the last join) stops once it has handed them over.
        let page_end = match (grouped || distinct || having.is_some() || !order.is_empty(), limit) {
            (false, Some(limit)) => Some(limit.saturating_add(offset)),
            _ => None,
        };
        let more_wanted = |kept: &[Row]| page_end.is_none_or(|end| kept.len() < end);
        if sources.is_empty() {
            // A calculation (`SELECT 1 + 1`): one row that reads no table.
            let row = Row::default();
            if passes(&row)? {
                match grouper.as_mut() {
                    Some(grouper) => grouper.push(row, &mut self.budget)?,
                    None => kept.push(row),
                }
            }
        } else if joins.is_empty() {
            // One source: rows are filtered (and grouped) as the scan hands them
            // over, so only the rows kept (or the groups) are held.
            let (keys, window) = if sort_pushed {
                let keys = order
                    .iter()
                    .map(|(key, descending)| match key {
                        OrderKey::Expr(Expr::Column(c)) => {
                            Ok(SortKey { attribute: c.name.clone(), descending: *descending })
                        }
                        _ => Err(SqlError::invalid("an ORDER BY key changed while planning")),
                    })
                    .collect::<Result<Vec<_>>>()?;
                (keys, limit.map(|l| l.saturating_add(offset)))
            } else {
                (Vec::new(), None)
            };
            let mut budget = self.budget;
            self.scan_each(&sources[0], pushed.conditions, keys, window, &mut |record| {
                let row = Row { sources: vec![Some(record)] };
                if !passes(&row)? {
                    return Ok(true);
                }
                match grouper.as_mut() {
                    Some(grouper) => grouper.push(row, &mut budget)?,
                    None => {
                        budget.charge(row.sources.iter().flatten().map(|r| weight(r)).sum())?;
                        kept.push(row);
                    }
                }
                Ok(more_wanted(&kept))
            })?;
            self.budget = budget;
        } else {
            let mut rows: Vec<Row> = self
                .scan(&sources[0], pushed.conditions, Vec::new(), None)?
                .into_iter()
                .map(|record| Row { sources: vec![Some(record)] })
                .collect();
            // Every join but the last hands its rows to the next; the last hands
            // each row straight to the filter and the grouper, so a grouped join
            // holds its groups, not its rows.
            let last = joins.len();
            for (at, (kind, _)) in joins.iter().enumerate() {
                let at = at + 1;
                let on = ons[at - 1].as_ref();
                // A held row is charged its slots: its records were charged when read.
                let row_weight = (at + 1) * std::mem::size_of::<Option<Arc<Object>>>() + std::mem::size_of::<Row>();
                if at < last {
                    let mut next = Vec::new();
                    self.join(&sources, rows, at, *kind, on, &conjuncts, true, &mut |row, budget| {
                        budget.charge(row_weight)?;
                        next.push(row);
                        Ok(ControlFlow::Continue(()))
                    })?;
                    rows = next;
                } else {
                    let keeps_rows = grouper.is_none();
                    self.join(
                        &sources,
                        std::mem::take(&mut rows),
                        at,
                        *kind,
                        on,
                        &conjuncts,
                        keeps_rows,
                        &mut |row, budget| {
                            if passes(&row)? {
                                match grouper.as_mut() {
                                    Some(grouper) => grouper.push(row, budget)?,
                                    None => {
                                        budget.charge(row_weight)?;
                                        kept.push(row);
                                    }
                                }
                            }
                            Ok(if more_wanted(&kept) { ControlFlow::Continue(()) } else { ControlFlow::Break(()) })
                        },
                    )?;
                }
            }
        }
        let groups: Vec<Grouped> = match grouper {
            Some(grouper) => grouper.finish(),
            None => kept.into_iter().map(|row| Grouped { row, aggregates: Vec::new() }).collect(),
        };

        let mut out: Vec<(Object, Vec<Value>)> = Vec::with_capacity(groups.len());
        for group in &groups {
            let env = Env { row: &group.row, aggregates: &group.aggregates, now: self.now };
            if let Some(having) = &having
                && !having.holds(&env)?
            {
                continue;
            }
            let object = project(&sources, &items, &env)?;
            let keys = order
                .iter()
                .map(|(key, _)| match key {
                    OrderKey::Expr(e) => e.eval(&env),
                    OrderKey::Output(name) => Ok(object.get(name).cloned().unwrap_or(Value::Null)),
                })
                .collect::<Result<Vec<_>>>()?;
            // The answer's rows are held until they are sorted and paged.
            self.charge(weight(&object))?;
            out.push((object, keys));
        }
        drop(groups);
        if distinct {
            let mut seen = HashSet::new();
            let mut kept = Vec::with_capacity(out.len());
            for (object, keys) in out {
                let key = Value::Object(object.clone()).to_msgpack();
                self.charge(key.len() + 32)?;
                if seen.insert(key) {
                    kept.push((object, keys));
                }
            }
            out = kept;
        }
        if !order.is_empty() && !sort_pushed {
            out.sort_by(|(_, a), (_, b)| {
                for (at, (_, descending)) in order.iter().enumerate() {
                    let ordering = ops::sort_order(&a[at], &b[at]);
                    let ordering = if *descending { ordering.reverse() } else { ordering };
                    if ordering.is_ne() {
                        return ordering;
                    }
                }
                std::cmp::Ordering::Equal
            });
        }
        let rows = out.into_iter().skip(offset).take(limit.unwrap_or(usize::MAX)).map(|(object, _)| object).collect();
        Ok(Rows { rows })
    }

    /// Binds `FROM`: its sources in order, and how each after the first joins (none
    /// for a calculation without `FROM`).
    fn bind(&mut self, from: &[ast::TableWithJoins]) -> Result<(Vec<Source>, Joins)> {
        let mut sources = Vec::new();
        let mut joins = Vec::new();
        for (at, item) in from.iter().enumerate() {
            sources.push(self.source(&item.relation)?);
            if at > 0 {
                joins.push((JoinKind::Cross, None));
            }
            for join in &item.joins {
                use ast::JoinOperator as J;
                let (kind, constraint) = match &join.join_operator {
                    J::Join(c) | J::Inner(c) => (JoinKind::Inner, c),
                    J::Left(c) | J::LeftOuter(c) => (JoinKind::Left, c),
                    J::Right(c) | J::RightOuter(c) => (JoinKind::Right, c),
                    J::FullOuter(c) => (JoinKind::Full, c),
                    J::CrossJoin(c) => (JoinKind::Cross, c),
                    _ => return Err(SqlError::unsupported(format!("the join `{join}`"))),
                };
                let on = match constraint {
                    ast::JoinConstraint::On(on) => Some(on.clone()),
                    ast::JoinConstraint::None => None,
                    _ => {
                        return Err(SqlError::unsupported(format!(
                            "the join `{join}` (name its columns with ON instead of USING or NATURAL)"
                        )));
                    }
                };
                if on.is_none() && kind != JoinKind::Cross {
                    return Err(SqlError::invalid("a join other than CROSS JOIN needs ON"));
                }
                sources.push(self.source(&join.relation)?);
                joins.push((kind, on));
            }
        }
        let mut aliases = HashSet::new();
        for source in &sources {
            if !aliases.insert(source.alias.as_str()) {
                return Err(SqlError::invalid(format!(
                    "the table name or alias '{}' appears twice in FROM; give each an alias",
                    source.alias
                )));
            }
        }
        Ok((sources, joins))
    }

    fn source(&mut self, factor: &ast::TableFactor) -> Result<Source> {
        match factor {
            ast::TableFactor::Table { name, alias, args: None, .. } => {
                let (table, snapshot) = self.table(name)?;
                let schema = table.schema().clone();
                let mut columns: Vec<String> = schema.attributes.iter().map(|a| a.name.clone()).collect();
                if !columns.contains(&schema.primary_key) {
                    columns.push(schema.primary_key.clone());
                }
                Ok(Source {
                    read: Select::All,
                    alias: alias.as_ref().map_or_else(|| schema.name.clone(), |a| a.name.value.clone()),
                    qualified: Some(format!("{}.{}", schema.database, schema.name)),
                    columns,
                    kind: SourceKind::Table { table, snapshot },
                })
            }
            ast::TableFactor::Derived { subquery, alias, lateral: false, .. } => {
                let Some(alias) = alias else {
                    return Err(SqlError::invalid("a subquery in FROM needs an alias"));
                };
                let rows = self.query(subquery)?;
                let mut columns: Vec<String> = Vec::new();
                for row in &rows.rows {
                    for key in row.keys() {
                        if !columns.contains(key) {
                            columns.push(key.clone());
                        }
                    }
                }
                Ok(Source {
                    read: Select::All,
                    alias: alias.name.value.clone(),
                    qualified: None,
                    columns,
                    kind: SourceKind::Derived { rows: rows.rows.into_iter().map(Arc::new).collect() },
                })
            }
            other => Err(SqlError::unsupported(format!("the FROM item {other}"))),
        }
    }

    fn projection(
        &mut self,
        sources: &[Source],
        projection: &[ast::SelectItem],
        aggregates: &mut Vec<Aggregate>,
    ) -> Result<Vec<Item>> {
        projection
            .iter()
            .map(|item| {
                Ok(match item {
                    ast::SelectItem::Wildcard(_) => Item::Wildcard((0..sources.len()).collect()),
                    ast::SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(name), _) => {
                        let name = name.to_string();
                        let at = sources
                            .iter()
                            .position(|s| s.alias == name || s.qualified.as_deref() == Some(name.as_str()))
                            .ok_or_else(|| SqlError::invalid(format!("unknown table or alias '{name}' in {name}.*")))?;
                        Item::Wildcard(vec![at])
                    }
                    ast::SelectItem::UnnamedExpr(expr) => {
                        let compiled = self.compile(sources, expr, Some(aggregates))?;
                        Item::Expr(compiled, column_name(expr))
                    }
                    ast::SelectItem::ExprWithAlias { expr, alias } => {
                        Item::Expr(self.compile(sources, expr, Some(aggregates))?, alias.value.clone())
                    }
                    other => return Err(SqlError::unsupported(format!("the select item {other}"))),
                })
            })
            .collect()
    }

    /// ORDER BY keys: an output column's name or position, else an expression.
    fn order(
        &mut self,
        sources: &[Source],
        order: &[ast::OrderByExpr],
        items: &[Item],
        aggregates: &mut Vec<Aggregate>,
    ) -> Result<Vec<(OrderKey, bool)>> {
        order
            .iter()
            .map(|key| {
                if key.options.nulls_first.is_some() {
                    return Err(SqlError::unsupported("NULLS FIRST/LAST"));
                }
                let descending = matches!(key.options.sort, Some(ast::OrderBySort::Desc));
                let named = |name: &str| {
                    items.iter().find_map(|item| match item {
                        Item::Expr(e, column) if column == name => Some(e.clone()),
                        _ => None,
                    })
                };
                let resolved = match &key.expr {
                    ast::Expr::Value(ast::ValueWithSpan { value: ast::Value::Number(n, _), .. }) => {
                        let at: usize = n
                            .parse()
                            .map_err(|_| SqlError::invalid(format!("ORDER BY {n} is not a column position")))?;
                        match at.checked_sub(1).and_then(|i| items.get(i)) {
                            Some(Item::Expr(e, _)) => OrderKey::Expr(e.clone()),
                            _ => return Err(SqlError::invalid(format!("ORDER BY {n}: there is no column {n}"))),
                        }
                    }
                    ast::Expr::Identifier(ident) if named(&ident.value).is_some() => match named(&ident.value) {
                        Some(Expr::Column(c)) => OrderKey::Expr(Expr::Column(c)),
                        _ => OrderKey::Output(ident.value.clone()),
                    },
                    expr => OrderKey::Expr(self.compile(sources, expr, Some(aggregates))?),
                };
                Ok((resolved, descending))
            })
            .collect()
    }

    /// Refuses the statement unless the reader may read every attribute it names in
    /// each table (projection, conditions, joins, grouping, ordering); `*` reads
    /// what the role may see. Answers the attributes named, per source.
    #[allow(clippy::too_many_arguments)]
    fn require_reads(
        &self,
        sources: &[Source],
        conjuncts: &[Expr],
        ons: &[Option<Expr>],
        group_by: &[Expr],
        items: &[Item],
        having: Option<&Expr>,
        order: &[(OrderKey, bool)],
        aggregates: &[Aggregate],
    ) -> Result<Vec<Vec<String>>> {
        let mut named: Vec<Vec<String>> = vec![Vec::new(); sources.len()];
        let mut note = |e: &Expr| {
            e.visit(&mut |inner| {
                if let Expr::Column(c) = inner
                    && !named[c.source].contains(&c.name)
                {
                    named[c.source].push(c.name.clone());
                }
            })
        };
        conjuncts.iter().for_each(&mut note);
        ons.iter().flatten().for_each(&mut note);
        group_by.iter().for_each(&mut note);
        having.into_iter().for_each(&mut note);
        for item in items {
            if let Item::Expr(e, _) = item {
                note(e);
            }
        }
        for (key, _) in order {
            if let OrderKey::Expr(e) = key {
                note(e);
            }
        }
        aggregates.iter().filter_map(|a| a.arg.as_ref()).for_each(&mut note);
        for (source, names) in sources.iter().zip(&named) {
            if let Some(table) = source.table() {
                let access = table.access(self.ctx, &[lyre_core::access::Action::Read])?;
                access.require_attributes(
                    names.iter().map(String::as_str),
                    &[lyre_core::access::Action::Read],
                    &table.schema().primary_key,
                )?;
            }
        }
        Ok(named)
    }

    /// Hands each record of a source matching `conditions` (every one of a derived
    /// source) to `each`, sorted by `sort` when given, at most `window` of them;
    /// `each` answers whether to go on.
    fn scan_each(
        &mut self,
        source: &Source,
        conditions: Vec<Condition>,
        sort: Vec<SortKey>,
        window: Option<usize>,
        each: &mut dyn FnMut(Arc<Object>) -> Result<bool>,
    ) -> Result<()> {
        match &source.kind {
            SourceKind::Derived { rows } => {
                for row in rows {
                    if !each(row.clone())? {
                        break;
                    }
                }
                Ok(())
            }
            SourceKind::Table { table, snapshot } => {
                let query = Query {
                    operator: Operator::And,
                    conditions,
                    sort,
                    limit: window,
                    select: source.read.clone(),
                    ..Query::default()
                };
                let search = table.search_in(self.ctx, query, snapshot)?;
                self.plan.push(format!("{}: {}", source.alias, search.explain()));
                let mut failed = None;
                search.run(&mut |value| {
                    let Value::Object(record) = value else { return ControlFlow::Continue(()) };
                    match each(Arc::new(record)) {
                        Ok(true) => ControlFlow::Continue(()),
                        Ok(false) => ControlFlow::Break(()),
                        Err(err) => {
                            failed = Some(err);
                            ControlFlow::Break(())
                        }
                    }
                })?;
                failed.map_or(Ok(()), Err)
            }
        }
    }

    /// Every record [`Statement::scan_each`] would hand over, charged to the budget.
    fn scan(
        &mut self,
        source: &Source,
        conditions: Vec<Condition>,
        sort: Vec<SortKey>,
        window: Option<usize>,
    ) -> Result<Vec<Arc<Object>>> {
        let mut records = Vec::new();
        let mut budget = self.budget;
        self.scan_each(source, conditions, sort, window, &mut |record| {
            budget.charge(weight(&record))?;
            records.push(record);
            Ok(true)
        })?;
        self.budget = budget;
        Ok(records)
    }

    /// Joins source `at` to `rows` (which hold sources `0..at`), handing each joined
    /// row to `emit` with the statement's budget (to charge what it keeps) until it
    /// answers `Break`. Unless `emit` `keeps_rows`, the records a lookup batch
    /// fetched are freed, and given back to the budget, once the batch is joined.
    #[allow(clippy::too_many_arguments)]
    fn join(
        &mut self,
        sources: &[Source],
        rows: Vec<Row>,
        at: usize,
        kind: JoinKind,
        on: Option<&Expr>,
        conjuncts: &[Expr],
        keeps_rows: bool,
        emit: &mut dyn FnMut(Row, &mut Budget) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let source = &sources[at];
        let on_parts = on.map(|on| split_and(on.clone())).unwrap_or_default();
        // WHERE's conditions on this source alone narrow its scan (they reject
        // NULLs, so an outer join's unmatched rows fail them after the join too).
        let pushed = pushdown(conjuncts, at);
        let mut inner_conditions = pushed.conditions;
        if !kind.keeps_unmatched_inner() {
            inner_conditions.extend(pushdown(&on_parts, at).conditions);
        }
        let key = equi_key(&on_parts, at);
        let now = self.now;
        let holds = |on: Option<&Expr>, row: &Row| -> Result<bool> {
            match on {
                Some(on) => on.holds(&Env { row, aggregates: &[], now }),
                None => Ok(true),
            }
        };
        let extend = |row: &Row, record: Option<Arc<Object>>| {
            let mut sources = row.sources.clone();
            sources.push(record);
            Row { sources }
        };
        match (&key, kind) {
            // Look each outer key up in an index of this table.
            (Some((outer, column)), JoinKind::Inner | JoinKind::Left) if source.indexes(column) => {
                let SourceKind::Table { table, snapshot } = &source.kind else {
                    return Err(SqlError::invalid("an indexed join needs a table"));
                };
                self.plan.push(format!("{}: lookup by {column} for each row", source.alias));
                // The keys of up to LOOKUP_BATCH rows are looked up in one search (a
                // union of index ranges), then matched to their rows by hash.
                for chunk in rows.chunks(LOOKUP_BATCH) {
                    let keys = chunk
                        .iter()
                        .map(|row| {
                            let value = outer.eval(&Env { row, aggregates: &[], now })?;
                            Ok((value.as_key().is_some() && !matches!(value, Value::Null)).then_some(value))
                        })
                        .collect::<Result<Vec<Option<Value>>>>()?;
                    let mut distinct: HashMap<Vec<u8>, Value> = HashMap::new();
                    for key in keys.iter().flatten() {
                        distinct.entry(hash_key(key)).or_insert_with(|| key.clone());
                    }
                    let mut found: HashMap<Vec<u8>, Vec<Arc<Object>>> = HashMap::new();
                    let mut fetched = 0usize;
                    if !distinct.is_empty() {
                        let equals = |value: Value| Condition::Compare {
                            attribute: column.clone(),
                            comparator: Comparator::Equals,
                            value,
                        };
                        let mut conditions = inner_conditions.clone();
                        let mut values: Vec<Value> = distinct.into_values().collect();
                        conditions.push(match values.len() {
                            1 => equals(values.remove(0)),
                            _ => Condition::Group {
                                operator: Operator::Or,
                                conditions: values.into_iter().map(equals).collect(),
                            },
                        });
                        let query = Query { conditions, select: source.read.clone(), ..Query::default() };
                        let mut records = Vec::new();
                        table.search_in(self.ctx, query, snapshot)?.run(&mut |value| {
                            if let Value::Object(record) = value {
                                fetched = fetched.saturating_add(weight(&record));
                                records.push(Arc::new(record));
                            }
                            ControlFlow::Continue(())
                        })?;
                        self.charge(fetched)?;
                        for record in records {
                            // A list value matches each of its elements, as the index does.
                            match record.get(column.as_str()) {
                                Some(Value::Array(items)) => {
                                    for item in items {
                                        found.entry(hash_key(item)).or_default().push(record.clone());
                                    }
                                }
                                Some(value) => found.entry(hash_key(value)).or_default().push(record.clone()),
                                None => {}
                            }
                        }
                    }
                    for (row, key) in chunk.iter().zip(&keys) {
                        let mut matched = false;
                        let candidates =
                            key.as_ref().and_then(|k| found.get(&hash_key(k))).map_or(&[][..], Vec::as_slice);
                        for record in candidates {
                            let joined = extend(row, Some(record.clone()));
                            if holds(on, &joined)? {
                                if emit(joined, &mut self.budget)?.is_break() {
                                    return Ok(());
                                }
                                matched = true;
                            }
                        }
                        if !matched && kind == JoinKind::Left && emit(extend(row, None), &mut self.budget)?.is_break() {
                            return Ok(());
                        }
                    }
                    if !keeps_rows {
                        self.budget.release(fetched);
                    }
                }
            }
            _ => {
                let records = self.scan(source, inner_conditions, Vec::new(), None)?;
                if key.is_none() {
                    self.plan.push(format!("{}: nested loop", source.alias));
                } else {
                    self.plan.push(format!("{}: hash join", source.alias));
                }
                // Hash this source's records by the join key when there is one.
                let mut by_key: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
                if let Some((_, column)) = &key {
                    for (i, record) in records.iter().enumerate() {
                        if let Some(value) = record.get(column).filter(|v| !matches!(v, Value::Null)) {
                            by_key.entry(hash_key(value)).or_default().push(i);
                        }
                    }
                }
                let all: Vec<usize> = (0..records.len()).collect();
                let mut matched_inner = vec![false; records.len()];
                for row in &rows {
                    let candidates: &[usize] = match &key {
                        Some((outer, _)) => {
                            let value = outer.eval(&Env { row, aggregates: &[], now })?;
                            by_key.get(&hash_key(&value)).map_or(&[], Vec::as_slice)
                        }
                        None => &all,
                    };
                    let mut matched = false;
                    for &i in candidates {
                        let joined = extend(row, Some(records[i].clone()));
                        if holds(on, &joined)? {
                            if emit(joined, &mut self.budget)?.is_break() {
                                return Ok(());
                            }
                            matched = true;
                            matched_inner[i] = true;
                        }
                    }
                    if !matched && kind.keeps_unmatched_outer() && emit(extend(row, None), &mut self.budget)?.is_break()
                    {
                        return Ok(());
                    }
                }
                if kind.keeps_unmatched_inner() {
                    for (i, record) in records.iter().enumerate() {
                        if !matched_inner[i] {
                            let mut sources = vec![None; at];
                            sources.push(Some(record.clone()));
                            if emit(Row { sources }, &mut self.budget)?.is_break() {
                                return Ok(());
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Rows grouped as they arrive: one representative row and the aggregates' states
/// per group, so a grouped scan holds its groups, not its rows.
struct Grouper<'g> {
    group_by: &'g [Expr],
    aggregates: &'g [Aggregate],
    now: f64,
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<(Row, Vec<State>)>,
}

impl<'g> Grouper<'g> {
    fn new(group_by: &'g [Expr], aggregates: &'g [Aggregate], now: f64) -> Grouper<'g> {
        Grouper { group_by, aggregates, now, index: HashMap::default(), groups: Vec::new() }
    }

    /// Adds a row to its group, charging a new group and an aggregate's growth to
    /// the statement's `budget`.
    fn push(&mut self, row: Row, budget: &mut Budget) -> Result<()> {
        let env = Env { row: &row, aggregates: &[], now: self.now };
        let key = self.group_by.iter().map(|e| e.eval(&env)).collect::<Result<Vec<_>>>()?;
        let key = Value::Array(key).to_msgpack();
        let slot = match self.index.get(&key) {
            Some(slot) => *slot,
            None => {
                let weight = key.len()
                    + 64 * (self.aggregates.len() + 1)
                    + row.sources.iter().flatten().map(|r| weight(r)).sum::<usize>();
                budget.charge(weight)?;
                self.index.insert(key, self.groups.len());
                self.groups.push((row.clone(), self.aggregates.iter().map(|_| State::default()).collect()));
                self.groups.len() - 1
            }
        };
        let mut grown = 0;
        for (state, aggregate) in self.groups[slot].1.iter_mut().zip(self.aggregates) {
            let value = match &aggregate.arg {
                None => Value::Bool(true),
                Some(arg) => arg.eval(&env)?,
            };
            grown += state.add(aggregate, value).unwrap_or(0);
        }
        budget.charge(grown)
    }

    /// The groups in the order they were first seen; without `GROUP BY`, one group
    /// even when no row came.
    fn finish(mut self) -> Vec<Grouped> {
        if self.groups.is_empty() && self.group_by.is_empty() {
            self.groups.push((Row::default(), self.aggregates.iter().map(|_| State::default()).collect()));
        }
        let aggregates = self.aggregates;
        self.groups
            .into_iter()
            .map(|(row, states)| Grouped {
                row,
                aggregates: states.into_iter().zip(aggregates).map(|(s, a)| s.finish(a.kind)).collect(),
            })
            .collect()
    }
}

/// Bytes of intermediate results a statement may hold, and holds. Copied into a
/// scan's callback and back when it ends; lent to a join's.
#[derive(Debug, Clone, Copy)]
struct Budget {
    limit: usize,
    used: usize,
}

impl Budget {
    /// Charges `bytes`; fails once the total passes the limit.
    fn charge(&mut self, bytes: usize) -> Result<()> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            return Err(SqlError::OverBudget { budget: self.limit });
        }
        Ok(())
    }

    /// Gives back `bytes` charged for something no longer held.
    fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }
}

/// An `ORDER BY` key.
enum OrderKey {
    /// An expression over the row.
    Expr(Expr),
    /// An output column, by name (an alias of a computed column).
    Output(String),
}

/// Whether core can sort by `order`: plain columns of the one table.
fn order_pushable(order: &[(OrderKey, bool)]) -> bool {
    order.iter().all(|(key, _)| matches!(key, OrderKey::Expr(Expr::Column(_))))
}

/// One aggregate's running state for one group.
#[derive(Default)]
struct State {
    /// Whether a null value reached the aggregate.
    saw_null: bool,
    /// Whether a value other than null reached it (a number or not).
    saw_value: bool,
    count: u64,
    sum: f64,
    integral: bool,
    int_sum: Option<i64>,
    best: Option<Value>,
    seen: Option<HashSet<Vec<u8>>>,
    /// The values an `ARRAY` or `GROUP_CONCAT` collects.
    values: Vec<Value>,
}

impl State {
    /// Adds a value; answers the bytes the state grew by when it keeps values.
    fn add(&mut self, aggregate: &Aggregate, value: Value) -> Option<usize> {
        if matches!(value, Value::Null) {
            self.saw_null = true;
            return None;
        }
        self.saw_value = true;
        let mut grown = None;
        if aggregate.distinct {
            let key = value.to_msgpack();
            let len = key.len();
            if !self.seen.get_or_insert_with(HashSet::new).insert(key) {
                return None;
            }
            grown = Some(len + 32);
        }
        match aggregate.kind {
            AggregateKind::Count => self.count += 1,
            AggregateKind::Sum | AggregateKind::Avg => {
                if let Some(n) = ops::number(&value) {
                    if self.count == 0 {
                        self.integral = true;
                        self.int_sum = Some(0);
                    }
                    self.count += 1;
                    self.sum += n;
                    match (&value, self.int_sum) {
                        (Value::Int(i), Some(sum)) => self.int_sum = sum.checked_add(*i),
                        _ => self.integral = false,
                    }
                }
            }
            AggregateKind::Min | AggregateKind::Max => {
                let replace = match &self.best {
                    None => true,
                    Some(best) => {
                        let ordering = ops::compare(&value, best);
                        if aggregate.kind == AggregateKind::Min {
                            ordering == Some(std::cmp::Ordering::Less)
                        } else {
                            ordering == Some(std::cmp::Ordering::Greater)
                        }
                    }
                };
                if replace {
                    self.best = Some(value);
                }
            }
            AggregateKind::Array | AggregateKind::GroupConcat => {
                let size = value.to_msgpack().len() + 32;
                self.values.push(value);
                grown = Some(grown.unwrap_or(0) + size);
            }
        }
        grown
    }

    fn finish(self, kind: AggregateKind) -> Value {
        match kind {
            AggregateKind::Count => Value::Int(i64::try_from(self.count).unwrap_or(i64::MAX)),
            // Harper answers 0 for the sum of no rows (SQL would say NULL), and
            // NULL for rows whose values are all null.
            AggregateKind::Sum if self.saw_null && !self.saw_value => Value::Null,
            AggregateKind::Sum if self.count == 0 => Value::Int(0),
            AggregateKind::Sum => match (self.integral, self.int_sum) {
                (true, Some(sum)) => Value::Int(sum),
                _ => ops::from_f64(self.sum),
            },
            AggregateKind::Avg if self.count == 0 => Value::Null,
            AggregateKind::Avg => ops::from_f64(self.sum / self.count as f64),
            AggregateKind::Min | AggregateKind::Max => self.best.unwrap_or(Value::Null),
            AggregateKind::Array => Value::Array(self.values),
            AggregateKind::GroupConcat if self.values.is_empty() => Value::Null,
            AggregateKind::GroupConcat => {
                Value::String(self.values.iter().map(ops::text).collect::<Vec<_>>().join(","))
            }
        }
    }
}

/// The projected object of one (grouped) row.
fn project(sources: &[Source], items: &[Item], env: &Env<'_>) -> Result<Object> {
    let mut object = Object::default();
    for item in items {
        match item {
            Item::Wildcard(which) => {
                for &at in which {
                    match env.row.sources.get(at).and_then(Option::as_ref) {
                        Some(record) => {
                            for (key, value) in record.iter() {
                                insert_unique(&mut object, key, value.clone());
                            }
                        }
                        None => {
                            for column in &sources[at].columns {
                                insert_unique(&mut object, column, Value::Null);
                            }
                        }
                    }
                }
            }
            // In a join a repeated name is numbered, as Harper numbers it; in one
            // table it is the same column, answered once.
            Item::Expr(expr, name) if sources.len() > 1 => insert_unique(&mut object, name, expr.eval(env)?),
            Item::Expr(expr, name) => {
                object.insert(name.clone(), expr.eval(env)?);
            }
        }
    }
    Ok(object)
}

/// Inserts `key` into a row expanded from `*`; a name an earlier table already
/// gave gets a counter (`id`, `id1`, `id2`…), as Harper names join columns.
fn insert_unique(object: &mut Object, key: &str, value: Value) {
    if !object.contains_key(key) {
        object.insert(key.to_string(), value);
        return;
    }
    let mut n = 1usize;
    while object.contains_key(&format!("{key}{n}")) {
        n += 1;
    }
    object.insert(format!("{key}{n}"), value);
}

/// The name of an unaliased output column, as Harper names it: a column's own name
/// (without its table), a function or aggregate as `NAME(arg,arg)` (upper-case
/// name, arguments as written without spaces, strings in double quotes, DISTINCT
/// left out); any other expression as written.
fn column_name(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Identifier(ident) => ident.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.clone()).unwrap_or_default(),
        other => written(other),
    }
}

/// An expression as Harper writes it inside a generated column name.
fn written(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Identifier(ident) => ident.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => parts.iter().map(|p| p.value.as_str()).collect::<Vec<_>>().join("."),
        ast::Expr::Value(ast::ValueWithSpan {
            value: ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s),
            ..
        }) => {
            format!("\"{s}\"")
        }
        ast::Expr::Function(function) => {
            let args = match &function.args {
                ast::FunctionArguments::List(list) => list
                    .args
                    .iter()
                    .map(|arg| match arg {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => written(e),
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => "*".to_string(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                _ => String::new(),
            };
            format!("{}({args})", function.name.to_string().to_ascii_uppercase())
        }
        other => other.to_string(),
    }
}

/// The conjuncts of an `AND` tree.
fn split_and(expr: Expr) -> Vec<Expr> {
    match expr {
        Expr::And(a, b) => {
            let mut out = split_and(*a);
            out.extend(split_and(*b));
            out
        }
        other => vec![other],
    }
}

/// Core conditions for the conjuncts that read only source `at`.
struct Pushed {
    conditions: Vec<Condition>,
    /// Every conjunct became a condition that selects exactly the same rows.
    exact: bool,
}

fn pushdown(conjuncts: &[Expr], at: usize) -> Pushed {
    let mut pushed = Pushed { conditions: Vec::new(), exact: true };
    for conjunct in conjuncts {
        let mut read = Vec::new();
        conjunct.sources(&mut read);
        // Conditions on other sources are theirs; a constant one (read by no
        // source) is the same for every row, so it never makes a page short.
        if read != [at] {
            // …unless it is volatile (`RANDOM()`), which differs row by row.
            pushed.exact &= !(read.is_empty() && conjunct.is_volatile());
            continue;
        }
        match condition(conjunct) {
            Some((condition, exact)) => {
                pushed.conditions.push(condition);
                pushed.exact &= exact;
            }
            None => pushed.exact = false,
        }
    }
    pushed
}

/// The core condition for a conjunct, and whether it is exact (else it selects a
/// superset, and the conjunct's own check narrows it).
fn condition(expr: &Expr) -> Option<(Condition, bool)> {
    let compare = |attribute: &str, comparator, value: &Value| Condition::Compare {
        attribute: attribute.to_string(),
        comparator,
        value: value.clone(),
    };
    let scalar = |value: &Value| value.as_key().is_some() && !matches!(value, Value::Null);
    match expr {
        Expr::Compare(cmp, a, b) => {
            let (column, value, cmp) = match (a.as_ref(), b.as_ref()) {
                (Expr::Column(c), Expr::Literal(v)) => (c, v, *cmp),
                (Expr::Literal(v), Expr::Column(c)) => (c, v, cmp.flipped()),
                _ => return None,
            };
            if !scalar(value) {
                return None;
            }
            let comparator = match cmp {
                Cmp::Eq => Comparator::Equals,
                Cmp::NotEq => return None,
                Cmp::Lt => Comparator::LessThan,
                Cmp::LtEq => Comparator::LessThanEqual,
                Cmp::Gt => Comparator::GreaterThan,
                Cmp::GtEq => Comparator::GreaterThanEqual,
            };
            // Core compares in index order (NULL < booleans < numbers < strings), as
            // `ops::compare` does, except that its `<` and `<=` also match NULL,
            // which SQL's do not: those select a superset the check narrows.
            Some((compare(&column.name, comparator, value), matches!(cmp, Cmp::Eq | Cmp::Gt | Cmp::GtEq)))
        }
        Expr::Between(subject, low, high, false) => match (subject.as_ref(), low.as_ref(), high.as_ref()) {
            // Exact: a low bound above NULL keeps NULL out on both sides.
            (Expr::Column(c), Expr::Literal(l), Expr::Literal(h)) if scalar(l) && scalar(h) => {
                Some((compare(&c.name, Comparator::Between, &Value::Array(vec![l.clone(), h.clone()])), true))
            }
            _ => None,
        },
        Expr::InList(subject, list, false) => {
            let Expr::Column(c) = subject.as_ref() else { return None };
            let values: Option<Vec<Condition>> = list
                .iter()
                .map(|item| match item {
                    Expr::Literal(v) if scalar(v) => Some(compare(&c.name, Comparator::Equals, v)),
                    _ => None,
                })
                .collect();
            let values = values.filter(|v| !v.is_empty() && v.len() <= 1_000)?;
            Some((Condition::Group { operator: Operator::Or, conditions: values }, true))
        }
        Expr::Like(subject, pattern, false) => {
            let Expr::Column(c) = subject.as_ref() else { return None };
            let conditions = pattern
                .prefixes()?
                .into_iter()
                .map(|prefix| compare(&c.name, Comparator::StartsWith, &Value::String(prefix)))
                .collect();
            Some((Condition::Group { operator: Operator::Or, conditions }, false))
        }
        _ => None,
    }
}

/// The equi-join key of `on`: an expression over earlier sources equal to a column
/// of source `at`.
fn equi_key(on: &[Expr], at: usize) -> Option<(Expr, String)> {
    on.iter().find_map(|part| {
        let Expr::Compare(Cmp::Eq, a, b) = part else { return None };
        for (mine, other) in [(a, b), (b, a)] {
            if let Expr::Column(c) = mine.as_ref()
                && c.source == at
            {
                let mut read = Vec::new();
                other.sources(&mut read);
                if !read.is_empty() && read.iter().all(|s| *s < at) {
                    return Some((other.as_ref().clone(), c.name.clone()));
                }
            }
        }
        None
    })
}

/// A join key's hash-table key: equal keys under SQL's `=` hash alike (integral
/// floats as integers).
fn hash_key(value: &Value) -> Vec<u8> {
    match value {
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::Int(*f as i64).to_msgpack(),
        other => other.to_msgpack(),
    }
}

/// Roughly the memory a record takes (its keys, values and map overhead).
fn weight(record: &Object) -> usize {
    fn value(v: &Value) -> usize {
        std::mem::size_of::<Value>()
            + match v {
                Value::String(s) => s.len(),
                Value::Bytes(b) => b.len(),
                Value::Array(items) => items.iter().map(value).sum(),
                Value::Object(o) => weight(o),
                _ => 0,
            }
    }
    record.iter().map(|(k, v)| k.len() + 16 + value(v)).sum::<usize>() + 64
}

/// Refuses the parts of `SELECT` Lyre does not run, naming them.
fn refuse_unsupported(select: &ast::Select) -> Result<()> {
    let refused = [
        (
            select.top.as_ref().is_some_and(|top| top.percent || top.with_ties || top.quantity.is_none()),
            "TOP PERCENT or WITH TIES",
        ),
        (select.into.is_some(), "SELECT INTO"),
        (!select.lateral_views.is_empty(), "LATERAL VIEW"),
        (select.prewhere.is_some(), "PREWHERE"),
        (!select.named_window.is_empty(), "WINDOW"),
        (select.qualify.is_some(), "QUALIFY"),
        (!select.sort_by.is_empty(), "SORT BY"),
        (!select.cluster_by.is_empty(), "CLUSTER BY"),
        (!select.distribute_by.is_empty(), "DISTRIBUTE BY"),
    ];
    match refused.iter().find(|(present, _)| *present) {
        Some((_, what)) => Err(SqlError::unsupported(what)),
        None => Ok(()),
    }
}
