//! A planned search: the snapshot it reads, the driver the planner chose, and the
//! run that filters, orders, pages and projects the driver's records into a sink.

use std::ops::ControlFlow;
use std::sync::Arc;

use lyre_store::{ReadTxn, TableStore};

use crate::access::{Action, Context, TableAccess, check_table};
use crate::catalog::TableSchema;
use crate::db::derived::{LiveIndex, Phase};
use crate::db::{Db, Lease};
use crate::error::{Error, LifecycleError, Result};
use crate::query::ast::{Condition, Query, VectorSort};
use crate::query::driver::{Driver, Order};
use crate::query::exec::{sort_records, sort_value, walk};
use crate::query::filter::matches_all;
use crate::query::nearest::Nearest;
use crate::query::plan::{choose_driver, order_for, validate_condition, validate_sort_path};
use crate::query::related::{Related, target_table};
use crate::query::select::Select;
use crate::record::expiry::Live;
use crate::value::{Object, Value};
use crate::vector::declared::graph_of;

/// Refuses, before anything is planned, a condition through a relationship into a
/// table or attribute the searcher may not read: whether it matched would tell what
/// the role may not see. (Unknown relationships are left to validation.)
fn require_related_reads(ctx: &Context, db: &Arc<Db>, schema: &TableSchema, condition: &Condition) -> Result<()> {
    match condition {
        Condition::Compare { .. } => Ok(()),
        Condition::Group { conditions, .. } => {
            conditions.iter().try_for_each(|c| require_related_reads(ctx, db, schema, c))
        }
        Condition::Related { relationship, condition } => {
            let Some(found) = schema.relationships.iter().find(|r| &r.name == relationship) else { return Ok(()) };
            let target = target_table(db, found)?;
            let access = check_table(ctx, db.name(), &target.name, &[Action::Read])?;
            let mut inner = Vec::new();
            condition.attributes_read(&mut inner);
            access.require_attributes(inner, &[Action::Read], &target.primary_key)?;
            require_related_reads(ctx, db, &target, condition)
        }
    }
}

