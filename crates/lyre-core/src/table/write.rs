//! Record writes: what runs before the writer (preparation) and inside it (apply).

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use lyre_store::{OwnedKey, RecordHeader, TableStore, Version, WriteTxn, decode_key};

use crate::access::{Action, Context, TableAccess};
use crate::blobs::{self, PendingBlobs};
use crate::catalog::{Attribute, AttributeSpec, CREATED_TIME, SchemaState, Stamp, TableSchema, UPDATED_TIME};
use crate::db::{CatalogChange, last_updated_key};
use crate::error::{Error, Result};
use crate::index::{IndexChanges, update_record_indexes};
use crate::record::computed::Computing;
use crate::record::entry::{Entry, decode_entry, decode_entry_replaced, encode_entry};
use crate::record::expiry::{Live, removable_from};
use crate::record::merge::{WriteMode, crdt_op, merge};
use crate::record::validate::{encode_primary_key, validate_record, validate_scalar};
use crate::table::{RecordVersion, Table};
use crate::time::iso8601;
use crate::value::{Object, Value};

/// A time stamp in the attribute's declared type: integer milliseconds for integer
/// types, an ISO-8601 string for strings, float milliseconds otherwise (as Harper).
pub(super) fn stamp_value(type_name: Option<&str>, time: f64) -> Value {
    match type_name {
        Some("Long" | "Int" | "BigInt" | "Date") => Value::Int(time.floor() as i64),
        Some("String") => Value::String(iso8601(time)),
        _ => Value::Float(time),
    }
}

/// The outcome of an insert, update or upsert.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteSummary {
    /// Primary keys written, in request order (generated keys included).
    pub written: Vec<Value>,
    /// Primary keys skipped (existing on insert, missing on update).
    pub skipped: Vec<Value>,
    /// Attributes this write added to a dynamic table, in first-seen order.
    pub new_attributes: Vec<String>,
    /// The transaction's version (f64 ms).
    pub txn_time: f64,
}

/// The outcome of a delete.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteSummary {
    /// Primary keys deleted.
    pub deleted: Vec<Value>,
    /// Primary keys that matched no record.
    pub skipped: Vec<Value>,
    /// The transaction's version (f64 ms).
    pub txn_time: f64,
}

/// A condition checked by the writer before the write (compare-and-set): if it does
/// not hold, nothing in the batch is written and the write fails with 412.
#[derive(Clone)]
pub enum Expect {
    /// The record exists (`If-Match: *`).
    Exists,
    /// The record exists and its current version satisfies the test (an ETag
    /// comparison, or a version the client read). A record whose version is not
    /// unique never satisfies it: its content may differ under the same version.
    Version(Arc<dyn Fn(RecordVersion) -> bool + Send + Sync>),
    /// What is stored under the key, expired or not, is still what was seen:
    /// `Some(time)` the record at that (unique) version, `None` no record at all.
    /// How a caching table keeps an origin's answer only if nothing wrote or
    /// removed the record while it was being fetched.
    Unchanged(Option<f64>),
}

impl Expect {
    /// Whether [`Expect::Unchanged`]`(seen)` holds for what is stored now (its
    /// version, expired or not, or `None`): the writer's check, and a caching
    /// table's before it takes an origin's 304 as being about the copy it holds.
    pub fn unchanged_holds(seen: Option<f64>, stored: Option<RecordVersion>) -> bool {
        match (seen, stored) {
            (None, None) => true,
            (Some(time), Some(version)) => version.unique && version.time == time,
            _ => false,
        }
    }
}

impl std::fmt::Debug for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expect::Exists => "Exists",
            Expect::Version(_) => "Version(..)",
            Expect::Unchanged(_) => "Unchanged(..)",
        })
    }
}

/// Options of a write beyond its records.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Per record (aligned with the records), a condition to check first.
    pub expect: Vec<Option<Expect>>,
    /// Apply the write at this version and node instead of a fresh one: how a
    /// replicated (or origin) write arrives. Redelivering the same version and node
    /// to the same record is applied once.
    pub at: Option<Version>,
}

/// A validated record waiting for the writer.
pub(crate) struct Prepared {
    /// The encoded primary key and its value; `None` when the key is to be generated.
    key: Option<(Vec<u8>, Value)>,
    record: Object,
    expect: Option<Expect>,
}

/// Validates every record before anything is queued: one bad record rejects the batch.
pub(crate) fn prepare(
    table: &TableSchema,
    mode: WriteMode,
    records: Vec<Object>,
    mut expect: Vec<Option<Expect>>,
) -> Result<Vec<Prepared>> {
    expect.resize(records.len(), None);
    records
        .into_iter()
        .zip(expect)
        .map(|(mut record, expect)| {
            check(table, mode, &record, expect.is_some())?;
            if table.has_timestamps() {
                record.shift_remove(CREATED_TIME);
                record.shift_remove(UPDATED_TIME);
            }
            let key = match record.get(&table.primary_key) {
                None | Some(Value::Null) => None,
                Some(value) => Some((encode_primary_key(value)?, value.clone())),
            };
            Ok(Prepared { key, record, expect })
        })
        .collect()
}

