//! Harper's `sql` operation for Lyre.
//!
//! A statement is parsed by `sqlparser` (MySQL's dialect: backticks quote names and
//! double quotes make strings, as in Harper), compiled against the tables it names
//! (`expr.rs`), and run over lyre-core's table API: `select.rs` reads (pushing
//! conditions into indexed searches, joining, grouping), `write.rs` turns `INSERT`,
//! `UPDATE` and `DELETE` into one writer job each. Every read of a statement uses one
//! snapshot per database. No second copy of the data exists.

mod dates;
mod error;
mod expr;
mod functions;
mod geo;
mod ops;
mod parse;
mod select;
mod write;

use std::sync::Arc;

use lyre_core::{Context, Engine, Object};
use sqlparser::ast;

pub use error::{Result, SqlError};
pub use select::DEFAULT_DATABASE;
pub use write::Written;

/// Intermediate results one statement may hold by default (joined rows, groups,
/// rows to sort), in bytes.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 * 1024 * 1024;

/// What a statement answered.
#[derive(Debug)]
pub enum Outcome {
    /// A query's rows.
    Rows(Vec<Object>),
    /// A write's summary.
    Written(Written),
    /// `EXPLAIN`: how each table is read.
    Plan(Vec<String>),
}

/// Runs one SQL statement as `ctx`, holding at most `budget` bytes of intermediate
/// results. Reads run on the blocking pool; a write's reads too, then its writer
/// job.
pub async fn execute(engine: Arc<Engine>, ctx: Context, sql: &str, budget: usize) -> Result<Outcome> {
    let statement = parse::statement(sql)?;
    let now = lyre_core::now_ms();
    let blocking_ctx = ctx.clone();
    let planned = tokio::task::spawn_blocking(move || -> Result<Step> {
        let mut run = select::Statement::new(&engine, &blocking_ctx, budget, now);
        Ok(match &statement {
            ast::Statement::Query(query) => Step::Done(Outcome::Rows(run.query(query)?.rows)),
            ast::Statement::Explain { statement, .. } => match statement.as_ref() {
                ast::Statement::Query(query) => {
                    run.query(query)?;
                    Step::Done(Outcome::Plan(run.plan))
                }
                other => return Err(SqlError::unsupported(format!("EXPLAIN of {}", kind(other)))),
            },
            ast::Statement::Insert(insert) => Step::Write(write::plan_insert(&mut run, insert)?),
            ast::Statement::Update(update) => Step::Write(write::plan_update(&mut run, update)?),
            ast::Statement::Delete(delete) => Step::Write(write::plan_delete(&mut run, delete)?),
            other => return Err(SqlError::unsupported(kind(other))),
        })
    })
    .await
    .map_err(|err| SqlError::Core(lyre_core::Error::Stopped(err.to_string())))??;
    match planned {
        Step::Done(outcome) => Ok(outcome),
        Step::Write(planned) => Ok(Outcome::Written(write::apply(&ctx, planned).await?)),
    }
}

/// A statement after its reads: answered, or a write for the writer.
enum Step {
    Done(Outcome),
    Write(write::Planned),
}

/// The kind of a statement, for refusals.
fn kind(statement: &ast::Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    format!("the statement {}", words.join(" "))
}