/// The attributes a search must decode from each record when its projection names
/// them: those its conditions, sort and projection read, and the `@expiresAt`
/// attribute. `None` (decode everything) when it returns whole records
/// or follows a relationship, whose foreign keys are not named.
fn attributes_decoded(schema: &TableSchema, query: &Query) -> Option<Vec<String>> {
    fn related(condition: &Condition) -> bool {
        match condition {
            Condition::Compare { .. } => false,
            Condition::Related { .. } => true,
            Condition::Group { conditions, .. } => conditions.iter().any(related),
        }
    }
    let projected = match &query.select {
        Select::Raw | Select::All => return None,
        Select::Attributes(names) => names.iter().map(String::as_str).collect::<Vec<_>>(),
        Select::Fields { fields, .. } => {
            if fields.iter().any(|f| schema.relationships.iter().any(|r| r.name == f.name)) {
                return None;
            }
            let mut named = query.select.attributes_named();
            if fields.iter().any(|f| f.name == "$id") {
                named.push(&schema.primary_key);
            }
            named
        }
    };
    if query.conditions.iter().any(related) || query.sort.iter().any(|key| key.attribute.contains('.')) {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    let mut conditions = Vec::new();
    query.conditions.iter().for_each(|c| c.attributes_read(&mut conditions));
    let sorted = query.sort.iter().map(|key| key.attribute.as_str());
    let always = schema.expires_at.as_deref();
    for name in projected.into_iter().chain(conditions).chain(sorted).chain(always) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Some(names)
}

pub use crate::query::exec::Sink;

/// One database's read snapshot, shared by every search of one SQL statement so
/// that all of them (and a self-join's two sides) see the same commit. Cheap to
/// clone; it pins old pages while it lives, so keep it for one statement.
#[derive(Clone)]
pub struct SharedSnapshot {
    db: Arc<Db>,
    txn: SharedTxn,
}

/// A read transaction several searches take turns on. LMDB's read transactions
/// are not `Sync`, so each search holds the lock while it plans and while it runs;
/// a statement runs its searches one after another.
type SharedTxn = Arc<parking_lot::Mutex<ReadTxn>>;

impl SharedSnapshot {
    /// A fresh snapshot of `db`.
    pub(crate) fn of(db: Arc<Db>) -> Result<SharedSnapshot> {
        let txn = Arc::new(parking_lot::Mutex::new(db.snapshot()?));
        Ok(SharedSnapshot { db, txn })
    }

    /// The database it reads.
    pub fn database(&self) -> &str {
        self.db.name()
    }

    /// The log position this snapshot reflects: every entry up to it, none after.
    pub fn log_position(&self) -> Result<crate::db::log::Cursor> {
        Ok(crate::db::log::Cursor::after(self.txn.lock().last_log_seq()?))
    }

    /// Runs `read` on the snapshot's transaction (held locked meanwhile).
    pub(crate) fn with_txn<T>(&self, read: impl FnOnce(&ReadTxn) -> Result<T>) -> Result<T> {
        read(&self.txn.lock())
    }

    /// Whether it reads `db` (the same open database, not one of the same name that
    /// was dropped and created again since).
    pub(crate) fn reads(&self, db: &Arc<Db>) -> bool {
        Arc::ptr_eq(&self.db, db)
    }
}

/// The live index a vector query sorts through: the attribute must declare one, the
/// target must have its dimensions, and the index must be serving (a query that
/// waits for it does so before planning, see `Table::index_coverage`).
fn vector_index(db: &Db, schema: &TableSchema, sort: &VectorSort) -> Result<Arc<LiveIndex>> {
    let declared = schema.attribute(&sort.attribute).and_then(|a| a.vector.as_ref());
    if declared.is_none() {
        return Err(Error::invalid(format!(
            "{}.{} has no vector index (@indexed(type: \"HNSW\")) to sort by distance",
            schema.name, sort.attribute
        )));
    }
    let index = db.derived().get(crate::vector::declared::KIND, &schema.name, &sort.attribute).ok_or_else(|| {
        Error::DerivedIndexLagging(format!(
            "the vector index on {}.{} is not loaded yet; retry later",
            schema.name, sort.attribute
        ))
    })?;
    if index.phase() != Phase::Ready {
        return Err(Error::DerivedIndexLagging(format!(
            "{} is {}; retry later",
            index.describe(),
            index.phase().name()
        )));
    }
    let dimensions = graph_of(index.read().as_ref())?.dimensions();
    if dimensions != 0 && dimensions != sort.target.len() {
        return Err(Error::invalid(format!(
            "the target vector has {} dimensions where {}.{} holds vectors of {dimensions}",
            sort.target.len(),
            schema.name,
            sort.attribute
        )));
    }
    Ok(index)
}

/// A planned search over one snapshot. `Send`: run it on a blocking thread.
pub struct Search {
    db: Arc<Db>,
    schema: Arc<TableSchema>,
    /// Names this search as a holder of its database while it lives.
    _lease: Lease,
    txn: SharedTxn,
    store: Option<TableStore>,
    driver: Driver,
    order: Order,
    query: Query,
    /// Who searches: what it may read here, and (for related records) elsewhere.
    ctx: Context,
    access: TableAccess,
    /// The attributes each record is decoded with (`None`: all of them).
    decoded: Option<Vec<String>>,
    /// The same and a vector query's vector attribute, for the records it ranks
    /// exactly.
    decoded_with_vector: Option<Vec<String>>,
    /// A vector query's index.
    vector: Option<Arc<LiveIndex>>,
}

/// `Search` is `Send` (it runs on a blocking thread), shared snapshot or not.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Search>();
};

impl Search {
    /// Validates `query` against table `schema` of `db` and picks its driver, on
    /// `snapshot` when given (else a fresh one); `lease` names the search as a holder of the database. `access`
    /// is what `ctx` may do here: the query may read only attributes it grants, and
    /// results leave out those it hides.
    pub(crate) fn plan(
        db: Arc<Db>,
        schema: Arc<TableSchema>,
        mut query: Query,
        lease: Lease,
        ctx: &Context,
        access: TableAccess,
        snapshot: Option<&SharedSnapshot>,
    ) -> Result<Search> {
        query.select = std::mem::take(&mut query.select).resolve(&schema);
        access.require_attributes(query.attributes_read(), &[Action::Read], &schema.primary_key)?;
        for condition in &query.conditions {
            require_related_reads(ctx, &db, &schema, condition)?;
        }
        for condition in &query.conditions {
            validate_condition(&db, &schema, condition)?;
        }
        for key in &query.sort {
            validate_sort_path(&db, &schema, &key.attribute, &key.attribute, 0)?;
        }
        query.select.validate(&schema)?;
        let vector = match &query.vector {
            Some(sort) => Some(vector_index(&db, &schema, sort)?),
            None => None,
        };
        let txn = match snapshot {
            Some(shared) => shared.txn.clone(),
            None => Arc::new(parking_lot::Mutex::new(db.snapshot()?)),
        };
        let reading = txn.lock();
        let store = reading.table(&schema.name)?;
        let mut driver = match &store {
            Some(store) => choose_driver(&reading, &db, store, &schema, &query)?,
            None => Driver::Keys(Vec::new()),
        };
        drop(reading);
        let order = order_for(&schema, &query, &mut driver);
        let decoded = attributes_decoded(&schema, &query);
        let decoded_with_vector = match (&decoded, &query.vector) {
            (Some(names), Some(sort)) if !names.contains(&sort.attribute) => {
                Some(names.iter().cloned().chain([sort.attribute.clone()]).collect())
            }
            _ => decoded.clone(),
        };
        Ok(Search {
            db,
            schema,
            _lease: lease,
            txn,
            store,
            driver,
            order,
            query,
            ctx: ctx.clone(),
            access,
            decoded,
            decoded_with_vector,
            vector,
        })
    }

