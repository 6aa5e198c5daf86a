//! The table API: the boundary every protocol reaches data through.
//!
//! Every method takes a [`Context`] and checks it (in `access::check`) before doing
//! anything. Writes become logical transactions on the database's writer
//! ([`write`]); reads use a snapshot.

mod current;
#[cfg(test)]
mod tests;
mod write;

use std::ops::Bound;
use std::sync::{Arc, LazyLock};

use lyre_store::{ReadTxn, TableStore};

use crate::access::{Action, Context, TableAccess, check_table, require_super_user};
use crate::catalog::{CREATED_TIME, Stamp, TableSchema, TableSpec};
use crate::db::{Db, ForUser, TableStats};
use crate::error::{Error, Result};
use crate::query::{Comparator, Condition, Query, Search, Select, SharedSnapshot};
use crate::record::expiry::{self, Live};
use crate::record::validate::{self, is_primary_key_value};
use crate::record::{decode_entry, stored_record};

use crate::value::{Object, Value};
pub use current::{CurrentPage, CurrentRecord, KeyScope};

pub use crate::record::WriteMode;
pub use write::{DeleteSummary, Expect, TransactionWrite, WriteOptions, WriteSummary, transact};

/// How deep a projection [`Table::answers_one_record`] accepts may follow to-one
/// relationships (REST's own bound on relationship paths).
pub const MAX_BOUNDED_DEPTH: usize = 6;

/// Records deleted per writer job by [`Table::delete_created_before`].
pub const DELETE_CHUNK: usize = 10_000;

impl Db {
    /// A handle on table `name`, bound to the schema published now.
    pub fn table(self: &Arc<Self>, name: &str) -> Result<Table> {
        let schema = self.schema();
        let table = schema.table(name).cloned().ok_or_else(|| self.table_not_found(name))?;
        Ok(Table::new(self.clone(), table))
    }

    /// A snapshot of this database that several searches of one statement share
    /// ([`Table::search_in`]).
    pub fn shared_snapshot(self: &Arc<Self>) -> Result<SharedSnapshot> {
        SharedSnapshot::of(self.clone())
    }

    /// The table `spec` names, created first when it does not exist (a creation
    /// racing this one is fine): the server's own tables in the `system` database
    /// made on first use (jobs, status values, analytics).
    pub async fn table_or_create(self: &Arc<Self>, ctx: &Context, spec: TableSpec) -> Result<Table> {
        if self.schema().table(&spec.name).is_none() {
            let name = spec.name.clone();
            if let Err(err) = self.create_table(ctx, spec).await
                && self.schema().table(&name).is_none()
            {
                return Err(err);
            }
            return self.table(&name);
        }
        self.table(&spec.name)
    }
}

/// A handle on one table, bound to the schema it was resolved with.
#[derive(Clone)]
pub struct Table {
    db: Arc<Db>,
    schema: Arc<TableSchema>,
}

impl Table {
    pub(crate) fn new(db: Arc<Db>, schema: Arc<TableSchema>) -> Self {
        Self { db, schema }
    }

    /// The schema this handle was resolved with.
    pub fn schema(&self) -> &Arc<TableSchema> {
        &self.schema
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        self.db.name()
    }

    pub(crate) fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// This table bound to the schema published now. A handle kept for long (a
    /// service's own table) does not see the attributes a dynamic table gained
    /// after it was resolved, so a search naming one would be refused as unknown.
    pub fn current(&self) -> Result<Table> {
        self.db.table(&self.schema.name)
    }

    /// What `ctx` may do here, refused unless it may do every one of `actions`.
    pub fn access(&self, ctx: &Context, actions: &[Action]) -> Result<TableAccess> {
        check_table(ctx, self.database(), &self.schema.name, actions)
    }

    /// Inserts records; those whose primary key exists are skipped.
    pub async fn insert(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        self.write_with(ctx, WriteMode::Insert, records, WriteOptions::default()).await
    }

    /// Merges records into existing ones; records with no match are skipped.
    pub async fn update(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        self.write_with(ctx, WriteMode::Update, records, WriteOptions::default()).await
    }

    /// Merges records into existing ones, inserting those with no match.
    pub async fn upsert(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        self.write_with(ctx, WriteMode::Upsert, records, WriteOptions::default()).await
    }

    /// Deletes the records with these primary keys.
    pub async fn delete(&self, ctx: &Context, ids: Vec<Value>) -> Result<DeleteSummary> {
        self.delete_with(ctx, ids, WriteOptions::default()).await
    }

    /// Deletes the records with these primary keys, each only if its condition in
    /// `options.expect` holds at commit (else nothing is deleted: 412), and at
    /// `options.at` when given (a replicated delete loses to a later write).
    pub async fn delete_with(&self, ctx: &Context, ids: Vec<Value>, options: WriteOptions) -> Result<DeleteSummary> {
        self.access(ctx, &[Action::Delete])?;
        write::delete(self, ctx, ids, options).await
    }

