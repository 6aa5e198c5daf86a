//! `INSERT`, `UPDATE` and `DELETE`: the rows each changes are worked out on the
//! statement's snapshot, then written as one writer job through the table API, so
//! a statement that fails writes nothing. An `UPDATE` or `DELETE` writes each row
//! only if it is still the version the snapshot held: a row changed meanwhile
//! fails the job (412) before anything is written, and the statement is worked
//! out again on a new snapshot (`lib.rs`), so `SET n = n + 1` from many clients
//! at once loses no increment, and a row the `WHERE` matched is written only as it
//! was matched. (Rows a subquery read, and rows that came to match meanwhile, are
//! not checked.)

use std::sync::Arc;

use lyre_core::query::SharedSnapshot;
use lyre_core::{Context, Expect, Object, Table, Value, WriteMode, WriteOptions};
use sqlparser::ast;

use crate::error::{Result, SqlError};
use crate::expr::{ColumnRef, Compiler, Env, Row, Scope};
use crate::select::Statement;

/// What a write answered: Harper's message and keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// `inserted 2 of 2 records`, `updated 1 of 1 records`, `1 of 1 record successfully deleted`.
    pub message: String,
    /// `inserted_hashes`, `update_hashes` or `deleted_hashes`.
    pub keys_field: &'static str,
    /// The primary keys written.
    pub keys: Vec<Value>,
    /// The primary keys skipped (existing on insert, gone on update or delete).
    pub skipped: Vec<Value>,
}

/// A planned write, ready for the writer.
pub enum Planned {
    /// Records to insert.
    Insert(Table, Vec<Object>),
    /// Records (primary key and the changed attributes) to update, each with the
    /// version it must still have.
    Update(Table, Vec<Object>, Vec<Option<Expect>>),
    /// Primary keys to delete, each with the version it must still have.
    Delete(Table, Vec<Value>, Vec<Option<Expect>>),
}

/// For each of `ids`, a condition that the record is still at the version
/// `snapshot` holds. A record whose version is not unique (an out-of-order
/// replicated write left it so) gets none: its version cannot tell a change.
fn unchanged_since(table: &Table, ids: &[Value], snapshot: &SharedSnapshot) -> Result<Vec<Option<Expect>>> {
    Ok(table
        .versions_in(ids, snapshot)?
        .into_iter()
        .map(|seen| {
            let seen = seen.filter(|v| v.unique)?;
            Some(Expect::Version(Arc::new(move |now| now.unique && now.time == seen.time)))
        })
        .collect())
}

