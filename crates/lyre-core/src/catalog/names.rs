//! What names a database, table or attribute may have.

use crate::error::{Error, Result};

const FORBIDDEN: [char; 2] = ['`', '/'];

/// Harper's rules for database names: non-empty, no backticks or slashes.
pub fn validate_database_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("'database' is not allowed to be empty"));
    }
    if name.contains(FORBIDDEN) || name == "." || name == ".." || name.contains('\0') {
        return Err(Error::invalid("'database' names cannot include backticks or forward slashes"));
    }
    check_length("database", name)
}

/// Harper's rules for table names.
pub fn validate_table_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("'table' is not allowed to be empty"));
    }
    if name.contains(FORBIDDEN) || name.contains('\0') {
        return Err(Error::invalid("'table' names cannot include backticks or forward slashes"));
    }
    check_length("table", name)
}

/// Harper's rules for attribute names (also used for primary-key names).
pub fn validate_attribute_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("Invalid attribute name: ''"));
    }
    if name.contains(FORBIDDEN) {
        return Err(Error::invalid("Attribute names cannot include backticks or forward slashes"));
    }
    check_length("attribute", name)
}

/// Checks every name a schema definition gives: its database, table, primary key
/// and attributes.
pub(crate) fn validate_definition_names(definition: &super::TableDefinition) -> Result<()> {
    validate_database_name(&definition.database)?;
    validate_table_name(&definition.table)?;
    validate_attribute_name(&definition.primary_key)?;
    definition.attributes.iter().try_for_each(|attribute| validate_attribute_name(&attribute.name))
}

/// Fails when `name` (the `what` of something) is longer than names may be.
pub(crate) fn check_length(what: &str, name: &str) -> Result<()> {
    // Names become sub-database and file names; keep them well inside OS limits.
    if name.len() > 200 {
        return Err(Error::invalid(format!("'{what}' names cannot be longer than 200 bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_harpers_rules() {
        assert!(validate_table_name("dog").is_ok());
        assert!(validate_table_name("has space").is_ok());
        assert!(validate_table_name("1abc").is_ok());
        assert_eq!(
            validate_table_name("a/b").unwrap_err().to_string(),
            "'table' names cannot include backticks or forward slashes"
        );
        assert_eq!(validate_table_name("").unwrap_err().to_string(), "'table' is not allowed to be empty");
        assert!(validate_database_name("..").is_err());
        assert_eq!(validate_attribute_name("").unwrap_err().to_string(), "Invalid attribute name: ''");
        assert!(validate_attribute_name("a/b").is_err());
        assert!(validate_attribute_name(&"x".repeat(201)).is_err());
    }
}
