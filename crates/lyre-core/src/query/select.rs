//! Projection: which attributes of a record a result carries.

use crate::catalog::TableSchema;
use crate::error::{Error, Result};
use crate::query::related::Related;
use crate::record::computed::hide_unnamed;
use crate::value::{Object, Value, object_with_capacity};

/// Which attributes to return.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Select {
    /// The record as stored.
    #[default]
    Raw,
    /// Harper's `get_attributes: ["*"]`: in a dynamic table every attribute of the
    /// table in describe order, `null` where the record has none, then any
    /// undeclared ones; in a schema-defined table the record as stored (Harper 5
    /// selects nothing there, so absent properties stay absent).
    All,
    /// Exactly these attributes, in this order, `null` where missing.
    Attributes(Vec<String>),
    /// A projection tree (REST `select(...)`): attributes, relationship fields with
    /// their own projection, and how each result is shaped. An object result leaves
    /// out the plain attributes the record lacks, as Harper does; a bare value or an
    /// array of values holds `null` in their place.
    Fields {
        /// The fields, in order.
        fields: Vec<Field>,
        /// Objects, bare values (one field) or arrays of values.
        shape: Shaped,
    },
}

/// The name under which a vector query's results carry their distance.
pub const DISTANCE: &str = "$distance";

/// Names a projection may use that no record stores.
fn is_computed(name: &str) -> bool {
    name == "$id" || name == DISTANCE
}

/// A field of a [`Select::Fields`] projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// An attribute, a relationship field, or `$id` (the primary key).
    pub name: String,
    /// For relationship fields: the projection of the related records (`None`: whole
    /// records).
    pub nested: Option<Vec<Field>>,
}

/// How a [`Select::Fields`] result is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shaped {
    /// `select(a,b)`: an object per result.
    Object,
    /// `select(a)`: the bare value of the one field.
    Value,
    /// `select([a,b])`: an array of values per result.
    Array,
    /// `get_attributes` naming a relationship (or `{name, select}`): an object per
    /// result with every field, `null` where the record has none.
    Filled,
}

impl Select {
    /// The projection as `table` answers it: `get_attributes` naming a relationship
    /// of the table becomes a [`Select::Fields`] projection ([`Shaped::Filled`]), so
    /// the relationship's records are read (whole); anything else is unchanged.
    pub fn resolve(self, table: &TableSchema) -> Select {
        match self {
            Select::Attributes(names) if names.iter().any(|n| table.relationships.iter().any(|r| &r.name == n)) => {
                let fields = names.into_iter().map(|name| Field { name, nested: None }).collect();
                Select::Fields { fields, shape: Shaped::Filled }
            }
            other => other,
        }
    }

    /// The attributes of the record the projection names (none for the whole record).
    pub fn attributes_named(&self) -> Vec<&str> {
        match self {
            Select::Raw | Select::All => Vec::new(),
            Select::Attributes(names) => names.iter().map(String::as_str).collect(),
            Select::Fields { fields, .. } => {
                fields.iter().map(|f| f.name.as_str()).filter(|name| !is_computed(name)).collect()
            }
        }
        .into_iter()
        .filter(|name| *name != DISTANCE)
        .collect()
    }

    /// Whether the projection names `$distance` (a vector query's distance).
    pub fn names_distance(&self) -> bool {
        match self {
            Select::Raw | Select::All => false,
            Select::Attributes(names) => names.iter().any(|n| n == DISTANCE),
            Select::Fields { fields, .. } => fields.iter().any(|f| f.name == DISTANCE),
        }
    }

    /// Fails when a named attribute is not in the table.
    pub fn validate(&self, table: &TableSchema) -> Result<()> {
        match self {
            Select::Attributes(names) => {
                for name in names.iter().filter(|n| *n != DISTANCE) {
                    if table.attribute(name).is_none() {
                        return Err(Error::UnknownAttribute(name.clone()));
                    }
                }
            }
            // `get_attributes` is strict: every field is an attribute, a
            // relationship or a computed name.
            Select::Fields { fields, shape: Shaped::Filled } => {
                for field in fields {
                    let known = table.attribute(&field.name).is_some()
                        || table.relationships.iter().any(|r| r.name == field.name)
                        || is_computed(&field.name);
                    if !known {
                        return Err(Error::UnknownAttribute(field.name.clone()));
                    }
                }
            }
            // Unknown fields are left out (or null in a bare or array result), as
            // Harper 5's `select(nosuch)` does.
            Select::Fields { .. } | Select::Raw | Select::All => {}
        }
        Ok(())
    }

