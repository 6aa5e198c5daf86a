//! The catalog: databases, their tables and each table's attributes.
//!
//! A [`DatabaseSchema`] is owned by its database's writer (it is the writer's state),
//! changed only inside write jobs, persisted in the database's catalog sub-database in
//! the same transaction, and published to readers as an immutable snapshot after
//! each commit.

mod names;
mod schema;
mod sdl;
mod vector;

pub(crate) use names::check_length as check_name_length;
pub(crate) use names::validate_definition_names;
pub use names::{validate_attribute_name, validate_database_name, validate_table_name};
pub(crate) use schema::COUNTERS_KEY;
pub use schema::{
    Attribute, AttributeSpec, CREATED_TIME, Computed, DatabaseSchema, Expiration, NestedField, Relationship, Shape,
    Stamp, TableSchema, TableSpec, UPDATED_TIME,
};
pub use sdl::{DeclaredAttribute, SdlError, TableDefinition, parse_sdl};
pub use vector::{Distance, MAX_DIMENSIONS, VectorIndex, read_vector};

/// The database holding Lyre's own tables: users, roles and jobs.
pub const SYSTEM_DATABASE: &str = "system";

/// A database's schema as its writer owns it: copied on write, published to readers
/// as an immutable snapshot after each commit.
pub(crate) type SchemaState = std::sync::Arc<DatabaseSchema>;