    /// Writes records in `mode` with conditions and an explicit version: the general
    /// form of insert, update, upsert and put. Conditions are checked by the writer,
    /// at commit, so a record changed between a client's read and its write fails
    /// with 412 and nothing in the request is written.
    pub async fn write_with(
        &self,
        ctx: &Context,
        mode: WriteMode,
        records: Vec<Object>,
        options: WriteOptions,
    ) -> Result<WriteSummary> {
        // A record touching an attribute the role may not write refuses the request.
        let access = self.write_access(ctx, mode, records.iter().flat_map(|r| r.keys().map(String::as_str)))?;
        let mut prepared = write::prepare(&self.schema, mode, records, options.expect)?;
        let blobs = write::store_blobs(self, &mut prepared).await?;
        write::apply(self, ctx, mode, prepared, options.at, access, blobs).await
    }

    /// What `ctx` may write here in `mode`, refused unless it may set every one of
    /// the attributes `names`: insert needs insert permission, update needs update,
    /// the rest need both, on the table and on every attribute a record sets.
    fn write_access<'n>(
        &self,
        ctx: &Context,
        mode: WriteMode,
        names: impl Iterator<Item = &'n str>,
    ) -> Result<TableAccess> {
        let actions: &[Action] = match mode {
            WriteMode::Insert => &[Action::Insert],
            WriteMode::Update => &[Action::Update],
            _ => &[Action::Insert, Action::Update],
        };
        let access = self.access(ctx, actions)?;
        if access.restricts_attributes() {
            access.require_attributes(names, actions, &self.schema.primary_key)?;
        }
        Ok(access)
    }

    /// The blob files of this table's database (uploads are written there before
    /// [`Table::put_blob`] stores their reference; reads open them there).
    pub fn blobs(&self) -> &Arc<crate::blobs::BlobStore> {
        self.db().blobs()
    }

    /// Refuses, before a blob upload is read, one `ctx` could not store in
    /// attribute `attribute` of record `id` ([`Table::put_blob`]): the attribute
    /// must be a declared `Blob` the role may write.
    pub fn check_blob_write(&self, ctx: &Context, attribute: &str) -> Result<()> {
        let declared = self.schema.attribute(attribute).and_then(|a| a.type_name.as_deref());
        if declared != Some(crate::blobs::BLOB_TYPE) {
            return Err(Error::invalid(format!(
                "{}.{attribute} is not a Blob attribute; only a Blob takes an upload",
                self.schema.name
            )));
        }
        self.write_access(ctx, WriteMode::Upsert, std::iter::once(attribute)).map(drop)
    }

    /// Stores the uploaded blob `blob` as attribute `attribute` of record `id`
    /// (creating the record if absent; the blob it replaces is freed), under the
    /// conditions in `options`. The blob's file stays only if the write commits its
    /// reference.
    pub async fn put_blob(
        &self,
        ctx: &Context,
        id: Value,
        attribute: &str,
        blob: crate::blobs::PendingBlob,
        options: WriteOptions,
    ) -> Result<WriteSummary> {
        self.check_blob_write(ctx, attribute)?;
        let access = self.write_access(ctx, WriteMode::Upsert, std::iter::once(attribute))?;
        let reference = blob.reference().cloned().ok_or_else(|| Error::Corrupt("a kept blob was uploaded".into()))?;
        let mut body = Object::default();
        body.insert(attribute.to_string(), Value::Blob(Box::new(reference)));
        let records = vec![with_key(&self.schema, id, body)];
        let prepared = write::prepare(&self.schema, WriteMode::Upsert, records, options.expect)?;
        write::apply(self, ctx, WriteMode::Upsert, prepared, options.at, access, blob.into()).await
    }

    /// Publishes `message` to the record with primary key `id` without changing any
    /// data (MQTT's non-retained publish, a WebSocket message): it is logged, and
    /// every subscriber of the record receives it. Needs insert permission, as
    /// Harper's `publish` does. Returns the message's version.
    pub async fn publish(&self, ctx: &Context, id: &Value, message: &Value) -> Result<f64> {
        self.publish_queued(ctx, id, message).await?.await
    }

    /// [`Table::publish`], answering as soon as the message is queued for the
    /// writer with a future that resolves once it is committed: a client that
    /// publishes many messages (an MQTT connection) keeps their order without
    /// waiting for each commit.
    pub async fn publish_queued(
        &self,
        ctx: &Context,
        id: &Value,
        message: &Value,
    ) -> Result<impl Future<Output = Result<f64>> + Send + 'static> {
        self.access(ctx, &[Action::Insert])?;
        let key = validate::encode_primary_key(id)?;
        write::publish(self, ctx, key, message.to_msgpack()).await
    }

    /// Checks `record` as a write in `mode` would before queuing it (attribute names,
    /// declared types, the primary key), without writing: a bulk load finds the rows
    /// a batch would fail on and rejects them alone. Permissions are checked by the
    /// write itself.
    pub fn check_record(&self, mode: WriteMode, record: &Object) -> Result<()> {
        write::check(&self.schema, mode, record, false)
    }

    /// One record and the version of its last write (for ETags), if it exists.
    /// Attributes the role may not read are left out.
    pub fn get(&self, ctx: &Context, id: &Value) -> Result<Option<(Object, RecordVersion)>> {
        let access = self.access(ctx, &[Action::Read])?;
        self.lookup(id, |stored| self.visible(&access, stored))
    }

    /// One record as a read answers it, and the version of its last write: as it is
    /// stored, undecoded, when the role reads every attribute and only the record's
    /// age can hide it (what a whole-record `GET` serves); else decoded, with the
    /// attributes the role may not read left out. Either serializes to the same bytes.
    pub fn get_body(&self, ctx: &Context, id: &Value) -> Result<Option<(RecordBody, RecordVersion)>> {
        let access = self.access(ctx, &[Action::Read])?;
        let live = Live::of(&self.schema);
        self.lookup(id, |stored| self.body_of(&access, &live, stored))
    }

    /// A stored record as `access` may read it, unless it has expired for `live`:
    /// its stored bytes untouched when the role reads every attribute and the
    /// header alone settles expiry, else decoded and stripped.
    fn body_of(
        &self,
        access: &TableAccess,
        live: &Live<'_>,
        stored: &[u8],
    ) -> Result<Option<(RecordBody, RecordVersion)>> {
        // Stored bytes lack computed attributes a whole record carries.
        let carries_computed = self.schema.computed_attributes().any(|(_, c)| c.enumerable);
        if !access.restricts_attributes() && !carries_computed {
            let (header, record) = stored_record(stored)?;
            match live.sees_version(header.version) {
                Some(false) => return Ok(None),
                Some(true) => {
                    return Ok(Some((RecordBody::Stored(record.to_vec()), RecordVersion::from_header(&header))));
                }
                None => {}
            }
        }
        Ok(self.visible(access, stored)?.map(|(record, version)| (RecordBody::Decoded(record), version)))
    }

    /// Runs `read` on the stored bytes of the record with primary key `id`, in a
    /// fresh snapshot; `None` when there is no such record.
    fn lookup<T>(&self, id: &Value, read: impl FnOnce(&[u8]) -> Result<Option<T>>) -> Result<Option<T>> {
        crate::failpoint::hit("read-record")?;
        let key = validate::encode_primary_key(id)?;
        let txn = self.db.store().read()?;
        let Some(store) = txn.table(&self.schema.name)? else { return Ok(None) };
        let Some(stored) = txn.get_record(&store, &key)? else { return Ok(None) };
        read(stored)
    }

    /// The version `snapshot` holds of each record of `ids` (`None` where it holds
    /// none): what a statement that worked out its writes on that snapshot expects
    /// to find still stored when they are written (SQL `UPDATE` and `DELETE`).
    pub fn versions_in(&self, ids: &[Value], snapshot: &SharedSnapshot) -> Result<Vec<Option<RecordVersion>>> {
        self.require_snapshot_of_mine(snapshot, "read")?;
        snapshot.with_txn(|txn| {
            let Some(store) = txn.table(&self.schema.name)? else { return Ok(vec![None; ids.len()]) };
            ids.iter()
                .map(|id| {
                    let key = validate::encode_primary_key(id)?;
                    let Some(stored) = txn.get_record(&store, &key)? else { return Ok(None) };
                    let (header, _) = stored_record(stored)?;
                    Ok(Some(RecordVersion::from_header(&header)))
                })
                .collect()
        })
    }

    /// One record whether or not it has expired (a caching table answers a stale
    /// copy while it revalidates, or when its origin fails), without what the
    /// role may not read, with when it expires by the table's rules
    /// (`expiration`, `@expiresAt`; ms since the epoch, `None` for never).
    pub fn get_held(&self, ctx: &Context, id: &Value) -> Result<Option<HeldRecord>> {
        let access = self.access(ctx, &[Action::Read])?;
        self.lookup(id, |stored| {
            let entry = decode_entry(stored)?;
            let version = RecordVersion::of(&entry);
            let expires_at = crate::record::expiry::hidden_from(&self.schema, version.time, &entry.record);
            let mut record = entry.record;
            access.strip(&mut record, &self.schema.primary_key);
            Ok(Some(HeldRecord { record, version, expires_at }))
        })
    }

    /// `record` without the attributes `ctx`'s role may not read (for a record
    /// answered without being stored: a caching table's `no-store` fetch).
    pub fn strip_for(&self, ctx: &Context, record: &mut Object) -> Result<()> {
        self.access(ctx, &[Action::Read])?.strip(record, &self.schema.primary_key);
        Ok(())
    }

    /// A stored record decoded, unless it has expired, without what `access` may
    /// not read.
    fn visible(&self, access: &TableAccess, stored: &[u8]) -> Result<Option<(Object, RecordVersion)>> {
        let entry = decode_entry(stored)?;
        if !Live::of(&self.schema).sees(entry.version().time, &entry.record) {
            return Ok(None);
        }
        let version = RecordVersion::of(&entry);
        let mut record = entry.record;
        self.db.computing().add(&self.schema, &mut record, |_, computed| computed.enumerable)?;
        access.strip(&mut record, &self.schema.primary_key);
        Ok(Some((record, version)))
    }

    /// Replaces the record with primary key `id` by `body` (creating it if absent),
    /// under the conditions and version in `options`.
    pub async fn put(&self, ctx: &Context, id: Value, body: Object, options: WriteOptions) -> Result<WriteSummary> {
        self.write_with(ctx, WriteMode::Replace, vec![with_key(&self.schema, id, body)], options).await
    }

    /// Merges `body` into the record with primary key `id` (creating it if absent),
    /// under the conditions and version in `options`. Property values of the form
    /// `{"__op__": "add", "value": n}` increment.
    pub async fn patch(&self, ctx: &Context, id: Value, body: Object, options: WriteOptions) -> Result<WriteSummary> {
        self.write_with(ctx, WriteMode::Upsert, vec![with_key(&self.schema, id, body)], options).await
    }

    /// Creates one record; `409` when its key exists. Returns the (maybe generated) key.
    pub async fn create(&self, ctx: &Context, body: Object) -> Result<Value> {
        let summary = self.insert(ctx, vec![body]).await?;
        match summary.written.into_iter().next() {
            Some(id) => Ok(id),
            None => Err(Error::Conflict("Record already exists".to_string())),
        }
    }

    /// The records with these primary keys, in the order asked, missing ones omitted;
    /// attributes the role may not read are left out (and naming one is refused).
    pub fn get_many(&self, ctx: &Context, ids: &[Value], select: &Select) -> Result<Vec<Object>> {
        let access = self.access(ctx, &[Action::Read])?;
        let select = select.clone().resolve(&self.schema);
        access.require_attributes(select.attributes_named(), &[Action::Read], &self.schema.primary_key)?;
        select.validate(&self.schema)?;
        let txn = self.db.store().read()?;
        let Some(store) = txn.table(&self.schema.name)? else {
            return Ok(Vec::new());
        };
        let computing = self.db.computing();
        let live = Live::of(&self.schema).computing(&computing);
        // Relationship fields read the related tables in the same snapshot.
        let related = matches!(select, Select::Fields { .. })
            .then(|| crate::query::Related::new(&txn, &self.db, &self.schema).viewed_by(ctx));
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if !is_primary_key_value(id) {
                return Err(Error::invalid("'ids' must be strings or numbers"));
            }
            // A key too long to be stored names no record.
            let Ok(key) = validate::encode_primary_key(id) else { continue };
            if let Some(record) = txn.get_record(&store, &key)?.map(|stored| live.decode(stored)).transpose()?.flatten()
            {
                let mut record = match &related {
                    Some(related) => match select.project_value(&self.schema, record, Some(related))? {
                        Value::Object(projected) => projected,
                        _ => Object::default(),
                    },
                    None => select.project(&self.schema, record),
                };
                access.strip(&mut record, &self.schema.primary_key);
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Removes this table's audit log entries made before `before` (ms since the
    /// epoch), never past the slowest durable log cursor, in bounded writer jobs;
    /// returns how many changes were removed.
    pub async fn delete_audit_log_before(&self, ctx: &Context, before: f64) -> Result<u64> {
        require_super_user(ctx)?;
        let holder = format!("a log cleanup of {}.{} for {}", self.database(), self.schema.name, ctx.username());
        self.db.prune_log_before(ctx, Some(&self.schema.name), before, holder).await
    }

    /// Deletes the records created before `before` (ms since the epoch), by the
    /// table's creation stamp (`__createdtime__`, or its `@createdTime` attribute),
    /// in writer jobs of at most [`DELETE_CHUNK`] records; answers how many were
    /// deleted and how many matched. A table without a creation stamp is refused.
    pub async fn delete_created_before(&self, ctx: &Context, before: f64) -> Result<(u64, u64)> {
        self.access(ctx, &[Action::Read, Action::Delete])?;
        let (attribute, bound) = self.created_before(before).ok_or_else(|| {
            Error::invalid(
                "Table must have a '__createdtime__' attribute or @createdTime timestamp defined to perform this operation",
            )
        })?;
        let primary_key = self.schema.primary_key.clone();
        let (mut deleted, mut matched) = (0, 0);
        loop {
            let query = Query {
                conditions: vec![Condition::Compare {
                    attribute: attribute.clone(),
                    comparator: Comparator::LessThan,
                    value: bound.clone(),
                }],
                select: Select::Attributes(vec![primary_key.clone()]),
                limit: Some(DELETE_CHUNK),
                ..Query::default()
            };
            let (table, reader, key) = (self.clone(), ctx.clone(), primary_key.clone());
            let ids = crate::task::blocking(move || {
                let mut ids = Vec::new();
                table.search(&reader, query)?.run(&mut |record| {
                    if let Value::Object(mut record) = record
                        && let Some(id) = record.shift_remove(&key)
                    {
                        ids.push(id);
                    }
                    std::ops::ControlFlow::Continue(())
                })?;
                Ok(ids)
            })
            .await?;
            if ids.is_empty() {
                return Ok((deleted, matched));
            }
            let found = ids.len();
            matched += found as u64;
            let removed = self.delete(ctx, ids).await?.deleted.len();
            deleted += removed as u64;
            // A chunk of which nothing could be deleted would be found again.
            if removed == 0 || found < DELETE_CHUNK {
                return Ok((deleted, matched));
            }
        }
    }

    /// The attribute holding a record's creation time, and `before` as that
    /// attribute stores times.
    fn created_before(&self, before: f64) -> Option<(String, Value)> {
        if self.schema.has_timestamps() {
            return Some((CREATED_TIME.to_string(), Value::Float(before)));
        }
        let attribute = self.schema.attributes.iter().find(|a| a.shape.stamp == Some(Stamp::Created))?;
        Some((attribute.name.clone(), write::stamp_value(attribute.type_name.as_deref(), before)))
    }

    /// A read snapshot of this table's database and the table's storage in it (none
    /// when the snapshot predates the table), for services that walk storage (the
    /// consistency checker). Super users only.
    pub(crate) fn snapshot(&self, ctx: &Context) -> Result<(ReadTxn, Option<TableStore>)> {
        require_super_user(ctx)?;
        let txn = self.db.snapshot()?;
        let store = txn.table(&self.schema.name)?;
        Ok((txn, store))
    }

    /// One step of an expiry sweep at `now` (ms), resuming after `after`: the keys of
    /// up to `max` records looked at that are due for eviction, and where the next
    /// step resumes when more may follow. Finds nothing unless the table's records
    /// expire. A table whose only rule is `@expiresAt` is swept through that
    /// attribute's index, so a sweep reads only the records already due; one with an
    /// `expiration` (age) rule walks every record.
    pub(crate) fn evictable_keys(&self, now: f64, after: Option<&[u8]>, max: usize) -> Result<EvictionStep> {
        let mut step = EvictionStep { keys: Vec::new(), next: None };
        if !expiry::expires(&self.schema) {
            return Ok(step);
        }
        let txn = self.db.store().read()?;
        let Some(store) = txn.table(&self.schema.name)? else { return Ok(step) };
        let due = |stored: &[u8]| -> Result<bool> {
            let version = lyre_store::decode_record(stored)?.0.version;
            let due = match self.schema.expires_at {
                // Expiry by age alone: the header says, without decoding the record.
                None => self.schema.expiration.is_some_and(|e| e.is_evictable(version, now)),
                Some(_) => {
                    let record = crate::record::decode_object(stored)?;
                    expiry::removable_from(&self.schema, version, &record).is_some_and(|at| at <= now)
                }
            };
            Ok(due)
        };
        let Some(attribute) = expiry::sweep_index(&self.schema) else {
            let start = after.map_or(Bound::Unbounded, Bound::Excluded);
            let mut last: Option<&[u8]> = None;
            for (seen, item) in txn.records(&store, (start, Bound::Unbounded), false)?.enumerate() {
                let (key, stored) = item?;
                if seen == max {
                    step.next = last.map(<[u8]>::to_vec); // more follow: resume after the last looked at
                    break;
                }
                if due(stored)? {
                    step.keys.push(key.to_vec());
                }
                last = Some(key);
            }
            return Ok(step);
        };
        // Index entries of times before `now`, lowest first: the only records due.
        let prefix = crate::index::attribute_prefix(attribute);
        let bound = |ms: f64| -> Result<Vec<u8>> {
            let mut key = prefix.to_vec();
            lyre_store::encode_key_into(lyre_store::KeyValue::Float(ms), &mut key)?;
            Ok(key)
        };
        let (lowest, end) = (bound(f64::NEG_INFINITY)?, bound(now)?);
        let start = after.map_or(Bound::Included(lowest.as_slice()), Bound::Excluded);
        let mut last: Option<&[u8]> = None;
        for (seen, entry) in txn.index_entries(&store, (start, Bound::Excluded(end.as_slice())), false)?.enumerate() {
            let entry = entry?;
            if seen == max {
                step.next = last.map(<[u8]>::to_vec);
                break;
            }
            let key = lyre_store::index_entry_primary_key(entry.get(prefix.len()..).unwrap_or_default())?;
            if let Some(stored) = txn.get_record(&store, key)?
                && due(stored)?
            {
                step.keys.push(key.to_vec());
            }
            last = Some(entry);
        }
        Ok(step)
    }

    /// Removes the records with these keys that are still due for eviction at `now`
    /// (one may have been written since it was found); returns how many.
    pub(crate) async fn evict(&self, ctx: &Context, keys: Vec<Vec<u8>>, now: f64) -> Result<usize> {
        write::evict(self, ctx, keys, now).await
    }

    /// Record count and sizes, for `describe_table`.
    /// Any grant on the table lets a role describe it, as in Harper; the schema
    /// described lists only the attributes the role has some grant on.
    pub fn stats(&self, ctx: &Context) -> Result<TableStats> {
        let access = self.access(ctx, &[])?;
        let mut stats = self.db.table_stats(&self.schema)?;
        if access.restricts_attributes() {
            let mut visible = (*stats.schema).clone();
            visible.attributes.retain(|a| access.sees(&a.name, &self.schema.primary_key));
            visible.relationships.retain(|r| access.sees(&r.name, &self.schema.primary_key));
            stats.schema = Arc::new(visible);
        }
        Ok(stats)
    }

    /// How many records a read sees now: `describe_table`'s `exact_count`. The count
    /// in [`Table::stats`] is the stored records', which includes expired records not
    /// yet removed; in a table whose records expire this walks the table to leave
    /// them out. Any grant on the table lets a role ask, as for [`Table::stats`].
    pub fn live_count(&self, ctx: &Context) -> Result<u64> {
        self.access(ctx, &[])?;
        if self.schema.expiration.is_none() && self.schema.expires_at.is_none() {
            return Ok(self.db.table_stats(&self.schema)?.record_count);
        }
        let query = Query { select: Select::Attributes(vec![self.schema.primary_key.clone()]), ..Query::default() };
        let mut count = 0u64;
        self.search(&Context::system(), query)?.run(&mut |_| {
            count += 1;
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(count)
    }

    /// Whether `query` reads at most one record of this table and a bounded number
    /// of related ones: an equality on the primary key with a key value, among
    /// conditions on this table's own attributes that must all hold, no vector
    /// sort, and a projection reaching only to-one relationships within this
    /// database, at most [`MAX_BOUNDED_DEPTH`] deep. A server may run such a search
    /// where the request stands instead of handing it to a blocking thread.
    pub fn answers_one_record(&self, query: &Query) -> bool {
        use crate::query::{Comparator, Condition, Operator};
        let keyed = query.conditions.iter().any(|c| {
            matches!(c, Condition::Compare { attribute, comparator: Comparator::Equals, value }
                if *attribute == self.schema.primary_key && value.as_key().is_some())
        });
        let own = query.conditions.iter().all(|c| matches!(c, Condition::Compare { .. }));
        if query.operator != Operator::And || query.vector.is_some() || !keyed || !own {
            return false;
        }
        match query.select.clone().resolve(&self.schema) {
            Select::Fields { fields, .. } => self.bounded_projection(&self.schema, &fields, 0),
            Select::Raw | Select::All | Select::Attributes(_) => true,
        }
    }

    /// Whether `fields` on `schema` reach only to-one relationships in this
    /// database, at most [`MAX_BOUNDED_DEPTH`] deep.
    fn bounded_projection(&self, schema: &TableSchema, fields: &[crate::query::Field], depth: usize) -> bool {
        if depth > MAX_BOUNDED_DEPTH {
            return false;
        }
        fields.iter().all(|field| {
            let Some(relationship) = schema.relationships.iter().find(|r| r.name == field.name) else { return true };
            if relationship.list || relationship.database != self.database() {
                return false;
            }
            let catalog = self.db.schema();
            let Some(target) = catalog.table(&relationship.table) else { return false };
            field.nested.as_ref().is_none_or(|nested| self.bounded_projection(target, nested, depth + 1))
        })
    }

    /// Projects one record (as returned by [`Table::get`]) through `select`,
    /// following relationships the projection names.
    pub fn project(&self, ctx: &Context, mut record: Object, select: &Select) -> Result<Value> {
        let access = self.access(ctx, &[Action::Read])?;
        let named = select.attributes_named();
        access.require_attributes(named.iter().copied(), &[Action::Read], &self.schema.primary_key)?;
        select.validate(&self.schema)?;
        // The computed attributes it names, computed from the whole record (as the
        // index and a search compute them): for a role that may not read some of
        // its attributes, the stored record, read again.
        let wanted = |attribute: &crate::catalog::Attribute, _: &_| named.contains(&attribute.name.as_str());
        if self.schema.computed_attributes().any(|(a, c)| wanted(a, c)) {
            let computing = self.db.computing();
            let stored = match (access.restricts_attributes(), record.get(&self.schema.primary_key)) {
                (true, Some(id)) => self.lookup(id, |stored| decode_entry(stored).map(|entry| Some(entry.record)))?,
                _ => None,
            };
            match stored {
                Some(mut whole) => {
                    computing.add(&self.schema, &mut whole, wanted)?;
                    for (attribute, _) in self.schema.computed_attributes().filter(|(a, c)| wanted(a, c)) {
                        match whole.shift_remove(&attribute.name) {
                            Some(value) => record.insert(attribute.name.clone(), value),
                            None => record.shift_remove(&attribute.name),
                        };
                    }
                }
                None => computing.add(&self.schema, &mut record, wanted)?,
            }
        }
        let txn = self.db.store().read()?;
        let related = crate::query::Related::new(&txn, &self.db, &self.schema).viewed_by(ctx);
        let projected = select.project_value(&self.schema, record, Some(&related))?;
        Ok(access.strip_value(projected, &self.schema.primary_key))
    }

    /// For a vector query: waits, as long as the query allows, for the index it
    /// sorts through to cover what was committed when the call began (or to be
    /// no further behind than the query tolerates), and answers that coverage,
    /// Harper's `Harper-Index-Coverage`; a 503 once the wait is over. `None` for
    /// other queries (and for a vector query on an attribute without an index,
    /// which planning refuses with its reason).
    pub async fn index_coverage(&self, query: &Query) -> Result<Option<crate::db::derived::Coverage>> {
        let Some(sort) = &query.vector else { return Ok(None) };
        if self.schema.attribute(&sort.attribute).and_then(|a| a.vector.as_ref()).is_none() {
            return Ok(None);
        }
        let deadline = std::time::Instant::now() + query.index_wait.wait.min(crate::db::derived::MAX_WAIT);
        // Everything committed before the query must be covered (or the lag tolerated).
        let target = *self.db.committed().borrow();
        loop {
            if let Some(index) =
                self.db.derived().get(crate::vector::declared::KIND, &self.schema.name, &sort.attribute)
            {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let wait = crate::db::derived::IndexWait { wait: left, ..query.index_wait };
                match index.coverage(&self.db, target, wait).await? {
                    Some(coverage) => return Ok(Some(coverage)),
                    None => continue, // its runner ended: wait for the successor
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::DerivedIndexLagging(format!(
                    "the vector index on {}.{} is not loaded yet; retry later",
                    self.schema.name, sort.attribute
                )));
            }
            // Its runner starts within the supervisor's scan.
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Plans a search on a fresh snapshot; run it with [`Search::run`]. Fails before
    /// any result when the query names unknown attributes or is malformed.
    pub fn search(&self, ctx: &Context, query: Query) -> Result<Search> {
        self.plan_search(ctx, query, None)
    }

    /// Plans a search on `snapshot`, the one its statement's other searches of this
    /// database read too. Fails when the snapshot reads another database.
    pub fn search_in(&self, ctx: &Context, query: Query, snapshot: &SharedSnapshot) -> Result<Search> {
        self.require_snapshot_of_mine(snapshot, "search")?;
        self.plan_search(ctx, query, Some(snapshot))
    }

    /// Refuses (naming the `action` it would take) a snapshot of another database.
    fn require_snapshot_of_mine(&self, snapshot: &SharedSnapshot, action: &str) -> Result<()> {
        if snapshot.reads(&self.db) {
            return Ok(());
        }
        Err(Error::Invalid(format!(
            "a snapshot of {} cannot {action} {}.{}",
            snapshot.database(),
            self.schema.database,
            self.schema.name
        )))
    }

    fn plan_search(&self, ctx: &Context, query: Query, snapshot: Option<&SharedSnapshot>) -> Result<Search> {
        let access = self.access(ctx, &[Action::Read])?;
        let lease = self.db.lease(ForUser { what: SearchOf(self.schema.clone()), user: ctx.user.clone() });
        Search::plan(self.db.clone(), self.schema.clone(), query, lease, ctx, access, snapshot)
    }
}

/// "a search of <database>.<table>", as a lease holder.
struct SearchOf(Arc<TableSchema>);

impl std::fmt::Display for SearchOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a search of {}.{}", self.0.database, self.0.name)
    }
}

/// A record as stored, expired or not (see [`Table::get_held`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HeldRecord {
    /// The record, as the role may read it.
    pub record: Object,
    /// The version of its last write.
    pub version: RecordVersion,
    /// When it expires by the table's rules (ms since the epoch), if ever.
    pub expires_at: Option<f64>,
}

/// The version of a stored record, as ETags and conditional requests see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordVersion {
    /// The version (f64 ms) of the record's last write.
    pub time: f64,
    /// False when an out-of-order write left the version unchanged: equal versions
    /// then do not prove equal content, so caches must not trust them.
    pub unique: bool,
}

impl RecordVersion {
    pub(crate) fn of(entry: &crate::record::Entry) -> Self {
        Self::from_header(&entry.header)
    }

    fn from_header(header: &lyre_store::RecordHeader) -> Self {
        Self { time: header.version, unique: !header.flags.contains(lyre_store::Flags::VERSION_NOT_UNIQUE) }
    }
}

/// The attribute naming a content record's media type ([`RecordBody::content`]).
pub const CONTENT_TYPE: &str = "contentType";
/// The attribute holding a content record's data ([`RecordBody::content`]).
pub const CONTENT_DATA: &str = "data";

/// A body of media type `media` that no format reads, as a content record (Harper
/// keeps one so): `{contentType, data}`, the data text for a `text/` type when it is
/// UTF-8, else bytes. A read answers the data as it is ([`RecordBody::content`]).
pub fn content_record(media: &str, body: Vec<u8>) -> Object {
    let textual = media.get(..5).is_some_and(|prefix| prefix.eq_ignore_ascii_case("text/"));
    let data = match (textual, String::from_utf8(body)) {
        (true, Ok(text)) => Value::String(text),
        (_, Ok(text)) => Value::Bytes(text.into_bytes()),
        (_, Err(err)) => Value::Bytes(err.into_bytes()),
    };
    let mut record = Object::default();
    record.insert(CONTENT_TYPE.into(), Value::String(media.to_string()));
    record.insert(CONTENT_DATA.into(), data);
    record
}

/// A record as a read answers it (see [`Table::get_body`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RecordBody {
    /// The record's MessagePack bytes as stored: every attribute, nothing decoded.
    Stored(Vec<u8>),
    /// The decoded record, without the attributes the role may not read.
    Decoded(Object),
}