/// Writes the blob files the prepared records bring (values of `Blob` attributes,
/// copies of references) before their job is queued; the records then hold the
/// references. Nothing to do, and nothing spent, for records without blobs.
pub(crate) async fn store_blobs(table: &Table, prepared: &mut Vec<Prepared>) -> Result<PendingBlobs> {
    let schema = table.schema().clone();
    if !blobs::brings_blobs(&schema, prepared.iter().map(|p| &p.record)) {
        return Ok(PendingBlobs::default());
    }
    let store = table.db().blobs().clone();
    let mut taken = std::mem::take(prepared);
    let (taken, pending) = crate::task::blocking(move || {
        let pending = blobs::materialize(&store, &schema, taken.iter_mut().map(|p| &mut p.record))?;
        Ok((taken, pending))
    })
    .await?;
    *prepared = taken;
    Ok(pending)
}

/// What [`prepare`] refuses in one record, checked alone: its attributes and values,
/// and the primary key a write in `mode` (or a `conditional` one) needs.
pub(crate) fn check(table: &TableSchema, mode: WriteMode, record: &Object, conditional: bool) -> Result<()> {
    validate_record(table, record, matches!(mode, WriteMode::Insert | WriteMode::Replace))?;
    match record.get(&table.primary_key) {
        None | Some(Value::Null) if mode == WriteMode::Update => {
            Err(Error::invalid("a valid hash attribute must be provided with update record, check log for more info"))
        }
        None | Some(Value::Null) if conditional => {
            Err(Error::invalid("a conditional write needs the record's primary key"))
        }
        None | Some(Value::Null) => Ok(()),
        Some(value) => encode_primary_key(value).map(drop),
    }
}

/// Refuses a client's write to `table` while one of its derived indexes is further
/// behind than its `maxLagMilliseconds` (503, retryable). Writes replicated from
/// elsewhere (`at`) and the server's own (a caching table's source) are never
/// refused: refusing them would lose what already happened elsewhere.
fn refuse_while_lagging(table: &Table, ctx: &Context, at: Option<Version>) -> Result<()> {
    if at.is_some() || ctx.is_internal() {
        return Ok(());
    }
    table.db().derived().refuse_if_lagging(&table.schema().name)
}

/// Refuses, in the writer, a write through a handle on a table dropped since the
/// handle was resolved: a table made again under the same name is another table,
/// and a handle kept across the drop (a long load's) must not write into it.
fn require_same_table(state: &SchemaState, database: &str, name: &str, created_seq: u64) -> Result<()> {
    match state.table(name) {
        Some(table) if table.created_seq == created_seq => Ok(()),
        _ => Err(Error::TableNotFound { database: database.to_string(), table: name.to_string() }),
    }
}

/// Queues prepared records as one logical transaction and waits for its commit.
pub(crate) async fn apply(
    table: &Table,
    ctx: &Context,
    mode: WriteMode,
    records: Vec<Prepared>,
    at: Option<Version>,
    access: TableAccess,
    blobs: PendingBlobs,
) -> Result<WriteSummary> {
    let name = table.schema().name.clone();
    let created_seq = table.schema().created_seq;
    let database = table.database().to_string();
    let computing = table.db().computing();
    refuse_while_lagging(table, ctx, at)?;
    table
        .db()
        .write(ctx, mode.operation(), move |txn, state| {
            // The blob files the records name stay only if this job runs; if it
            // fails (or never runs: `blobs` is dropped with the closure) they go.
            let written = require_same_table(state, &database, &name, created_seq)
                .and_then(|()| apply_job(txn, state, &database, &name, computing, mode, records, at, access));
            let kept = blobs.settle(&written);
            written.map(|summary| (summary, kept))
        })
        .await
        .map(|(summary, _kept)| summary)
}

/// The body of [`apply`]'s writer job.
#[allow(clippy::too_many_arguments)]
fn apply_job(
    txn: &mut WriteTxn<'_, '_>,
    state: &mut SchemaState,
    database: &str,
    name: &str,
    computing: Computing,
    mode: WriteMode,
    records: Vec<Prepared>,
    at: Option<Version>,
    access: TableAccess,
) -> Result<WriteSummary> {
    if let Some(at) = at {
        txn.set_version(at);
    }
    let mut job = WriteJob::start(txn, state, database, name, computing, at.is_some())?;
    job.keep_unwritable = access.restricts_attributes().then_some(access);
    // Keys first, so the checks see the records the writes will write.
    let mut records = records;
    job.assign_keys(txn, &mut records)?;
    // Check every condition and increment before the first write (the
    // writer's contract: a job that fails after writing aborts its batch).
    for prepared in &records {
        if let (Some(expect), Some((key, id))) = (&prepared.expect, &prepared.key) {
            job.check(txn, key, id, expect)?;
        }
    }
    if records.len() > 1 {
        // A single record's sums are checked in `write_one`, before it writes.
        job.check_increments(txn, mode, &records)?;
    }
    // The last check: it records the dimensions a first vector sets.
    job.check_vector_dimensions(txn, &records)?;
    let mut summary = WriteSummary {
        written: Vec::new(),
        skipped: Vec::new(),
        new_attributes: Vec::new(),
        txn_time: txn.version().time,
    };
    for prepared in records {
        job.write_one(txn, state, mode, prepared, &mut summary)?;
    }
    job.finish(txn, state)?;
    Ok(summary)
}