    /// The database searched: a long-running consumer checks
    /// [`Db::is_closing`] while it waits, and stops when the database goes away.
    pub fn db(&self) -> Arc<Db> {
        self.db.clone()
    }

    /// A description of the plan, for tests and diagnostics.
    pub fn explain(&self) -> String {
        let driver = match &self.driver {
            Driver::Scan { .. } => "scan".to_string(),
            Driver::Keys(keys) => format!("keys({})", keys.len()),
            Driver::PrimaryRange { .. } => "primary-range".to_string(),
            Driver::Index { attribute, .. } => format!("index({})", attribute.name),
            Driver::SortIndex { attribute, .. } => format!("sort-index({})", attribute.name),
            Driver::Union(parts) => format!("union({})", parts.len()),
        };
        match self.order {
            Order::Natural => driver,
            Order::Sort(_) => format!("{driver}+sort"),
        }
    }

    /// Streams every result to `sink`, in order. Memory stays bounded unless the
    /// query sorts on something no index orders (then `offset + limit` records, or
    /// all matches when there is no limit, are held).
    pub fn run(self, sink: &mut Sink<'_>) -> Result<()> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        let schema = self.schema.clone();
        let computing = self.db.computing();
        let live = Live::of(&schema).decoding_only(self.decoded.as_deref()).computing(&computing);
        let txn = self.txn.lock();
        let related = Related::new(&txn, &self.db, &schema).viewed_by(&self.ctx);
        let (access, key) = (&self.access, schema.primary_key.as_str());
        let related = Some(&related);
        let query = &self.query;
        let conditions = &query.conditions;
        let operator = query.operator;
        let db = self.db.clone();
        let going_away = || Error::from(LifecycleError::Closing { database: db.name().to_string() });
        if let (Some(index), Some(sort)) = (&self.vector, &query.vector) {
            let nearest = Nearest {
                txn: &txn,
                store: &store,
                schema: &schema,
                live,
                live_with_vector: Live::of(&schema)
                    .decoding_only(self.decoded_with_vector.as_deref())
                    .computing(&computing),
                driver: &self.driver,
                query,
                vector: sort,
                index,
                related,
                access,
            };
            return nearest.run(sink);
        }
        match &self.order {
            Order::Natural => {
                let mut skip = query.offset;
                let mut remaining = query.limit.unwrap_or(usize::MAX);
                if remaining == 0 {
                    return Ok(());
                }
                let _stopped_early = walk(&txn, &store, live, &self.driver, &mut |_, record| {
                    if db.is_closing() {
                        return Err(going_away());
                    }
                    if !matches_all(operator, conditions, &record, related)? {
                        return Ok(ControlFlow::Continue(()));
                    }
                    if skip > 0 {
                        skip -= 1;
                        return Ok(ControlFlow::Continue(()));
                    }
                    if sink(access.strip_value(query.select.project_value(&schema, record, related)?, key)).is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                    remaining -= 1;
                    Ok(if remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
                })?
                .is_break();
            }
            Order::Sort(keys) => {
                let keep = query.limit.map(|l| l.saturating_add(query.offset));
                // Each match with its sort values (a related record's, for `rel.attr`).
                let mut matched: Vec<(Vec<Option<Value>>, Object)> = Vec::new();
                let _complete = walk(&txn, &store, live, &self.driver, &mut |_, record| {
                    if db.is_closing() {
                        return Err(going_away());
                    }
                    if matches_all(operator, conditions, &record, related)? {
                        let values = keys
                            .iter()
                            .map(|key| sort_value(&record, &key.attribute, related))
                            .collect::<Result<_>>()?;
                        matched.push((values, record));
                        if let Some(keep) = keep.filter(|k| matched.len() > k.saturating_mul(2).max(1024)) {
                            sort_records(&mut matched, keys);
                            matched.truncate(keep);
                        }
                    }
                    Ok(ControlFlow::Continue(()))
                })?
                .is_continue();
                sort_records(&mut matched, keys);
                let page = matched.into_iter().skip(query.offset).take(query.limit.unwrap_or(usize::MAX));
                for (_, record) in page {
                    if sink(access.strip_value(query.select.project_value(&schema, record, related)?, key)).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}