impl RecordBody {
    /// The record as an object (decoding the stored bytes).
    pub fn into_object(self) -> Result<Object> {
        match self {
            RecordBody::Decoded(record) => Ok(record),
            stored => stored.to_object(),
        }
    }

    /// The record as an object, this body kept (decoding the stored bytes).
    pub fn to_object(&self) -> Result<Object> {
        match self {
            RecordBody::Decoded(record) => Ok(record.clone()),
            RecordBody::Stored(bytes) => {
                match crate::raw::decode_value(bytes).map_err(|e| Error::Corrupt(e.into()))? {
                    Value::Object(record) => Ok(record),
                    other => Err(Error::Corrupt(format!("a stored record is a {}", other.type_name()))),
                }
            }
        }
    }

    /// Appends the record as JSON: what `serde_json` writes for it, written straight
    /// from the stored bytes when it has them.
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<()> {
        match self {
            RecordBody::Stored(bytes) => crate::raw::write_json(bytes, out).map_err(|e| Error::Corrupt(e.to_string())),
            RecordBody::Decoded(record) => {
                serde_json::to_writer(out, record).map_err(|e| Error::Corrupt(e.to_string()))
            }
        }
    }

    /// Appends the record as JSON ([`RecordBody::write_json`]) unless it is a content
    /// record: then answers its content ([`RecordBody::content`]), and what `out`
    /// holds is to be discarded. For stored bytes the pass that writes the JSON stops
    /// at a top-level `contentType`, so a read that answers JSON scans the record
    /// once, and a content record (an image, say) is not written as JSON first.
    pub fn write_json_or_content(&self, out: &mut Vec<u8>) -> Result<Option<(String, Value)>> {
        match self {
            RecordBody::Decoded(record) => match Self::content_of(record) {
                Some(content) => Ok(Some(content)),
                None => self.write_json(out).map(|()| None),
            },
            RecordBody::Stored(bytes) => {
                let start = out.len();
                let names_content = crate::raw::write_json_noting(bytes, out, Some(CONTENT_TYPE.as_bytes()))
                    .map_err(|e| Error::Corrupt(e.to_string()))?;
                if !names_content {
                    return Ok(None);
                }
                // The pass stopped at the key: the content, else the whole record after all.
                match self.content()? {
                    Some(content) => Ok(Some(content)),
                    None => {
                        out.truncate(start);
                        self.write_json(out).map(|()| None)
                    }
                }
            }
        }
    }

