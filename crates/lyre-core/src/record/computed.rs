//! Computed attributes (`@computed`) as the core meets them: values derived from a
//! record by code the server supplies, never stored. The writer asks for the
//! indexed ones to keep their index entries; reads ask for all of them, so filters,
//! sorts and projections see them as any other attribute. The code itself runs
//! outside the core: the server installs an [`AttributeComputer`] (its JavaScript
//! engine) on the engine, and every database shares it.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::catalog::{Attribute, Computed, TableSchema};
use crate::error::{Error, Result};
use crate::value::{Object, Value};

/// Computes an attribute's value from a record: what the server's code answers.
pub trait AttributeComputer: Send + Sync {
    /// The value of `attribute` (computed as `computed` says) of a record of
    /// `database.table`; `Ok(None)` when it has none (left out of the record). An
    /// error names why the code failed.
    fn compute(
        &self,
        database: &str,
        table: &str,
        attribute: &Attribute,
        computed: &Computed,
        record: &Object,
    ) -> std::result::Result<Option<Value>, String>;
}

/// The engine's computer, installed once the server's code can run; shared by every
/// database (a clone is the same slot).
#[derive(Clone, Default)]
pub struct Computers(Arc<RwLock<Option<Arc<dyn AttributeComputer>>>>);

impl Computers {
    /// Installs `computer` for every database, replacing any other.
    pub fn install(&self, computer: Arc<dyn AttributeComputer>) {
        *self.0.write() = Some(computer);
    }

    /// The computer for reads and writes of `database`.
    pub(crate) fn for_database(&self, database: &str) -> Computing {
        Computing { database: database.to_string(), computer: self.0.read().clone() }
    }
}

/// The computer one read or write job uses for one database: taken once, so a job
/// sees one computer throughout.
#[derive(Clone)]
pub(crate) struct Computing {
    database: String,
    computer: Option<Arc<dyn AttributeComputer>>,
}

impl std::fmt::Debug for Computing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Computing")
            .field("database", &self.database)
            .field("installed", &self.computer.is_some())
            .finish()
    }
}

impl Computing {
    /// Adds to `record` the values of `table`'s computed attributes that `wanted`
    /// picks. Without a computer installed they stay absent, as Harper's attributes
    /// without a resolver.
    pub(crate) fn add(
        &self,
        table: &TableSchema,
        record: &mut Object,
        wanted: impl Fn(&Attribute, &Computed) -> bool,
    ) -> Result<()> {
        self.each(table, record, wanted, |attribute, message| {
            Err(Error::Computed { table: table.name.clone(), attribute: attribute.name.clone(), message })
        })
    }

    /// `record` with its indexed computed attributes added, for index maintenance;
    /// `record` itself when the table indexes none.
    pub(crate) fn indexed<'r>(
        &self,
        table: &TableSchema,
        record: Option<&'r Object>,
    ) -> Option<std::borrow::Cow<'r, Object>> {
        self.indexed_noting_failures(table, record).0
    }

    /// [`Computing::indexed`], and the names of the indexed computed attributes the
    /// code failed to compute (left out of the record).
    pub(crate) fn indexed_noting_failures<'r>(
        &self,
        table: &TableSchema,
        record: Option<&'r Object>,
    ) -> (Option<std::borrow::Cow<'r, Object>>, Vec<String>) {
        let Some(record) = record else { return (None, Vec::new()) };
        if !table.computed_attributes().any(|(a, _)| a.indexed) {
            return (Some(std::borrow::Cow::Borrowed(record)), Vec::new());
        }
        let mut with = record.clone();
        let failed = self.add_for_index(table, &mut with, |a| a.indexed);
        (Some(std::borrow::Cow::Owned(with)), failed)
    }

    /// Adds the computed attributes `wanted` picks for an index: inside a write, a
    /// value the code cannot compute (it throws, it is too slow, no worker answers)
    /// is left out of the index and logged, instead of failing the write (and its
    /// writer batch with it) or leaving a record that can never be deleted. Returns
    /// the names of the attributes left out so.
    pub(crate) fn add_for_index(
        &self,
        table: &TableSchema,
        record: &mut Object,
        wanted: impl Fn(&Attribute) -> bool,
    ) -> Vec<String> {
        let mut failed = Vec::new();
        // Never fails: a failure is logged and the work goes on.
        let _ = self.each(
            table,
            record,
            |a, _| wanted(a),
            |attribute, message| {
                tracing::warn!(
                    database = %self.database, table = %table.name, attribute = %attribute.name, error = %message,
                    "a computed attribute could not be computed for its index; the record is left out of it"
                );
                failed.push(attribute.name.clone());
                Ok(())
            },
        );
        failed
    }

    /// Sets (or, without a value, removes) each computed attribute `wanted` picks;
    /// what the code fails to compute is removed and handed to `failed`, which
    /// decides whether that ends the work.
    fn each(
        &self,
        table: &TableSchema,
        record: &mut Object,
        wanted: impl Fn(&Attribute, &Computed) -> bool,
        mut failed: impl FnMut(&Attribute, String) -> Result<()>,
    ) -> Result<()> {
        let Some(computer) = &self.computer else { return Ok(()) };
        for (attribute, computed) in table.computed_attributes().filter(|(a, c)| wanted(a, c)) {
            match computer.compute(&self.database, &table.name, attribute, computed, record) {
                Ok(Some(value)) => {
                    record.insert(attribute.name.clone(), value);
                }
                Ok(None) => {
                    record.shift_remove(&attribute.name);
                }
                Err(message) => {
                    record.shift_remove(&attribute.name);
                    failed(attribute, message)?;
                }
            }
        }
        Ok(())
    }
}

/// Removes from a whole-record read the computed attributes it does not carry
/// unless named (all but `@enumerable` ones), as Harper's non-enumerable getters.
pub(crate) fn hide_unnamed(table: &TableSchema, record: &mut Object) {
    for (attribute, computed) in table.computed_attributes() {
        if !computed.enumerable {
            record.shift_remove(&attribute.name);
        }
    }
}
