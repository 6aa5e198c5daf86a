//! Reading SQL text: exactly one statement, parsed by `sqlparser` with MySQL's
//! dialect (backticks quote names, double quotes make strings, as in Harper), with
//! Harper's syntax-error message and the line and column.

use sqlparser::ast;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserError};

use crate::error::{Result, SqlError};

/// Parses exactly one statement.
pub(crate) fn statement(sql: &str) -> Result<ast::Statement> {
    let mut statements = Parser::new(&MySqlDialect {})
        .with_recursion_limit(64)
        .try_with_sql(&literal_backslashes(sql))
        .and_then(|mut parser| parser.parse_statements())
        .map_err(|err| syntax_error(sql, err))?;
    match statements.len() {
        0 => Err(SqlError::invalid("the SQL holds no statement")),
        1 => Ok(statements.remove(0)),
        n => Err(SqlError::invalid(format!("the SQL holds {n} statements; send one per request"))),
    }
}

/// `sql` with each backslash inside a string literal doubled, so MySQL's dialect
/// (which reads `\n`, `\t`, … as escapes) keeps it: a backslash in a Harper SQL
/// string is itself (`'C:\temp'`, `LIKE '%\_%' ESCAPE '\'`), as Harper's parser
/// reads it. Before the literal's own quote it is an escape when the statement
/// quotes again later (`'It\'s'` is `It's`, as Harper's parser and MySQL-style
/// escaping of values have it) and a backslash ending the literal otherwise
/// (`ESCAPE '\'`), as Harper's parser decides. Comments (`--` and a space, `#`,
/// `/* */`) and backtick names are passed over as they are.
fn literal_backslashes(sql: &str) -> std::borrow::Cow<'_, str> {
    if !sql.contains('\\') {
        return std::borrow::Cow::Borrowed(sql);
    }
    // Where each quote last stands: a `\'` before it escapes the quote.
    let last_single = sql.rfind('\'');
    let last_double = sql.rfind('"');
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    // The quote of the literal or name being read, if any.
    let mut inside: Option<char> = None;
    while let Some((at, c)) = chars.next() {
        match inside {
            Some(quote) => {
                if c == '\\' && quote != '`' && chars.peek().map(|&(_, next)| next) == Some(quote) {
                    let last = if quote == '\'' { last_single } else { last_double };
                    if last.is_some_and(|last| last > at + 1) {
                        // An escaped quote: the dialect reads it as the quote.
                        out.push(c);
                        out.push(quote);
                        chars.next();
                        continue;
                    }
                }
                if c == '\\' && quote != '`' {
                    out.push('\\');
                } else if c == quote {
                    if chars.peek().map(|&(_, next)| next) == Some(quote) {
                        // A doubled quote stands for one, inside the literal.
                        out.push(c);
                        chars.next();
                    } else {
                        inside = None;
                    }
                }
                out.push(c);
            }
            None => {
                out.push(c);
                let next = chars.peek().map(|&(_, next)| next);
                let comment = match c {
                    '\'' | '"' | '`' => {
                        inside = Some(c);
                        None
                    }
                    // MySQL's `--` comment needs whitespace after it (`5--1` is arithmetic).
                    '-' if next == Some('-') && sql[at + 2..].chars().next().is_none_or(char::is_whitespace) => {
                        Some("\n")
                    }
                    '#' => Some("\n"),
                    '/' if next == Some('*') => Some("*/"),
                    _ => None,
                };
                if let Some(end) = comment {
                    // Copied up to and with its end.
                    let rest = &sql[at + c.len_utf8()..];
                    let length = rest.find(end).map_or(rest.len(), |found| found + end.len());
                    out.push_str(&rest[..length]);
                    while chars.peek().is_some_and(|&(next, _)| next < at + c.len_utf8() + length) {
                        chars.next();
                    }
                }
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Parses a query Lyre wrote itself (the reads of `UPDATE` and `DELETE`).
pub(crate) fn query(sql: &str) -> Result<ast::Query> {
    match statement(sql)? {
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

#[cfg(test)]
mod tests {
    use super::literal_backslashes;

    /// Backslashes in literals are kept (doubled for the dialect), an escaped quote
    /// is left an escape while the statement quotes again later, and comments and
    /// names are copied as they are.
    #[test]
    fn backslashes_in_literals_are_themselves() {
        let cases = [
            (r"SELECT 'C:\temp'", r"SELECT 'C:\\temp'"),
            (r"SELECT 'It\'s', 'a'", r"SELECT 'It\'s', 'a'"),
            (r"x LIKE '%\_%' ESCAPE '\'", r"x LIKE '%\\_%' ESCAPE '\\'"),
            (r#"SELECT "a\"b""#, r#"SELECT "a\"b""#),
            (r"SELECT 'it''s\n'", r"SELECT 'it''s\\n'"),
            (
                "SELECT 1 -- it's \\ here\nFROM t WHERE a = 'x\\y'",
                "SELECT 1 -- it's \\ here\nFROM t WHERE a = 'x\\\\y'",
            ),
            (r"SELECT 5--1, 'a\tb'", r"SELECT 5--1, 'a\\tb'"),
            (r"SELECT `we\ird` /* 'x\ */ FROM t # 'y\", r"SELECT `we\ird` /* 'x\ */ FROM t # 'y\"),
        ];
        for (given, expected) in cases {
            assert_eq!(literal_backslashes(given), expected, "{given}");
        }
    }
}