    /// Applies the projection to `record`, following relationships through `related`
    /// when the projection names them.
    pub(crate) fn project_value(
        &self,
        table: &TableSchema,
        record: Object,
        related: Option<&Related<'_>>,
    ) -> Result<Value> {
        let Select::Fields { fields, shape } = self else { return Ok(Value::Object(self.project(table, record))) };
        let values = project_fields(fields, table, &record, related, *shape != Shaped::Object)?;
        Ok(match shape {
            Shaped::Object | Shaped::Filled => Value::Object(values),
            Shaped::Value => values.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null),
            Shaped::Array => Value::Array(values.into_iter().map(|(_, v)| v).collect()),
        })
    }

    /// Applies a flat projection to `record` (relationship fields become `null`).
    pub fn project(&self, table: &TableSchema, mut record: Object) -> Object {
        if table.has_computed() && matches!(self, Select::Raw | Select::All) {
            hide_unnamed(table, &mut record);
        }
        match self {
            Select::Raw => record,
            Select::All if table.schema_defined => record,
            Select::All => {
                let mut out = object_with_capacity(table.attributes.len());
                for attribute in &table.attributes {
                    let value = record.shift_remove(&attribute.name).unwrap_or(Value::Null);
                    out.insert(attribute.name.clone(), value);
                }
                out.extend(record);
                out
            }
            // A record decoded with exactly these attributes is its own projection.
            Select::Attributes(names) if record.keys().eq(names.iter()) => record,
            Select::Attributes(names) => {
                // The record's own names and values move over, nothing is copied.
                let mut out = object_with_capacity(names.len());
                for name in names {
                    match record.swap_remove_entry(name) {
                        Some((name, value)) => out.insert(name, value),
                        None if out.contains_key(name) => continue,
                        None => out.insert(name.clone(), Value::Null),
                    };
                }
                out
            }
            Select::Fields { fields, shape } => {
                project_fields(fields, table, &record, None, *shape != Shaped::Object).unwrap_or_default()
            }
        }
    }
}

/// The values of `fields` for `record`; plain attributes the record lacks are left
/// out unless `keep_missing` (then they are `null`).
fn project_fields(
    fields: &[Field],
    table: &TableSchema,
    record: &Object,
    related: Option<&Related<'_>>,
    keep_missing: bool,
) -> Result<Object> {
    let mut out = object_with_capacity(fields.len());
    for field in fields {
        let relationship = table.relationships.iter().find(|r| r.name == field.name);
        let value = match (relationship, related) {
            (Some(relationship), Some(related)) => {
                let (target, _) = related.target(relationship)?;
                let inner = related.of(&target);
                let mut found = Vec::new();
                for other in related.records(record, relationship)? {
                    found.push(match &field.nested {
                        Some(nested) => Value::Object(project_fields(nested, &target, &other, Some(&inner), false)?),
                        None => Value::Object(other),
                    });
                }
                if relationship.list { Value::Array(found) } else { found.into_iter().next().unwrap_or(Value::Null) }
            }
            (Some(_), None) => Value::Null,
            (None, _) if field.name == "$id" => record.get(&table.primary_key).cloned().unwrap_or(Value::Null),
            (None, _) => match (record.get(&field.name), &field.nested) {
                (Some(Value::Object(inner)), Some(nested)) => Value::Object(nested_fields(nested, inner)),
                (Some(found), _) => found.clone(),
                (None, _) if keep_missing => Value::Null,
                (None, _) => continue,
            },
        };
        out.insert(field.name.clone(), value);
    }
    Ok(out)
}

/// A nested object's projection (`select(details{color})`), leaving out the
/// properties it lacks.
fn nested_fields(fields: &[Field], object: &Object) -> Object {
    fields
        .iter()
        .filter_map(|f| {
            let value = match (object.get(&f.name)?, &f.nested) {
                (Value::Object(inner), Some(nested)) => Value::Object(nested_fields(nested, inner)),
                (found, _) => found.clone(),
            };
            Some((f.name.clone(), value))
        })
        .collect()
}
