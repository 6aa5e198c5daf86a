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
/// results. Its parsing and reads (a write's too) run on a thread of their own, then
/// a write's writer job. An `UPDATE` or `DELETE` whose rows changed between its
/// read and its write is worked out again from a new snapshot, up to
/// [`WRITE_ATTEMPTS`] times in all (`write.rs`).
pub async fn execute(engine: Arc<Engine>, ctx: Context, sql: &str, budget: usize) -> Result<Outcome> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::invalid(format!(
            "the SQL is {} bytes; a statement may be at most {MAX_SQL_BYTES}",
            sql.len()
        )));
    }
    let mut attempt = 1;
    loop {
        let planned = plan(engine.clone(), ctx.clone(), sql.to_string(), budget).await?;
        let planned = match planned {
            Step::Done(outcome) => return Ok(outcome),
            Step::Write(planned) => planned,
        };
        match write::apply(&ctx, planned).await {
            Err(SqlError::Core(lyre_core::Error::PreconditionFailed(_))) if attempt < WRITE_ATTEMPTS => {
                // Clients racing for one row take turns rather than meeting again
                // at once: a pause growing with the attempts, jittered by the clock.
                let jitter = (lyre_core::now_ms().fract() * 1000.0) as u64;
                tokio::time::sleep(std::time::Duration::from_micros(jitter * attempt.min(8) as u64)).await;
                attempt += 1;
            }
            Err(SqlError::Core(lyre_core::Error::PreconditionFailed(_))) => {
                return Err(SqlError::Core(lyre_core::Error::Conflict(format!(
                    "the rows this statement writes kept changing while it ran ({WRITE_ATTEMPTS} attempts); retry it"
                ))));
            }
            answered => return answered.map(Outcome::Written),
        }
    }
}

/// How many times a write statement is worked out before a conflict is reported.
pub const WRITE_ATTEMPTS: usize = 32;

/// Parses `sql` and runs its reads (a query whole; a write's rows worked out) on a
/// thread of its own.
async fn plan(engine: Arc<Engine>, blocking_ctx: Context, sql: String, budget: usize) -> Result<Step> {
    let now = lyre_core::now_ms();
    let (answer, answered) = tokio::sync::oneshot::channel();
    // Parsing, compiling and dropping a statement recurse once per level of its
    // expressions (sqlparser builds a long AND or OR chain as a deep tree), so a
    // statement runs on a thread whose stack holds the deepest one MAX_SQL_BYTES
    // can spell; the stack is reserved, and only what is used is touched.
    std::thread::Builder::new()
        .name("lyre-sql".into())
        .stack_size(STATEMENT_STACK_BYTES)
        .spawn(move || {
            let planned = (|| -> Result<Step> {
                let statement = parse::statement(&sql)?;
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
            })();
            // The caller may have gone; the answer is then dropped with it.
            let _ = answer.send(planned);
        })
        .map_err(|err| SqlError::Core(lyre_core::Error::Stopped(format!("starting a SQL thread: {err}"))))?;
    answered.await.map_err(|_| SqlError::Core(lyre_core::Error::Stopped("the SQL thread stopped".into())))?
}

/// The longest SQL text a statement may have.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// The stack of a statement's thread: room for the deepest tree [`MAX_SQL_BYTES`]
/// can spell (two bytes a level, as `1+1+…`).
const STATEMENT_STACK_BYTES: usize = 512 << 20;

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