/// Works out an `INSERT`'s records.
pub fn plan_insert(statement: &mut Statement<'_>, insert: &ast::Insert) -> Result<Planned> {
    let refused = [
        (insert.or.is_some(), "INSERT OR"),
        (insert.ignore, "INSERT IGNORE"),
        (insert.overwrite, "INSERT OVERWRITE"),
        (!insert.assignments.is_empty(), "INSERT … SET"),
        (insert.partitioned.is_some(), "PARTITION"),
        (insert.on.is_some(), "ON CONFLICT / ON DUPLICATE KEY"),
        (insert.returning.is_some(), "RETURNING"),
        (insert.replace_into, "REPLACE INTO"),
    ];
    if let Some((_, what)) = refused.iter().find(|(present, _)| *present) {
        return Err(SqlError::unsupported(what));
    }
    let ast::TableObject::TableName(name) = &insert.table else {
        return Err(SqlError::unsupported("INSERT into a table function"));
    };
    let (table, _) = statement.table(name)?;
    let columns: Vec<String> = insert.columns.iter().map(|c| c.to_string()).collect();
    let Some(source) = &insert.source else { return Err(SqlError::invalid("INSERT needs VALUES or a SELECT")) };
    let rows: Vec<Vec<Value>> = match source.body.as_ref() {
        ast::SetExpr::Values(values) => values
            .rows
            .iter()
            .map(|row| row.iter().map(|e| statement.constant(e)).collect::<Result<Vec<_>>>())
            .collect::<Result<_>>()?,
        _ => statement.query(source)?.rows.into_iter().map(|row| row.into_values().collect()).collect(),
    };
    if columns.is_empty() {
        return Err(SqlError::invalid("INSERT needs its column list: INSERT INTO db.table (a, b) VALUES (…)"));
    }
    let records = rows
        .into_iter()
        .map(|values| {
            if values.len() != columns.len() {
                return Err(SqlError::invalid(format!(
                    "INSERT names {} columns but a row has {} values",
                    columns.len(),
                    values.len()
                )));
            }
            Ok(columns.iter().cloned().zip(values).collect::<Object>())
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Planned::Insert(table, records))
}

/// Works out an `UPDATE`'s changes: each matching record's primary key with the
/// assigned attributes, computed from the record as the snapshot has it.
pub fn plan_update(statement: &mut Statement<'_>, update: &ast::Update) -> Result<Planned> {
    let refused = [
        (update.from.is_some(), "UPDATE … FROM"),
        (update.returning.is_some(), "RETURNING"),
        (update.or.is_some(), "UPDATE OR"),
        (!update.order_by.is_empty(), "UPDATE … ORDER BY"),
        (update.limit.is_some(), "UPDATE … LIMIT"),
        (!update.table.joins.is_empty(), "UPDATE with a join"),
    ];
    if let Some((_, what)) = refused.iter().find(|(present, _)| *present) {
        return Err(SqlError::unsupported(what));
    }
    let (name, alias) = single_table(&update.table.relation)?;
    let (table, snapshot) = statement.table(name)?;
    let matches = matching(statement, name, alias, update.selection.as_ref())?;
    let scope = OneTable { alias: alias.unwrap_or(&table.schema().name), table: &table };
    let mut none = |_: &ast::Query| -> Result<Vec<Value>> { Err(SqlError::unsupported("a subquery in SET")) };
    let mut compiler = Compiler::new(&scope, &mut none, None);
    let assignments = update
        .assignments
        .iter()
        .map(|assignment| {
            let ast::AssignmentTarget::ColumnName(column) = &assignment.target else {
                return Err(SqlError::unsupported("assigning a tuple"));
            };
            let column = column.0.last().map(|part| part.to_string()).unwrap_or_default();
            if column == table.schema().primary_key {
                return Err(SqlError::invalid(format!("UPDATE cannot change the primary key '{column}'")));
            }
            Ok((column, compiler.compile(&assignment.value)?))
        })
        .collect::<Result<Vec<_>>>()?;
    // What the assignments read must be readable by the role, like any other use.
    let mut read = Vec::new();
    for (_, value) in &assignments {
        value.visit(&mut |e| {
            if let crate::expr::Expr::Column(c) = e {
                read.push(c.name.clone());
            }
        });
    }
    let access = table.access(statement.ctx(), &[lyre_core::access::Action::Read])?;
    access.require_attributes(
        read.iter().map(String::as_str),
        &[lyre_core::access::Action::Read],
        &table.schema().primary_key,
    )?;
    let key = table.schema().primary_key.clone();
    let changes = matches
        .into_iter()
        .map(|record| {
            let row = Row { sources: vec![Some(std::sync::Arc::new(record))] };
            let env = Env { row: &row, aggregates: &[], now: statement.now };
            let mut change = Object::default();
            change.insert(key.clone(), row.get(0, &key).clone());
            for (column, value) in &assignments {
                change.insert(column.clone(), value.eval(&env)?);
            }
            Ok(change)
        })
        .collect::<Result<Vec<_>>>()?;
    let ids: Vec<Value> = changes.iter().map(|change| change.get(&key).cloned().unwrap_or(Value::Null)).collect();
    let expect = unchanged_since(&table, &ids, &snapshot)?;
    Ok(Planned::Update(table, changes, expect))
}

/// Works out a `DELETE`'s primary keys.
pub fn plan_delete(statement: &mut Statement<'_>, delete: &ast::Delete) -> Result<Planned> {
    let refused = [
        (!delete.tables.is_empty(), "DELETE of several tables"),
        (delete.using.is_some(), "DELETE … USING"),
        (delete.returning.is_some(), "RETURNING"),
        (!delete.order_by.is_empty(), "DELETE … ORDER BY"),
        (delete.limit.is_some(), "DELETE … LIMIT"),
    ];
    if let Some((_, what)) = refused.iter().find(|(present, _)| *present) {
        return Err(SqlError::unsupported(what));
    }
    let from = match &delete.from {
        ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from) => from,
    };
    let [only] = from.as_slice() else { return Err(SqlError::unsupported("DELETE from several tables")) };
    if !only.joins.is_empty() {
        return Err(SqlError::unsupported("DELETE with a join"));
    }
    let (name, alias) = single_table(&only.relation)?;
    let (table, snapshot) = statement.table(name)?;
    let key = table.schema().primary_key.clone();
    let ids: Vec<Value> = matching(statement, name, alias, delete.selection.as_ref())?
        .into_iter()
        .map(|mut record| record.swap_remove(&key).unwrap_or(Value::Null))
        .collect();
    let expect = unchanged_since(&table, &ids, &snapshot)?;
    Ok(Planned::Delete(table, ids, expect))
}

