//! The table API: the boundary every protocol reaches data through.
//!
//! Every method takes a [`Context`] and checks it (in `access::check`) before doing
//! anything. Writes become logical transactions on the database's writer
//! ([`write`]); reads use a snapshot.

mod validate;
mod write;

use std::sync::Arc;

use lyre_store::{decode_record, encode_key};

use crate::access::{Action, check_table};
use crate::catalog::TableSchema;
use crate::context::Context;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::query::{Query, Search, Select};
use crate::value::{Object, Value};

pub use write::{DeleteSummary, WriteMode, WriteSummary};

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

    /// Inserts records; those whose primary key exists are skipped.
    pub async fn insert(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        check_table(ctx, self.database(), &self.schema.name, Action::Insert)?;
        self.write(ctx, WriteMode::Insert, records).await
    }

    /// Merges records into existing ones; records with no match are skipped.
    pub async fn update(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        check_table(ctx, self.database(), &self.schema.name, Action::Update)?;
        self.write(ctx, WriteMode::Update, records).await
    }

    /// Merges records into existing ones, inserting those with no match.
    pub async fn upsert(&self, ctx: &Context, records: Vec<Object>) -> Result<WriteSummary> {
        check_table(ctx, self.database(), &self.schema.name, Action::Insert)?;
        check_table(ctx, self.database(), &self.schema.name, Action::Update)?;
        self.write(ctx, WriteMode::Upsert, records).await
    }

    /// Deletes the records with these primary keys.
    pub async fn delete(&self, ctx: &Context, ids: Vec<Value>) -> Result<DeleteSummary> {
        check_table(ctx, self.database(), &self.schema.name, Action::Delete)?;
        write::delete(self, ctx, ids).await
    }

    /// One record and the version of its last write (for ETags), if it exists.
    pub fn get(&self, ctx: &Context, id: &Value) -> Result<Option<(Object, RecordVersion)>> {
        check_table(ctx, self.database(), &self.schema.name, Action::Read)?;
        let key = validate::encode_primary_key(id)?;
        let txn = self.db.store().read()?;
        let Some(store) = txn.table(&self.schema.name)? else { return Ok(None) };
        let Some(stored) = txn.get_record(&store, &key)? else { return Ok(None) };
        let (header, body) = decode_record(stored)?;
        Ok(Some((
            decode_body(body)?,
            RecordVersion {
                time: header.version,
                unique: !header.flags.contains(lyre_store::Flags::VERSION_NOT_UNIQUE),
            },
        )))
    }

    /// Replaces the record with primary key `id` by `body` (creating it if absent).
    pub async fn put(&self, ctx: &Context, id: Value, body: Object) -> Result<WriteSummary> {
        check_table(ctx, self.database(), &self.schema.name, Action::Insert)?;
        check_table(ctx, self.database(), &self.schema.name, Action::Update)?;
        self.write(ctx, WriteMode::Replace, vec![with_key(&self.schema, id, body)]).await
    }

    /// Merges `body` into the record with primary key `id` (creating it if absent).
    pub async fn patch(&self, ctx: &Context, id: Value, body: Object) -> Result<WriteSummary> {
        self.upsert(ctx, vec![with_key(&self.schema, id, body)]).await
    }

    /// Creates one record; `409` when its key exists. Returns the (maybe generated) key.
    pub async fn create(&self, ctx: &Context, body: Object) -> Result<Value> {
        let summary = self.insert(ctx, vec![body]).await?;
        match summary.written.into_iter().next() {
            Some(id) => Ok(id),
            None => Err(Error::Conflict("Record already exists".to_string())),
        }
    }

    /// The records with these primary keys, in the order asked, missing ones omitted.
    pub fn get_many(&self, ctx: &Context, ids: &[Value], select: &Select) -> Result<Vec<Object>> {
        check_table(ctx, self.database(), &self.schema.name, Action::Read)?;
        select.validate(&self.schema)?;
        let txn = self.db.store().read()?;
        let Some(store) = txn.table(&self.schema.name)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(key) = id.as_key().filter(|_| is_primary_key_value(id)) else {
                return Err(Error::invalid("'ids' must be strings or numbers"));
            };
            let Ok((key, false)) = encode_key(key) else {
                continue;
            };
            if let Some(stored) = txn.get_record(&store, &key)? {
                out.push(select.project(&self.schema, decode_object(stored)?));
            }
        }
        Ok(out)
    }

    /// Record count and sizes, for `describe_table`.
    pub fn stats(&self, ctx: &Context) -> Result<crate::db::TableStats> {
        check_table(ctx, self.database(), &self.schema.name, Action::Read)?;
        self.db.table_stats(&self.schema)
    }

    /// Projects one record (as returned by [`Table::get`]) through `select`,
    /// following relationships the projection names.
    pub fn project(&self, ctx: &Context, record: Object, select: &Select) -> Result<Value> {
        check_table(ctx, self.database(), &self.schema.name, Action::Read)?;
        select.validate(&self.schema)?;
        let txn = self.db.store().read()?;
        let related = crate::query::Related::new(&txn, &self.db, &self.schema);
        select.project_value(&self.schema, record, Some(&related))
    }

    /// Plans a search on a fresh snapshot; run it with [`Search::run`]. Fails before
    /// any result when the query names unknown attributes or is malformed.
    pub fn search(&self, ctx: &Context, query: Query) -> Result<Search> {
        check_table(ctx, self.database(), &self.schema.name, Action::Read)?;
        Search::plan(self.clone(), query)
    }

    async fn write(&self, ctx: &Context, mode: WriteMode, records: Vec<Object>) -> Result<WriteSummary> {
        let prepared = write::prepare(&self.schema, mode, records)?;
        write::apply(self, ctx, mode, prepared).await
    }
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

/// `body` with its primary key set to `id` (the URL's key wins over the body's).
fn with_key(schema: &TableSchema, id: Value, mut body: Object) -> Object {
    body.insert(schema.primary_key.clone(), id);
    body
}

/// Whether `value` may be a primary key: a string or a number.
pub(crate) fn is_primary_key_value(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Int(_)) || matches!(value, Value::Float(f) if f.is_finite())
}

/// Decodes a stored record (header and MessagePack body) into its object.
pub(crate) fn decode_object(stored: &[u8]) -> Result<Object> {
    let (_, body) = decode_record(stored)?;
    decode_body(body)
}

/// Decodes a record body.
pub(crate) fn decode_body(body: &[u8]) -> Result<Object> {
    match Value::from_msgpack(body)? {
        Value::Object(record) => Ok(record),
        other => Err(Error::Corrupt(format!("a stored record is a {}", other.type_name()))),
    }
}