/// Deletes records by primary key as one logical transaction; each may carry a
/// condition, and `at` applies the delete as a replicated write (a record written
/// after it is kept).
pub(crate) async fn delete(
    table: &Table,
    ctx: &Context,
    ids: Vec<Value>,
    options: WriteOptions,
) -> Result<DeleteSummary> {
    let WriteOptions { mut expect, at } = options;
    expect.resize(ids.len(), None);
    let keys = ids
        .into_iter()
        .zip(expect)
        .map(|(id, expect)| Ok((encode_primary_key(&id)?, id, expect)))
        .collect::<Result<Vec<_>>>()?;
    let name = table.schema().name.clone();
    let created_seq = table.schema().created_seq;
    let database = table.database().to_string();
    let computing = table.db().computing();
    refuse_while_lagging(table, ctx, at)?;
    table
        .db()
        .write(ctx, "delete", move |txn, state| {
            require_same_table(state, &database, &name, created_seq)?;
            delete_job(txn, state, &database, &name, computing, keys, at)
        })
        .await
}

/// The body of [`delete`]'s writer job: `keys` are each record's encoded key, id
/// and condition.
fn delete_job(
    txn: &mut WriteTxn<'_, '_>,
    state: &mut SchemaState,
    database: &str,
    name: &str,
    computing: Computing,
    keys: Vec<(Vec<u8>, Value, Option<Expect>)>,
    at: Option<Version>,
) -> Result<DeleteSummary> {
    if let Some(at) = at {
        txn.set_version(at);
    }
    let mut job = WriteJob::start(txn, state, database, name, computing, at.is_some())?;
    for (key, id, expect) in &keys {
        if let Some(expect) = expect {
            job.check(txn, key, id, expect)?;
        }
    }
    let mut summary = DeleteSummary { deleted: Vec::new(), skipped: Vec::new(), txn_time: txn.version().time };
    let version = txn.version();
    for (key, id, _) in keys {
        let Some(stored) = txn.get_record(&job.store, &key)? else {
            summary.skipped.push(id);
            continue;
        };
        let old = decode_entry(stored)?;
        if at.is_some() && old.version().cmp_order(&version) == std::cmp::Ordering::Greater {
            // A replicated delete older than the record's last write loses.
            summary.skipped.push(id);
            continue;
        }
        update_record_indexes(&mut job.index_changes, &job.computing, &job.table, &key, Some(&old.record), None)?;
        blobs::queue_freed(txn, &job.table.name, Some(&old.record), None)?;
        txn.delete_record(&job.store, &key)?;
        job.changed = true;
        // An expired record is removed all the same, but it was not there to delete.
        match job.is_live(&old) {
            true => summary.deleted.push(id),
            false => summary.skipped.push(id),
        }
    }
    job.finish(txn, state)?;
    Ok(summary)
}

/// Logs `message` as published to the record `key` names (which need not exist),
/// as one transaction that changes no data; returns its version. Subscribers of the
/// record receive it from the log.
/// Queues the logging of `message` to the record with key `key`; the answer
/// resolves to the message's version once it is committed.
pub(crate) async fn publish(
    table: &Table,
    ctx: &Context,
    key: Vec<u8>,
    message: Vec<u8>,
) -> Result<impl Future<Output = Result<f64>> + Send + 'static> {
    let name = table.schema().name.clone();
    let database = table.database().to_string();
    table
        .db()
        .write_queued(ctx, "publish", move |txn, _| {
            let store = txn
                .table(&name)?
                .ok_or_else(|| Error::TableNotFound { database: database.clone(), table: name.clone() })?;
            txn.log_message(&store, key, message)?;
            Ok(txn.version().time)
        })
        .await
}

/// Removes the records with these keys that are due for eviction at `now` (checked
/// again inside the job: one may have been written since the sweep found it), with
/// their index entries, as one logged transaction.
pub(crate) async fn evict(table: &Table, ctx: &Context, keys: Vec<Vec<u8>>, now: f64) -> Result<usize> {
    let name = table.schema().name.clone();
    let database = table.database().to_string();
    let computing = table.db().computing();
    table
        .db()
        .write(ctx, "expire", move |txn, state| {
            let mut job = WriteJob::start(txn, state, &database, &name, computing, false)?;
            // The table's current rule: a reload may have changed or removed it.
            let mut removed = 0;
            for key in keys {
                let Some(stored) = txn.get_record(&job.store, &key)? else { continue };
                let old = decode_entry(stored)?;
                if removable_from(&job.table, old.version().time, &old.record).is_none_or(|at| at > now) {
                    continue;
                }
                update_record_indexes(
                    &mut job.index_changes,
                    &job.computing,
                    &job.table,
                    &key,
                    Some(&old.record),
                    None,
                )?;
                blobs::queue_freed(txn, &job.table.name, Some(&old.record), None)?;
                txn.delete_record(&job.store, &key)?;
                removed += 1;
            }
            job.finish(txn, state)?;
            Ok(removed)
        })
        .await
}