/// Runs a planned write as one writer job; answers Harper's reply.
pub async fn apply(ctx: &Context, planned: Planned) -> Result<Written> {
    Ok(match planned {
        Planned::Insert(table, records) => {
            let total = records.len();
            written("inserted", "inserted_hashes", total, table.insert(ctx, records).await?)
        }
        Planned::Update(table, changes, expect) => {
            let total = changes.len();
            let options = WriteOptions { expect, at: None };
            written(
                "updated",
                "update_hashes",
                total,
                table.write_with(ctx, WriteMode::Update, changes, options).await?,
            )
        }
        Planned::Delete(table, ids, expect) => {
            let total = ids.len();
            let summary = table.delete_with(ctx, ids, WriteOptions { expect, at: None }).await?;
            let deleted = summary.deleted.len();
            let noun = if deleted == 1 && total == 1 { "record" } else { "records" };
            Written {
                message: format!("{deleted} of {total} {noun} successfully deleted"),
                keys_field: "deleted_hashes",
                keys: summary.deleted,
                skipped: summary.skipped,
            }
        }
    })
}

/// Harper's answer to an insert or update of `total` records.
fn written(verb: &str, keys_field: &'static str, total: usize, summary: lyre_core::WriteSummary) -> Written {
    Written {
        message: format!("{verb} {} of {total} records", summary.written.len()),
        keys_field,
        keys: summary.written,
        skipped: summary.skipped,
    }
}

/// The records of table `name` matching `selection`, read as a `SELECT *` would.
fn matching(
    statement: &mut Statement<'_>,
    name: &ast::ObjectName,
    alias: Option<&str>,
    selection: Option<&ast::Expr>,
) -> Result<Vec<Object>> {
    let alias = alias.map(|a| format!(" AS `{}`", a.replace('`', "``"))).unwrap_or_default();
    // Lyre writes the query's frame itself (names only) and sets the statement's
    // own parsed WHERE into it: printing the WHERE and reading it back would unescape
    // its literals a second time.
    let mut query = crate::parse::query(&format!("SELECT * FROM {}{alias}", quoted(name)))?;
    match query.body.as_mut() {
        ast::SetExpr::Select(select) => select.selection = selection.cloned(),
        _ => return Err(SqlError::invalid("the rows to write could not be selected")),
    }
    Ok(statement.query(&query)?.rows)
}

/// `name` with each part in backticks.
fn quoted(name: &ast::ObjectName) -> String {
    name.0
        .iter()
        .map(|part| match part {
            ast::ObjectNamePart::Identifier(ident) => format!("`{}`", ident.value.replace('`', "``")),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The table (and its alias) a one-table `UPDATE` or `DELETE` names.
fn single_table(factor: &ast::TableFactor) -> Result<(&ast::ObjectName, Option<&str>)> {
    match factor {
        ast::TableFactor::Table { name, alias, args: None, .. } => {
            Ok((name, alias.as_ref().map(|a| a.name.value.as_str())))
        }
        other => Err(SqlError::unsupported(format!("writing to {other}"))),
    }
}

/// The one table an `UPDATE`'s assignments read.
struct OneTable<'t> {
    alias: &'t str,
    table: &'t Table,
}

impl Scope for OneTable<'_> {
    fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<ColumnRef> {
        let schema = self.table.schema();
        let qualified = format!("{}.{}", schema.database, schema.name);
        if qualifier.is_some_and(|q| q != self.alias && q != qualified) {
            return Err(SqlError::invalid(format!("unknown column {}.{name}", qualifier.unwrap_or_default())));
        }
        if schema.primary_key != name && !schema.attributes.iter().any(|a| a.name == name) {
            return Err(SqlError::invalid(format!("unknown column {name}")));
        }
        Ok(ColumnRef { source: 0, name: name.to_string() })
    }
}