    /// The record's content, when it is one: a string `contentType` beside a `data`
    /// that is text, bytes or a blob, Harper's marker for a body of one media type
    /// (what a write of such a body stores, and what a caching table keeps of an
    /// origin's answer that is not JSON). A REST read answers the data as it is,
    /// with that type. Only those two attributes are decoded, and only from a
    /// record whose bytes hold the key at all: for most records this is one scan
    /// for the key's MessagePack encoding (Lyre writes a name that short as a
    /// fixstr, `0xab` and its 11 bytes).
    pub fn content(&self) -> Result<Option<(String, Value)>> {
        // Built once: making a searcher costs about as much as a search of 1 KB.
        static ENCODED_KEY: LazyLock<memchr::memmem::Finder<'static>> =
            LazyLock::new(|| memchr::memmem::Finder::new(b"\xabcontentType"));
        match self {
            RecordBody::Decoded(record) => Ok(Self::content_of(record)),
            RecordBody::Stored(bytes) if ENCODED_KEY.find(bytes).is_none() => Ok(None),
            RecordBody::Stored(bytes) => {
                let names = [CONTENT_TYPE.to_string(), CONTENT_DATA.to_string()];
                let found = crate::raw::decode_object_only(bytes, &names).map_err(|e| Error::Corrupt(e.into()))?;
                Ok(Self::content_of(&found))
            }
        }
    }