/// A record reached the writer without a key (`assign_keys` gives every record one).
fn unkeyed() -> Error {
    Error::Corrupt("a record reached the writer without a key".into())
}

/// The properties of `record` that carry an increment.
fn increments(record: &Object) -> impl Iterator<Item = &String> + '_ {
    record.iter().filter(|(name, value)| matches!(crdt_op(name, value), Ok(Some(_)))).map(|(name, _)| name)
}

/// State of one write job over one table, inside the writer.
struct WriteJob {
    store: TableStore,
    table: Arc<TableSchema>,
    schema_changed: bool,
    changed: bool,
    next_generated: Option<i64>,
    index_changes: IndexChanges,
    /// The write carries its own version (replication): remember which writes were
    /// applied, so a redelivery is applied once.
    explicit: bool,
    /// The moment (ms) at which this job sees which stored records exist (expired
    /// ones do not): one moment for all its records.
    now: f64,
    /// For a role that may not change some attributes: a full replace (`PUT`) keeps
    /// their stored values, as in Harper, instead of removing what it cannot see.
    keep_unwritable: Option<TableAccess>,
    /// Computes the indexed `@computed` attributes.
    computing: Computing,
    /// What a write replacing a stored record whole reads of it ([`Self::replace_reads`]),
    /// worked out at the first such write.
    replace_reads: std::cell::OnceCell<Option<Vec<String>>>,
}

impl WriteJob {
    fn start(
        txn: &WriteTxn<'_, '_>,
        state: &SchemaState,
        database: &str,
        name: &str,
        computing: Computing,
        explicit: bool,
    ) -> Result<Self> {
        let not_found = || Error::TableNotFound { database: database.to_string(), table: name.to_string() };
        // The table may have been dropped while this write waited in the queue.
        let table = state.table(name).cloned().ok_or_else(not_found)?;
        let store = txn.table(name)?.ok_or_else(not_found)?;
        Ok(Self {
            now: if crate::record::expiry::expires(&table) { crate::time::now_ms() } else { 0.0 },
            store,
            table,
            schema_changed: false,
            changed: false,
            next_generated: None,
            index_changes: IndexChanges::default(),
            explicit,
            keep_unwritable: None,
            computing,
            replace_reads: std::cell::OnceCell::new(),
        })
    }

    /// Fails (before anything is written) unless `expect` holds for record `key`.
    fn check(&self, txn: &WriteTxn<'_, '_>, key: &[u8], id: &Value, expect: &Expect) -> Result<()> {
        let stored = self.stored(txn, key)?;
        let holds = match expect {
            Expect::Unchanged(seen) => Expect::unchanged_holds(*seen, stored.as_ref().map(RecordVersion::of)),
            Expect::Exists => stored.is_some_and(|entry| self.is_live(&entry)),
            Expect::Version(test) => stored.filter(|entry| self.is_live(entry)).is_some_and(|entry| {
                let version = RecordVersion::of(&entry);
                version.unique && test(version)
            }),
        };
        if holds {
            Ok(())
        } else {
            Err(Error::PreconditionFailed(format!(
                "record {id} does not match the expected version (If-Match); it was changed or removed"
            )))
        }
    }

    /// Adds to a replacing `body` the stored values of the attributes the writer
    /// may not change (see `keep_unwritable`).
    fn keep_unwritable(&self, mode: WriteMode, existing: Option<&Entry>, body: &mut Object) {
        let (Some(access), WriteMode::Replace, Some(entry)) = (&self.keep_unwritable, mode, existing) else { return };
        let pk = &self.table.primary_key;
        for (name, value) in &entry.record {
            if name != pk && !body.contains_key(name) && !access.may_update(name, pk) {
                body.insert(name.clone(), value.clone());
            }
        }
    }

    /// The stored record with key `key`, expired or not.
    fn stored(&self, txn: &WriteTxn<'_, '_>, key: &[u8]) -> Result<Option<Entry>> {
        txn.get_record(&self.store, key)?.map(decode_entry).transpose()
    }

    /// The stored record with key `key`, expired or not, for a write in `mode` of
    /// `body`: a write that replaces it whole decodes only what it reads of it
    /// ([`Self::replace_reads`]), the rest of it being superseded.
    fn stored_for(&self, txn: &WriteTxn<'_, '_>, key: &[u8], mode: WriteMode, body: &Object) -> Result<Option<Entry>> {
        let replaces = matches!(mode, WriteMode::Replace | WriteMode::Insert) && increments(body).next().is_none();
        let names = match replaces {
            true => self.replace_reads(txn)?,
            false => None,
        };
        let Some(stored) = txn.get_record(&self.store, key)? else { return Ok(None) };
        match names {
            Some(names) => decode_entry_replaced(stored, names, txn.version()).map(Some),
            None => decode_entry(stored).map(Some),
        }
    }

