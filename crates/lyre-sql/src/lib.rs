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
mod select;
mod write;

use std::sync::Arc;

use lyre_core::{Context, Engine, Object};
use sqlparser::ast;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserError};

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
    let statement = parse(sql)?;
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

/// Parses exactly one statement.
fn parse(sql: &str) -> Result<ast::Statement> {
    let mut statements = Parser::new(&MySqlDialect {})
        .with_recursion_limit(64)
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_statements())
        .map_err(|err| syntax_error(sql, err))?;
    match statements.len() {
        0 => Err(SqlError::invalid("the SQL holds no statement")),
        1 => Ok(statements.remove(0)),
        n => Err(SqlError::invalid(format!("the SQL holds {n} statements; send one per request"))),
    }
}

/// Parses a query Lyre wrote itself (the reads of `UPDATE` and `DELETE`).
pub(crate) fn parse_query(sql: &str) -> Result<ast::Query> {
    match parse(sql)? {
        ast::Statement::Query(query) => Ok(*query),
        _ => Err(SqlError::invalid("not a query")),
    }
}

/// Harper's syntax-error message, with the line and column the parser stopped at.
fn syntax_error(sql: &str, err: ParserError) -> SqlError {
    let detail = match err {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "the statement nests too deeply".to_string(),
    };
    // sqlparser ends its messages with " at Line: L, Column: C".
    let position = detail.rsplit_once(" at Line: ").and_then(|(_, at)| {
        let (line, column) = at.split_once(", Column: ")?;
        Some((line.trim().parse::<usize>().ok()?, column.trim().parse::<usize>().ok()?))
    });
    // A statement cut short ends at its last character.
    let position = position.or_else(|| {
        let lines: Vec<&str> = sql.split('\n').collect();
        Some((lines.len(), lines.last().map_or(0, |l| l.chars().count()) + 1))
    });
    let context = position.map(|(line, column)| near(sql, line, column)).unwrap_or_default();
    let at = position.map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default();
    SqlError::Syntax(format!(
        "Invalid SQL at: {context}{at}. Please ensure your SQL is valid. Try adding backticks to reserved words and schema table references. {detail}"
    ))
}

/// Up to 20 characters either side of `line`:`column` (1-based), on one line.
fn near(sql: &str, line: usize, column: usize) -> String {
    let offset: usize = sql.split('\n').take(line.saturating_sub(1)).map(|l| l.chars().count() + 1).sum::<usize>()
        + column.saturating_sub(1);
    let chars: Vec<char> = sql.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    let start = offset.saturating_sub(20).min(chars.len());
    let end = offset.saturating_add(20).min(chars.len());
    let prefix = if start > 0 { "..." } else { "" };
    format!("{prefix}{}", chars[start..end].iter().collect::<String>())
}

/// The kind of a statement, for refusals.
fn kind(statement: &ast::Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    format!("the statement {}", words.join(" "))
}
