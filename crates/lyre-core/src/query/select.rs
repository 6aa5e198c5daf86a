//! Projection: which attributes of a record a result carries.

use crate::catalog::TableSchema;
use crate::error::{Error, Result};
use crate::value::{Object, Value};

/// Which attributes to return.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Select {
    /// The record as stored.
    #[default]
    Raw,
    /// Every attribute of the table in describe order, `null` where the record has
    /// none (Harper's `get_attributes: ["*"]`), then any undeclared ones.
    All,
    /// Exactly these attributes, in this order, `null` where missing.
    Attributes(Vec<String>),
}

impl Select {
    /// Fails when a named attribute is not in the table.
    pub fn validate(&self, table: &TableSchema) -> Result<()> {
        if let Select::Attributes(names) = self {
            for name in names {
                if table.attribute(name).is_none() {
                    return Err(Error::UnknownAttribute(name.clone()));
                }
            }
        }
        Ok(())
    }

    /// Applies the projection to `record`.
    pub fn project(&self, table: &TableSchema, mut record: Object) -> Object {
        match self {
            Select::Raw => record,
            Select::All => {
                let mut out = Object::with_capacity(table.attributes.len());
                for attribute in &table.attributes {
                    let value = record.shift_remove(&attribute.name).unwrap_or(Value::Null);
                    out.insert(attribute.name.clone(), value);
                }
                out.extend(record);
                out
            }
            Select::Attributes(names) => {
                let mut out = Object::with_capacity(names.len());
                for name in names {
                    let value = record.get(name).cloned().unwrap_or(Value::Null);
                    out.insert(name.clone(), value);
                }
                out
            }
        }
    }
}