    /// The stored attributes a write that replaces a record whole reads: its indexed
    /// attributes (their old entries go), its creation stamps (they are kept) and
    /// its `@expiresAt` attribute (whether the record is there at all; a declared
    /// one is indexed too, for the sweep). `None` when the whole record must be
    /// decoded: a dynamic table (it indexes every attribute), an indexed `@computed`
    /// attribute (its code may read any), a table that has a `Blob` attribute or has
    /// held a blob (the replaced record's blobs are freed), or a role that may not
    /// change some attributes (their stored values are kept).
    fn replace_reads(&self, txn: &WriteTxn<'_, '_>) -> Result<Option<&[String]>> {
        if let Some(names) = self.replace_reads.get() {
            return Ok(names.as_deref());
        }
        let table = &self.table;
        let whole = !table.schema_defined
            || self.keep_unwritable.is_some()
            || table.computed_attributes().any(|(attribute, _)| attribute.indexed)
            || table.attributes.iter().any(|attribute| attribute.type_name.as_deref() == Some(blobs::BLOB_TYPE))
            || blobs::held_by(txn, &table.name)?;
        // `__createdtime__` is a dynamic table's, and those are decoded whole. Each
        // name once: the decode stops when it has found as many as it was given.
        let names = (!whole).then(|| {
            let read = |attribute: &Attribute| {
                attribute.indexed
                    || attribute.shape.stamp == Some(Stamp::Created)
                    || table.expires_at.as_ref() == Some(&attribute.name)
            };
            table.attributes.iter().filter(|a| !a.is_primary_key && read(a)).map(|a| a.name.clone()).collect()
        });
        Ok(self.replace_reads.get_or_init(|| names).as_deref())
    }

    /// Whether a stored record still exists for this job (it has not expired).
    fn is_live(&self, entry: &Entry) -> bool {
        Live::at(&self.table, self.now).sees(entry.version().time, &entry.record)
    }