    /// [`RecordBody::content`] of a decoded record.
    pub fn content_of(record: &Object) -> Option<(String, Value)> {
        let Some(Value::String(content_type)) = record.get(CONTENT_TYPE) else { return None };
        match record.get(CONTENT_DATA)? {
            data @ (Value::String(_) | Value::Bytes(_) | Value::Blob(_)) => Some((content_type.clone(), data.clone())),
            _ => None,
        }
    }

    /// About how many bytes the record takes encoded (to size a response buffer).
    pub fn size_hint(&self) -> usize {
        match self {
            RecordBody::Stored(bytes) => bytes.len() + bytes.len() / 8,
            RecordBody::Decoded(record) => 16 + record.len() * 32,
        }
    }
}

impl serde::Serialize for RecordBody {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            RecordBody::Stored(bytes) => crate::raw::RawValue(bytes).serialize(serializer),
            RecordBody::Decoded(record) => record.serialize(serializer),
        }
    }
}

/// `body` with its primary key set to `id` (the URL's key wins over the body's).
fn with_key(schema: &TableSchema, id: Value, mut body: Object) -> Object {
    body.insert(schema.primary_key.clone(), id);
    body
}

/// One step of an expiry sweep: what it found, and where the next step starts.
pub(crate) struct EvictionStep {
    /// Keys of the records due for eviction.
    pub keys: Vec<Vec<u8>>,
    /// The key after which the next step starts; `None` when the table is done.
    pub next: Option<Vec<u8>>,
}