    /// Fails when a property `names` incremented holds, in `merged`, a value outside
    /// its declared type (an `Int` past 2^31).
    fn check_sums<'n>(&self, names: impl Iterator<Item = &'n String>, merged: &Object) -> Result<()> {
        for name in names {
            let type_name = self.table.attribute(name).and_then(|a| a.type_name.as_deref());
            validate_scalar(name, type_name, merged.get(name).unwrap_or(&Value::Null))?;
        }
        Ok(())
    }

    /// Fails (before anything is written) when an increment would leave a property
    /// that is not a finite number, or outside its declared type (an `Int` past 2^31).
    /// When any record carries an increment, runs the merges the writes will run, in
    /// order, over this job's earlier results, and checks every incremented property.
    fn check_increments(&self, txn: &WriteTxn<'_, '_>, mode: WriteMode, records: &[Prepared]) -> Result<()> {
        if !records.iter().any(|prepared| increments(&prepared.record).next().is_some()) {
            return Ok(());
        }
        let version = txn.version();
        let mut written: HashMap<&[u8], Entry> = HashMap::new();
        for prepared in records {
            let Some((key, id)) = &prepared.key else { return Err(unkeyed()) };
            let earlier = written.get(key.as_slice()).cloned();
            // A replicated write applies once per key: a second one is a redelivery.
            let redelivered =
                self.explicit && (earlier.is_some() || txn.meta(&self.applied_key(key, version))?.is_some());
            let existing = match earlier {
                Some(entry) => Some(entry),
                None => self.stored(txn, key)?.filter(|entry| self.is_live(entry)),
            };
            let skipped = matches!((mode, &existing), (WriteMode::Insert, Some(_)) | (WriteMode::Update, None));
            if skipped || redelivered {
                continue;
            }
            let mut body = prepared.record.clone();
            body.shift_remove(&self.table.primary_key);
            self.keep_unwritable(mode, existing.as_ref(), &mut body);
            let merged = merge(&self.table, mode, existing.as_ref(), body, id, version)?;
            self.check_sums(increments(&prepared.record), &merged.record)?;
            let header = RecordHeader { version: merged.version.time, flags: merged.flags, node: merged.version.node };
            written.insert(key, Entry { record: merged.record, header, clock: merged.clock });
        }
        Ok(())
    }

    /// Meta key marking that the write at `version` was applied to record `key`.
    fn applied_key(&self, key: &[u8], version: Version) -> Vec<u8> {
        let mut out = format!("applied/{}/", self.table.name).into_bytes();
        out.extend_from_slice(&version.time.to_be_bytes());
        out.extend_from_slice(&version.node.to_be_bytes());
        out.push(b'/');
        out.extend_from_slice(key);
        out
    }

    /// Refuses (before anything is written) a vector whose dimensions differ from
    /// those its attribute already holds, and records the dimensions the first
    /// vector of each vector attribute sets. They are kept per incarnation of the
    /// table, in the metadata, so every writer job agrees without the index.
    fn check_vector_dimensions(&self, txn: &mut WriteTxn<'_, '_>, records: &[Prepared]) -> Result<()> {
        let vectors: Vec<&Attribute> = self.table.attributes.iter().filter(|a| a.vector.is_some()).collect();
        if vectors.is_empty() {
            return Ok(());
        }
        let incarnation = self.store.incarnation().unwrap_or(0);
        for attribute in vectors {
            let key = format!("vector-dimensions:{incarnation}:{}", attribute.id).into_bytes();
            let mut known = txn.meta(&key)?.and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
            let mut first = None;
            for prepared in records {
                let Some(Value::Array(items)) = prepared.record.get(&attribute.name) else { continue };
                let dimensions = items.len() as u32;
                match known.or(first) {
                    Some(expected) if expected != dimensions => {
                        return Err(Error::invalid(format!(
                            "the vector attribute '{}' has {dimensions} dimensions where {}.{} holds vectors of {expected}",
                            attribute.name, self.table.name, attribute.name
                        )));
                    }
                    Some(_) => {}
                    None => first = Some(dimensions),
                }
            }
            if let (None, Some(dimensions)) = (known.take(), first) {
                txn.put_meta(&key, &dimensions.to_be_bytes())?;
            }
        }
        Ok(())
    }

    fn write_one(
        &mut self,
        txn: &mut WriteTxn<'_, '_>,
        state: &mut SchemaState,
        mode: WriteMode,
        prepared: Prepared,
        summary: &mut WriteSummary,
    ) -> Result<()> {
        let Prepared { key, mut record, .. } = prepared;
        let Some((key, id)) = key else { return Err(unkeyed()) };
        if !self.table.schema_defined {
            // As Harper does, a dynamic table gains the attributes a request names
            // even from records it then skips.
            self.add_new_attributes(txn, state, &record, summary)?;
        }
        let stored = self.stored_for(txn, &key, mode, &record)?;
        // An expired record is gone for every purpose but removing its index entries.
        let existing = stored.as_ref().filter(|entry| self.is_live(entry));
        match (mode, existing) {
            (WriteMode::Insert, Some(_)) | (WriteMode::Update, None) => {
                summary.skipped.push(id);
                return Ok(());
            }
            _ => {}
        }
        let version = txn.version();
        let marker = self.explicit.then(|| self.applied_key(&key, version));
        if let Some(marker) = &marker
            && txn.meta(marker)?.is_some()
        {
            summary.skipped.push(id); // a redelivery: applied already
            return Ok(());
        }
        record.shift_remove(&self.table.primary_key);
        self.keep_unwritable(mode, existing, &mut record);
        let incremented: Vec<String> = increments(&record).cloned().collect();
        let merged = merge(&self.table, mode, existing, record, &id, version)?;
        // Before this record writes anything (earlier records were checked up front).
        self.check_sums(incremented.iter(), &merged.record)?;
        if let Some(marker) = &marker {
            txn.put_meta(marker, &[])?;
        }
        let mut new = merged.record;
        self.stamp(&mut new, existing.map(|e| &e.record), merged.version.time);
        let old = stored.as_ref().map(|e| &e.record);
        if blobs::queue_freed(txn, &self.table.name, old, Some(&new))? {
            // The table holds a blob now (code can put one in any attribute): a later
            // write of this job that replaces this record must see it to free it.
            self.replace_reads = std::cell::OnceCell::new();
        }
        let newly_multi =
            update_record_indexes(&mut self.index_changes, &self.computing, &self.table, &key, old, Some(&new))?;
        if !newly_multi.is_empty() {
            let schema = Arc::make_mut(state);
            for attribute in &newly_multi {
                schema.mark_multi_valued(&self.table.name, attribute)?;
            }
            self.refresh(state)?;
        }
        txn.put_record(&self.store, key, encode_entry(&new, merged.version, merged.flags, &merged.clock))?;
        self.changed = true;
        summary.written.push(id);
        Ok(())
    }

    /// Applies the server-set time stamps: `__createdtime__`/`__updatedtime__` in
    /// dynamic tables, `@createdTime`/`@updatedTime` attributes in declared ones.
    fn stamp(&self, record: &mut Object, existing: Option<&Object>, time: f64) {
        if self.table.has_timestamps() {
            let created = existing.and_then(|e| e.get(CREATED_TIME).cloned()).unwrap_or(Value::Float(time));
            record.shift_remove(CREATED_TIME);
            record.shift_remove(UPDATED_TIME);
            record.insert(CREATED_TIME.to_string(), created);
            record.insert(UPDATED_TIME.to_string(), Value::Float(time));
        }
        for attribute in self.table.attributes.iter().filter(|a| a.shape.stamp.is_some()) {
            let kept = match attribute.shape.stamp {
                Some(Stamp::Created) => existing.and_then(|e| e.get(&attribute.name).cloned()),
                _ => None,
            };
            let value = kept.unwrap_or_else(|| stamp_value(attribute.type_name.as_deref(), time));
            record.insert(attribute.name.clone(), value);
        }
    }

    /// Adds attributes `record` has and the table lacks (dynamic tables index them
    /// all), logging each as a catalog change before the record that brought it.
    fn add_new_attributes(
        &mut self,
        txn: &mut WriteTxn<'_, '_>,
        state: &mut SchemaState,
        record: &Object,
        summary: &mut WriteSummary,
    ) -> Result<()> {
        let missing: Vec<&String> = record.keys().filter(|k| self.table.attribute(k).is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let schema = Arc::make_mut(state);
        for name in missing {
            schema.add_attribute(
                &self.table.name,
                AttributeSpec { name: name.clone(), type_name: None, indexed: true },
            )?;
            CatalogChange::AddAttribute { attribute: name.clone(), indexed: true }.log(txn, &self.store)?;
            summary.new_attributes.push(name.clone());
        }
        self.refresh(state)
    }

    fn refresh(&mut self, state: &SchemaState) -> Result<()> {
        self.table =
            state.table(&self.table.name).cloned().ok_or_else(|| Error::Corrupt("table vanished mid-write".into()))?;
        self.schema_changed = true;
        self.replace_reads = std::cell::OnceCell::new();
        Ok(())
    }

    /// A new primary key: a UUID for string-keyed and dynamic tables, the next integer
    /// for integer-keyed ones.
    /// Gives every record without a key a generated one: the next integer above the
    /// table's largest (passing over keys other records of the job name) for numeric
    /// keys, a UUID otherwise.
    fn assign_keys(&mut self, txn: &WriteTxn<'_, '_>, records: &mut [Prepared]) -> Result<()> {
        if records.iter().all(|prepared| prepared.key.is_some()) {
            return Ok(());
        }
        let named: HashSet<Vec<u8>> = records.iter().filter_map(|p| p.key.as_ref().map(|(k, _)| k.clone())).collect();
        for prepared in records.iter_mut().filter(|prepared| prepared.key.is_none()) {
            prepared.key = Some(self.generate_key(txn, &named)?);
        }
        Ok(())
    }

    fn generate_key(&mut self, txn: &WriteTxn<'_, '_>, named: &HashSet<Vec<u8>>) -> Result<(Vec<u8>, Value)> {
        let numeric = matches!(
            self.table.primary_key_attribute().and_then(|a| a.type_name.as_deref()),
            Some("Int" | "Long" | "Any" | "Float" | "BigInt")
        );
        if !numeric {
            let id = Value::String(uuid::Uuid::new_v4().to_string());
            return Ok((encode_primary_key(&id)?, id));
        }
        let mut next = match self.next_generated {
            Some(n) => n,
            None => self.largest_integer_key(txn)?.map_or(1, |n| n.saturating_add(1)),
        };
        loop {
            let id = Value::Int(next);
            let key = encode_primary_key(&id)?;
            let following = next.checked_add(1).ok_or_else(|| Error::invalid("no integer key is left to generate"))?;
            next = following;
            if !named.contains(&key) {
                self.next_generated = Some(next);
                return Ok((key, id));
            }
        }
    }

    fn largest_integer_key(&self, txn: &WriteTxn<'_, '_>) -> Result<Option<i64>> {
        // Numbers sort before strings; the string tag bounds the numeric keys.
        let strings = lyre_store::encode_key(lyre_store::KeyValue::Str(""))?.0;
        let mut below_strings = txn.records(&self.store, (Bound::Unbounded, Bound::Excluded(&strings[..1])), true)?;
        let Some(item) = below_strings.next().transpose()? else {
            return Ok(None);
        };
        Ok(match decode_key(item.0)?.0 {
            OwnedKey::Int(n) => Some(n),
            OwnedKey::Float(f) => Some(f.floor() as i64),
            _ => None,
        })
    }

    /// Applies the index changes, persists schema changes and the table's last-write
    /// version.
    fn finish(self, txn: &mut WriteTxn<'_, '_>, state: &SchemaState) -> Result<()> {
        self.index_changes.apply(txn, &self.store)?;
        if self.schema_changed {
            txn.put_catalog(&TableSchema::catalog_key(&self.table.name), &self.table.encode()?)?;
            txn.put_catalog(crate::catalog::COUNTERS_KEY, &state.encode_counters()?)?;
        }
        if self.changed {
            txn.put_meta_at_commit(last_updated_key(&self.table.name), txn.version().time.to_be_bytes().to_vec());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_take_the_declared_type() {
        assert_eq!(stamp_value(Some("Long"), 1_700_000_000_123.75), Value::Int(1_700_000_000_123));
        assert_eq!(stamp_value(None, 5.5), Value::Float(5.5));
        assert_eq!(stamp_value(Some("String"), 1_700_000_000_123.0), Value::String("2023-11-14T22:13:20.123Z".into()));
        assert_eq!(stamp_value(Some("String"), 0.0), Value::String("1970-01-01T00:00:00.000Z".into()));
    }
}

/// One write of a transaction ([`transact`]).
#[derive(Debug, Clone)]
pub enum TransactionWrite {
    /// Replaces (or creates) the record with this id.
    Put(Value, Object),
    /// Merges into (or creates) the record with this id.
    Patch(Value, Object),
    /// Creates a record (its key generated when it has none); a key that exists
    /// fails the transaction (409).
    Create(Object),
    /// Deletes the record with this id.
    Delete(Value),
}

/// A transaction's write, checked and prepared for the writer.
enum Step {
    Write { name: String, mode: WriteMode, prepared: Vec<Prepared>, access: TableAccess },
    Delete { name: String, keys: Vec<(Vec<u8>, Value, Option<Expect>)> },
}

/// Applies `writes`, to tables of one database, in order and as one transaction
/// (Harper's `transaction()`): all of them are committed together, in one writer
/// job, or none is. Each is checked as the context it comes with, before any is
/// queued. Answers, per write: a created record's id, whether a delete removed a
/// record, or `null`.
///
/// A create whose key exists (or an earlier write of the transaction made) is
/// refused before anything is written. A write that fails only once an earlier one
/// wrote (a storage failure, an increment of a value that is not a number) fails
/// its writer batch, whose other jobs are answered with a retryable 503: nothing of
/// it is kept either way.
pub async fn transact(writes: Vec<(Context, Table, TransactionWrite)>) -> Result<Vec<Value>> {
    let Some((first_ctx, first, _)) = writes.first() else { return Ok(Vec::new()) };
    let (ctx, db) = (first_ctx.clone(), first.db().clone());
    let mut steps = Vec::with_capacity(writes.len());
    let mut blobs = Vec::new();
    for (ctx, table, write) in writes {
        if !Arc::ptr_eq(table.db(), &db) {
            return Err(Error::invalid(format!(
                "a transaction writes to one database: {}.{} is not in {}",
                table.database(),
                table.schema().name,
                db.name()
            )));
        }
        refuse_while_lagging(&table, &ctx, None)?;
        let name = table.schema().name.clone();
        let (mode, record) = match write {
            TransactionWrite::Delete(id) => {
                table.access(&ctx, &[Action::Delete])?;
                steps.push(Step::Delete { name, keys: vec![(encode_primary_key(&id)?, id, None)] });
                continue;
            }
            TransactionWrite::Put(id, body) => (WriteMode::Replace, super::with_key(table.schema(), id, body)),
            TransactionWrite::Patch(id, body) => (WriteMode::Upsert, super::with_key(table.schema(), id, body)),
            TransactionWrite::Create(body) => (WriteMode::Insert, body),
        };
        let access = table.write_access(&ctx, mode, record.keys().map(String::as_str))?;
        let mut prepared = prepare(table.schema(), mode, vec![record], Vec::new())?;
        blobs.push(store_blobs(&table, &mut prepared).await?);
        steps.push(Step::Write { name, mode, prepared, access });
    }
    let database = db.name().to_string();
    let computing = db.computing();
    db.write(&ctx, "transaction", move |txn, state| {
        let written = transaction_job(txn, state, &database, &computing, steps);
        let kept: Vec<_> = blobs.into_iter().map(|pending| pending.settle(&written)).collect();
        written.map(|answers| (answers, kept))
    })
    .await
    .map(|(answers, _kept)| answers)
}

/// Refuses, before anything is written, a create of a key that exists when it runs:
/// stored (and not expired), or written by an earlier step, and not deleted since.
fn check_creates(
    txn: &WriteTxn<'_, '_>,
    state: &SchemaState,
    database: &str,
    computing: &Computing,
    steps: &[Step],
) -> Result<()> {
    let mut exists: HashMap<(&str, &[u8]), bool> = HashMap::new();
    for step in steps {
        let (name, keys, now): (&str, Vec<&[u8]>, Option<bool>) = match step {
            Step::Write { name, mode, prepared, .. } => {
                let keys = prepared.iter().filter_map(|p| p.key.as_ref()).map(|(key, _)| key.as_slice()).collect();
                (name, keys, (*mode != WriteMode::Insert).then_some(true))
            }
            Step::Delete { name, keys } => (name, keys.iter().map(|(key, _, _)| key.as_slice()).collect(), Some(false)),
        };
        for key in keys {
            // Only a create asks whether its key exists; a put or a delete settles it.
            if now.is_none() {
                let known = match exists.get(&(name, key)) {
                    Some(known) => *known,
                    None => {
                        let job = WriteJob::start(txn, state, database, name, computing.clone(), false)?;
                        job.stored(txn, key)?.is_some_and(|entry| job.is_live(&entry))
                    }
                };
                if known {
                    // Harper's words, as `Table::create` answers.
                    return Err(Error::Conflict("Record already exists".to_string()));
                }
            }
            exists.insert((name, key), now.unwrap_or(true));
        }
    }
    Ok(())
}

/// The body of [`transact`]'s writer job.
fn transaction_job(
    txn: &mut WriteTxn<'_, '_>,
    state: &mut SchemaState,
    database: &str,
    computing: &Computing,
    steps: Vec<Step>,
) -> Result<Vec<Value>> {
    // Creates of keys that exist are refused before the first write.
    check_creates(txn, state, database, computing, &steps)?;
    let mut answers = Vec::with_capacity(steps.len());
    for step in steps {
        match step {
            Step::Write { name, mode, prepared, access } => {
                let summary = apply_job(txn, state, database, &name, computing.clone(), mode, prepared, None, access)?;
                let created = (mode == WriteMode::Insert).then(|| summary.written.into_iter().next());
                answers.push(created.flatten().unwrap_or(Value::Null));
            }
            Step::Delete { name, keys } => {
                let summary = delete_job(txn, state, database, &name, computing.clone(), keys, None)?;
                answers.push(Value::Bool(!summary.deleted.is_empty()));
            }
        }
    }
    Ok(answers)
}
