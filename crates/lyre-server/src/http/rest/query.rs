//! Harper's REST query language: `?name=Foo&price=gt=10&select(name)&sort(-price)&limit(5)`.
//!
//! The raw (still percent-encoded) query string is parsed, so an encoded `%26` inside a
//! value never splits it. Conditions use `&` (and) or `|` (or) — not both in one
//! group — with `(...)` or `[...]` groups; a separator next to a call or at the end
//! only separates (`a|b&limit(2)` is an `|` of two conditions), as in Harper 5. Comparisons: `attr=value` (strict), `==`,
//! `!=`, `===`, `!==`, `<`, `<=`, `>`, `>=`, FIQL `=gt=` `=ge=` `=lt=` `=le=` `=eq=`
//! `=ne=` `=sw=` `=ew=` `=ct=`, chained ranges `attr=gt=1&lt=9`, trailing `*` as a
//! prefix match, `rel.attr` through a `@relationship`. Calls: `select(...)`,
//! `limit(n)`/`limit(start,end)`, `sort(a,-b)`. Values are decoded by the attribute's
//! declared type, or by a `number:`/`boolean:`/`string:`/`date:` prefix.
//! Errors carry the position in the query string.

use std::borrow::Cow;
use std::sync::Arc;

use lyre_core::catalog::TableSchema;
use lyre_core::query::{Comparator, Condition, Field, Operator, Select, Shaped, SortKey};
use lyre_core::{Code, Value};

use crate::http::error::ApiError;

/// A parsed query string.
#[derive(Debug, Default, PartialEq)]
pub struct RestQuery {
    /// How the top-level conditions combine.
    pub operator: Operator,
    /// The conditions.
    pub conditions: Vec<Condition>,
    /// `select(...)`, if given.
    pub select: Option<Select>,
    /// `sort(...)`.
    pub sort: Vec<SortKey>,
    /// From `limit(start, end)`.
    pub offset: usize,
    /// From `limit(n)` or `limit(start, end)`.
    pub limit: Option<usize>,
}

/// Finds the schema of the table a table's relationship (by name) leads to.
pub type RelatedSchema<'a> = &'a dyn Fn(&TableSchema, &str) -> Option<Arc<TableSchema>>;

/// Parses `raw` (the part after `?`) against `table`.
///
/// Clients following the URL standard percent-encode `<`, `>` (and some `!`); those
/// are operators here, never part of an attribute name, and inside a value they read
/// the same either way, so they are decoded before parsing.
pub fn parse(raw: &str, table: &TableSchema, related: RelatedSchema<'_>) -> Result<RestQuery, ApiError> {
    let plus_is_space = !reads_as_query(raw);
    let normalized = normalize_operators(raw);
    let raw = normalized.as_str();
    let query = RestQuery::default();
    let mut parser = Parser { src: raw.as_bytes(), raw, pos: 0, depth: 0, table, related, plus_is_space, query };
    if raw.is_empty() {
        return Ok(parser.query);
    }
    let (operator, conditions) = parser.group(None)?;
    parser.query.operator = operator;
    parser.query.conditions = conditions;
    Ok(parser.query)
}

/// Deepest nesting of condition groups (`(...)`, `[...]`) a query may have: parsing
/// and evaluating recurse once per level, so without a bound a long enough URL would
/// overflow the stack.
pub const MAX_NESTING: usize = 64;

struct Parser<'a> {
    src: &'a [u8],
    raw: &'a str,
    pos: usize,
    /// Groups open at `pos`.
    depth: usize,
    table: &'a TableSchema,
    related: RelatedSchema<'a>,
    /// Whether values decode as form parameters (`+` a space) or, in a query only
    /// Harper's query parser reads ([`reads_as_query`]), as URI components.
    plus_is_space: bool,
    query: RestQuery,
}

fn normalize_operators(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3).map(|c| c.to_ascii_uppercase());
        match code.as_deref() {
            Some("3C") => out.push('<'),
            Some("3E") => out.push('>'),
            Some("21") => out.push('!'),
            _ => {
                out.push('%');
                rest = &rest[i + 1..];
                continue;
            }
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}

fn syntax(message: impl std::fmt::Display, pos: usize, raw: &str) -> ApiError {
    ApiError::new(Code::BadRequest, format!("Unable to parse query, {message} at position {pos} in '{raw}'"))
}

fn is_operator_char(b: u8) -> bool {
    matches!(b, b'&' | b'|' | b'(' | b')' | b'[' | b']' | b'=' | b'!' | b'<' | b'>' | b',')
}

impl Parser<'_> {
    /// Percent-decodes query text as this query's values are ([`Parser::plus_is_space`]).
    fn decode(&self, raw: &str) -> String {
        decode_as(raw, self.plus_is_space).into_owned()
    }

    fn error(&self, message: impl std::fmt::Display) -> ApiError {
        syntax(message, self.pos, self.raw)
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// Parses terms joined by one operator until `close` (or the end).
    ///
    /// As in Harper, a separator is the group's operator only where it joins two
    /// conditions: one next to a call (`limit(2)&a|b`, `a|b&sort(x)`) or at the end
    /// (`a|b&`) only separates, so it never mixes with the conditions' operator.
    fn group(&mut self, close: Option<u8>) -> Result<(Operator, Vec<Condition>), ApiError> {
        let mut operator: Option<Operator> = None;
        // The separator read since the last term (and where), not yet known to join
        // two conditions.
        let mut pending: Option<(Operator, usize)> = None;
        let mut conditions = Vec::new();
        let mut expect_term = true;
        loop {
            match self.peek() {
                None => {
                    if close.is_some() {
                        return Err(self.error(format!("expected '{}'", char::from(close.unwrap_or(b')')))));
                    }
                    break;
                }
                Some(c) if Some(c) == close => {
                    self.pos += 1;
                    break;
                }
                Some(b'&' | b'|') if expect_term => {
                    if conditions.is_empty() && self.query_calls_only() {
                        // `?&x=1` is tolerated like a leading separator after calls.
                        self.pos += 1;
                        continue;
                    }
                    return Err(
                        self.error(format!("no comparison specified before '{}'", char::from(self.src[self.pos])))
                    );
                }
                Some(sep @ (b'&' | b'|')) => {
                    pending = Some((if sep == b'&' { Operator::And } else { Operator::Or }, self.pos));
                    self.pos += 1;
                    if matches!(self.peek(), Some(b'&' | b'|')) {
                        return Err(self.error(format!(
                            "unexpected operator '{}{}'",
                            char::from(sep),
                            char::from(self.src[self.pos])
                        )));
                    }
                    expect_term = true;
                }
                Some(_) if !expect_term => {
                    return Err(self.error(format!("expected an operator before '{}'", char::from(self.src[self.pos]))));
                }
                Some(open @ (b'(' | b'[')) => {
                    if self.depth == MAX_NESTING {
                        return Err(self.error(format!("groups nested deeper than {MAX_NESTING} levels")));
                    }
                    self.pos += 1;
                    self.depth += 1;
                    let (inner_op, inner) = self.group(Some(if open == b'(' { b')' } else { b']' }))?;
                    self.depth -= 1;
                    if !inner.is_empty() {
                        self.join(&mut operator, pending.take(), &conditions)?;
                        conditions.push(Condition::Group { operator: inner_op, conditions: inner });
                    }
                    expect_term = false;
                }
                Some(b')' | b']') => return Err(self.error(format!("unexpected '{}'", char::from(self.src[self.pos])))),
                Some(_) => {
                    let separator = pending.take();
                    // A comparison (not a call, not a chained `&lt=9`) joins the group:
                    // a mixed operator is refused before its term is read, at the
                    // separator, as a syntax error should be.
                    if !self.next_is_call() && !self.next_is_chain(operator, separator) {
                        self.join(&mut operator, separator, &conditions)?;
                    }
                    // Chaining (`attr=gt=1&lt=9`) is an `&` inside an `&` group.
                    let chaining = if operator == Some(Operator::Or) {
                        operator
                    } else {
                        separator.map(|(op, _)| op).or(operator)
                    };
                    if let Some(condition) = self.term(chaining, conditions.last())? {
                        match condition {
                            Term::Condition(c) => conditions.push(c),
                            Term::Chain(c) => {
                                // `attr=gt=1&lt=9`: merge into the previous condition.
                                let previous = conditions
                                    .pop()
                                    .ok_or_else(|| self.error("a chained comparison needs a condition before it"))?;
                                conditions
                                    .push(Condition::Group { operator: Operator::And, conditions: vec![previous, c] });
                            }
                        }
                    }
                    expect_term = false;
                }
            }
        }
        Ok((operator.unwrap_or(Operator::And), conditions))
    }

    /// Whether the term at the position is a call (`name(`).
    fn next_is_call(&self) -> bool {
        let name_end =
            self.src[self.pos..].iter().position(|b| is_operator_char(*b)).map_or(self.src.len(), |n| self.pos + n);
        self.src.get(name_end) == Some(&b'(')
    }

    /// Whether the term at the position chains a range onto the previous condition
    /// (`&lt=9` after `attr=gt=1`): a bare `lt`, `le`, `gt` or `ge` that names no
    /// attribute, after `&` in a group that is not an `|`.
    fn next_is_chain(&self, operator: Option<Operator>, separator: Option<(Operator, usize)>) -> bool {
        let name_end =
            self.src[self.pos..].iter().position(|b| is_operator_char(*b)).map_or(self.src.len(), |n| self.pos + n);
        let name = &self.raw[self.pos..name_end];
        operator != Some(Operator::Or)
            && separator.is_none_or(|(op, _)| op == Operator::And)
            && matches!(name, "lt" | "le" | "gt" | "ge")
            && self.table.attribute(name).is_none()
            && self.src.get(name_end) == Some(&b'=')
            && !matches!(self.src.get(name_end + 1), Some(b'='))
    }

    /// Makes `separator` the group's operator when it joins a new condition to the
    /// ones before it; refuses a group that mixes `&` and `|`.
    fn join(
        &self,
        operator: &mut Option<Operator>,
        separator: Option<(Operator, usize)>,
        before: &[Condition],
    ) -> Result<(), ApiError> {
        let Some((separator, at)) = separator.filter(|_| !before.is_empty()) else { return Ok(()) };
        if operator.is_some_and(|o| o != separator) {
            return Err(syntax("Can not mix operators within a condition grouping", at, self.raw));
        }
        *operator = Some(separator);
        Ok(())
    }

    fn query_calls_only(&self) -> bool {
        self.query.select.is_some() || self.query.limit.is_some() || !self.query.sort.is_empty()
    }

    /// One comparison or call. Calls record themselves and return `None`.
    fn term(&mut self, operator: Option<Operator>, previous: Option<&Condition>) -> Result<Option<Term>, ApiError> {
        let start = self.pos;
        while self.peek().is_some_and(|b| !is_operator_char(b)) {
            self.pos += 1;
        }
        let name = self.decode(&self.raw[start..self.pos]);
        if self.peek() == Some(b'(') {
            self.pos += 1;
            self.call(&name, start)?;
            return Ok(None);
        }
        if name.is_empty() {
            return Err(match self.peek() {
                Some(c) => self.error(format!("attribute must be specified before comparator {}", char::from(c))),
                None => self.error("expected a comparison"),
            });
        }
        let comparator = self.comparator()?;
        let Some(comparator) = comparator else {
            // A bare name (`?flag`) compares nothing; Harper answers with no match, but
            // still refuses a name that is no attribute.
            if self.table.attribute(&name).is_none() && !name.contains('.') {
                return Err(ApiError::new(Code::NotFound, format!("{name} is not a defined attribute")));
            }
            return Ok(Some(Term::Condition(Condition::Group { operator: Operator::Or, conditions: Vec::new() })));
        };
        let value_start = self.pos;
        while self.peek().is_some_and(|b| !matches!(b, b'&' | b'|' | b')' | b']')) {
            self.pos += 1;
        }
        let raw_value = &self.raw[value_start..self.pos];
        // `attr=gt=1&lt=9`: `lt` names no attribute but a comparator; chain it.
        let chained = operator != Some(Operator::Or)
            && self.table.attribute(&name).is_none()
            && matches!(name.as_str(), "lt" | "le" | "gt" | "ge")
            && comparator.0 == Op::Strict;
        if chained {
            let Some(Condition::Compare { attribute, .. }) = previous.and_then(last_compare) else {
                return Err(syntax(format!("{name} chains no comparison"), start, self.raw));
            };
            let attribute = attribute.clone();
            let op = match name.as_str() {
                "lt" => Comparator::LessThan,
                "le" => Comparator::LessThanEqual,
                "gt" => Comparator::GreaterThan,
                _ => Comparator::GreaterThanEqual,
            };
            let value = self.typed_value(&attribute, self.table, raw_value, value_start)?;
            return Ok(Some(Term::Chain(Condition::Compare { attribute, comparator: op, value })));
        }
        self.condition_on(self.table, &name, comparator, raw_value, value_start).map(|c| Some(Term::Condition(c)))
    }

    /// Reads the operator after an attribute name: `None` when there is none.
    fn comparator(&mut self) -> Result<Option<(Op, Comparator)>, ApiError> {
        let rest = &self.src[self.pos..];
        let (len, op) = match rest {
            [b'=', b'=', b'=', ..] => (3, (Op::Strict, Comparator::Equals)),
            [b'!', b'=', b'=', ..] => (3, (Op::Strict, Comparator::NotEqual)),
            [b'=', b'=', ..] => (2, (Op::Typed, Comparator::Equals)),
            [b'!', b'=', ..] => (2, (Op::Typed, Comparator::NotEqual)),
            [b'<', b'=', ..] => (2, (Op::Typed, Comparator::LessThanEqual)),
            [b'>', b'=', ..] => (2, (Op::Typed, Comparator::GreaterThanEqual)),
            [b'<', ..] => (1, (Op::Typed, Comparator::LessThan)),
            [b'>', ..] => (1, (Op::Typed, Comparator::GreaterThan)),
            [b'=', ..] => {
                // FIQL `=op=`: a short name between two `=`.
                let name_end = rest[1..].iter().position(|b| is_operator_char(*b)).map(|i| i + 1);
                if let Some(end) = name_end.filter(|end| rest.get(*end) == Some(&b'=') && *end > 1) {
                    let fiql = std::str::from_utf8(&rest[1..end]).unwrap_or_default();
                    if fiql.len() > 2 {
                        return Err(self.error(format!("invalid FIQL operator {fiql}")));
                    }
                    let comparator = match fiql {
                        "eq" => Comparator::Equals,
                        "ne" => Comparator::NotEqual,
                        "lt" => Comparator::LessThan,
                        "le" => Comparator::LessThanEqual,
                        "gt" => Comparator::GreaterThan,
                        "ge" => Comparator::GreaterThanEqual,
                        "sw" => Comparator::StartsWith,
                        "ew" => Comparator::EndsWith,
                        "ct" => Comparator::Contains,
                        other => return Err(ApiError::bad_request(format!("Unknown query comparator \"{other}\""))),
                    };
                    (end + 1, (Op::Typed, comparator))
                } else {
                    (1, (Op::Strict, Comparator::Equals))
                }
            }
            _ => return Ok(None),
        };
        self.pos += len;
        Ok(Some(op))
    }

    /// A comparison of `name` on `table`, where `rel.attr` (and `a.b.c`) compares on
    /// the tables the relationships lead to.
    fn condition_on(
        &self,
        table: &TableSchema,
        name: &str,
        (op, comparator): (Op, Comparator),
        raw_value: &str,
        value_start: usize,
    ) -> Result<Condition, ApiError> {
        let Some((head, tail)) = name.split_once('.').filter(|_| table.attribute(name).is_none()) else {
            return self.compare_on(table, name, op, comparator, raw_value, value_start);
        };
        if tail.matches('.').count() >= MAX_PATH_DEPTH {
            return Err(syntax(
                format!("relationship path nested deeper than {MAX_PATH_DEPTH} levels"),
                value_start,
                self.raw,
            ));
        }
        if let Some(target) = (self.related)(table, head) {
            let inner = self.condition_on(&target, tail, (op, comparator), raw_value, value_start)?;
            return Ok(Condition::Related { relationship: head.to_string(), condition: Box::new(inner) });
        }
        if table.attribute(head).is_some() {
            return Err(ApiError::bad_request(format!("Unable to query by attribute [\"{head}\",\"{tail}\"]")));
        }
        Err(ApiError::new(Code::NotFound, format!("{} is not a defined attribute", name.replace('.', ","))))
    }

    fn compare_on(
        &self,
        table: &TableSchema,
        name: &str,
        op: Op,
        comparator: Comparator,
        raw_value: &str,
        value_start: usize,
    ) -> Result<Condition, ApiError> {
        if table.attribute(name).is_none() {
            return Err(ApiError::new(Code::NotFound, format!("{name} is not a defined attribute")));
        }
        let mut comparator = comparator;
        let value =
            if op == Op::Typed && comparator == Comparator::Equals && raw_value.ends_with('*') && raw_value.len() > 1 {
                let prefix = &raw_value[..raw_value.len() - 1];
                if prefix.contains('*') {
                    return Err(syntax("a wildcard is only allowed at the end of a value", value_start, self.raw));
                }
                comparator = Comparator::StartsWith;
                Value::String(self.decode(prefix))
            } else if op == Op::Strict {
                coerce(table, name, &self.decode(raw_value))?
            } else {
                self.typed_value(name, table, raw_value, value_start)?
            };
        Ok(Condition::Compare { attribute: name.to_string(), comparator, value })
    }

    /// Decodes a typed value: `null`, `number:`, `boolean:`, `string:`, `date:`
    /// prefixes, else by the attribute's declared type.
    fn typed_value(&self, name: &str, table: &TableSchema, raw: &str, at: usize) -> Result<Value, ApiError> {
        let text = self.decode(raw);
        if text == "null" {
            return Ok(Value::Null);
        }
        if let Some((kind, rest)) = text.split_once(':') {
            match kind {
                "string" => return Ok(Value::String(rest.to_string())),
                "number" => {
                    let n = rest
                        .strip_prefix('$')
                        .map(|b36| i64::from_str_radix(b36, 36).map(Value::Int).ok())
                        .unwrap_or_else(|| number(rest));
                    return n.ok_or_else(|| syntax(format!("'{rest}' is not a number"), at, self.raw));
                }
                "boolean" => return Ok(Value::Bool(rest == "true")),
                "date" => return date(rest).ok_or_else(|| syntax(format!("'{rest}' is not a date"), at, self.raw)),
                _ => {}
            }
        }
        coerce(table, name, &text)
    }

    fn call(&mut self, name: &str, start: usize) -> Result<(), ApiError> {
        let args_start = self.pos;
        let mut depth = 0usize;
        while let Some(b) = self.peek() {
            match b {
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' if depth > 0 => depth -= 1,
                b')' => break,
                _ => {}
            }
            self.pos += 1;
        }
        if self.peek() != Some(b')') {
            return Err(self.error(format!("expected ')' to close {name}(")));
        }
        let args = &self.raw[args_start..self.pos];
        self.pos += 1;
        match name {
            "select" => {
                self.query.select = Some(select(&self.decode(args)).map_err(|m| syntax(m, args_start, self.raw))?);
            }
            "limit" => {
                let parts: Vec<&str> = args.split(',').map(str::trim).collect();
                let numbers: Result<Vec<usize>, _> =
                    parts.iter().map(|p| self.decode(p).parse::<i64>().map(|n| n.max(0) as usize)).collect();
                let numbers = numbers.map_err(|_| syntax("limit arguments must be integers", args_start, self.raw))?;
                match numbers.as_slice() {
                    [n] => self.query.limit = Some(*n),
                    [start, end] => {
                        self.query.offset = *start;
                        self.query.limit = Some(end.saturating_sub(*start));
                    }
                    _ => return Err(syntax("limit must have 1 or 2 arguments", start, self.raw)),
                }
            }
            "sort" => {
                for part in args.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let part = self.decode(part);
                    let (descending, attribute) = match part.strip_prefix('-') {
                        Some(a) => (true, a.to_string()),
                        None => (false, part.strip_prefix('+').unwrap_or(&part).trim().to_string()),
                    };
                    // `rel.attr` sorts by a related record's attribute; the search checks the path.
                    let first = attribute.split('.').next().unwrap_or_default();
                    let known = self.table.attribute(&attribute).is_some()
                        || (attribute.contains('.') && self.table.relationships.iter().any(|r| r.name == first));
                    if !known {
                        return Err(ApiError::new(Code::NotFound, format!("{attribute} is not a defined attribute")));
                    }
                    self.query.sort.push(SortKey { attribute, descending });
                }
            }
            "group-by" | "groupBy" => return Err(syntax("group by is not implemented yet", start, self.raw)),
            other => return Err(syntax(format!("unknown query function call {other}"), start, self.raw)),
        }
        Ok(())
    }
}

/// The last plain comparison in `condition` (to chain onto).
fn last_compare(condition: &Condition) -> Option<&Condition> {
    match condition {
        Condition::Compare { .. } => Some(condition),
        Condition::Group { operator: Operator::And, conditions } => conditions.last().and_then(last_compare),
        _ => None,
    }
}

enum Term {
    Condition(Condition),
    Chain(Condition),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `=`, `===`, `!==`: the value as text, coerced to the declared type.
    Strict,
    /// `==`, `<`, FIQL ...: typed decoding with prefixes.
    Typed,
}

/// Percent-decodes query-string text, with `+` as a space (form encoding, as
/// browsers send).
pub fn decode(raw: &str) -> String {
    decode_as(raw, true).into_owned()
}

/// Percent-decodes a URL path segment (a record's id): `+` stays a plus, as
/// Harper's `decodeURIComponent` keeps it; only a query string's form encoding
/// makes it a space. Borrowed when there is nothing to decode (most ids).
pub fn decode_path(raw: &str) -> Cow<'_, str> {
    decode_as(raw, false)
}

fn decode_as(raw: &str, plus_is_space: bool) -> Cow<'_, str> {
    let encoded = match plus_is_space {
        true => memchr::memchr2(b'%', b'+', raw.as_bytes()),
        false => memchr::memchr(b'%', raw.as_bytes()),
    };
    if encoded.is_none() {
        return Cow::Borrowed(raw);
    }
    if !plus_is_space {
        return percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
    }
    let spaced = raw.replace('+', " ");
    Cow::Owned(percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned())
}

/// Whether Harper reads query string `raw` with its query parser, where values are
/// decoded as URI components (`+` a plus), rather than as form parameters (`+` a
/// space): when it holds a group, an `|`, a `!`, `<`, `>`, a `.` (a property path),
/// or an operator of the `==` or `=gt=` kind (Harper's `NEEDS_PARSER`).
fn reads_as_query(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| match b {
        b'(' | b')' | b'[' | b']' | b'|' | b'!' | b'<' | b'>' | b'.' => true,
        b'=' => {
            let word = bytes[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count();
            bytes.get(i + 1 + word) == Some(&b'=')
        }
        _ => false,
    })
}

fn number(text: &str) -> Option<Value> {
    text.parse::<i64>()
        .map(Value::Int)
        .ok()
        .or_else(|| text.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float))
}

/// A date as Harper's query grammar reads one: epoch milliseconds, or ISO 8601
/// (with a zone offset or `Z`, without one as UTC, or a date alone).
fn date(text: &str) -> Option<Value> {
    number(text).or_else(|| lyre_core::parse_iso8601(text).map(Value::Float))
}

/// Converts query text to the attribute's declared type (numbers for numeric types,
/// booleans for `Boolean`, text for `String`/`ID`); untyped attributes take numbers
/// and booleans when the text is one. As Harper's `coerceType`: for a type other
/// than `String` and `Any`, `null` and the empty text are null; an `Int` or `Long` may be
/// written in base 36 after `$`; a `Boolean` in any case; a `Date` as epoch
/// milliseconds or an ISO-8601 time.
pub(crate) fn coerce(table: &TableSchema, name: &str, text: &str) -> Result<Value, ApiError> {
    let declared = table.attribute(name).and_then(|a| a.type_name.as_deref());
    let invalid = |expected: &str| {
        ApiError::bad_request(format!("Invalid value for attribute {name}: \"{text}\", expecting {expected}"))
    };
    match declared {
        Some("String" | "ID") => Ok(Value::String(text.to_string())),
        Some(t) if t != "Any" && (text.is_empty() || text == "null") => Ok(Value::Null),
        Some(t @ ("Int" | "Long")) if text.starts_with('$') => {
            i64::from_str_radix(&text[1..], 36).map(Value::Int).map_err(|_| invalid(t))
        }
        Some(t @ ("Int" | "Long" | "BigInt")) => text.parse::<i64>().map(Value::Int).map_err(|_| invalid(t)),
        Some(t @ "Float") => number(text).ok_or_else(|| invalid(t)),
        Some(t @ "Date") => date(text).ok_or_else(|| invalid(t)),
        Some("Boolean") if text.eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
        Some("Boolean") if text.eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
        Some("Boolean") => Err(invalid("Boolean")),
        _ => Ok(match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            other => number(other).unwrap_or_else(|| Value::String(other.to_string())),
        }),
    }
}

/// `select(a,b)`, `select(a)`, `select([a,b])`, `select(a,)`, `select(rel{x,y})`.
fn select(args: &str) -> Result<Select, String> {
    let trimmed = args.trim();
    let (shape, body) = if let Some(inner) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        (Shaped::Array, inner)
    } else {
        (Shaped::Object, trimmed)
    };
    let trailing_comma = body.trim_end().ends_with(',');
    let fields = fields(body, 0)?;
    let shape = match (shape, fields.len(), trailing_comma) {
        (Shaped::Object, 1, false) => Shaped::Value,
        (shape, _, _) => shape,
    };
    if fields.iter().any(|f| f.name == "*") {
        return Ok(Select::All);
    }
    Ok(Select::Fields { fields, shape })
}

/// Deepest `{...}` nesting of a `select`, and longest `a.b.c` relationship path of a
/// condition: each level may follow a relationship, and each relationship multiplies
/// the records read, so a deep chain from a table back to itself could read a table
/// many times over for one request.
pub const MAX_PATH_DEPTH: usize = 6;

/// A comma-separated field list with `{...}` nesting, `level` levels down.
fn fields(text: &str, level: usize) -> Result<Vec<Field>, String> {
    if level == MAX_PATH_DEPTH {
        return Err(format!("select fields nested deeper than {MAX_PATH_DEPTH} levels"));
    }
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let bytes = text.as_bytes();
    let mut push = |piece: &str| -> Result<(), String> {
        let piece = piece.trim();
        if piece.is_empty() {
            return Ok(());
        }
        match piece.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').ok_or_else(|| format!("unclosed '{{' in select field {piece}"))?;
                out.push(Field { name: name.trim().to_string(), nested: Some(fields(inner, level + 1)?) });
            }
            None => out.push(Field { name: piece.to_string(), nested: None }),
        }
        Ok(())
    };
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => depth = depth.checked_sub(1).ok_or("unbalanced '}' in select")?,
            b',' if depth == 0 => {
                push(&text[start..i])?;
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '{' in select".to_string());
    }
    push(&text[start..])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `date(...)` and a `Date` attribute's text read epoch milliseconds and ISO
    /// 8601 with or without a zone offset, as Harper's `new Date(text)` does.
    #[test]
    fn dates_read_with_and_without_zone_offsets() {
        let midnight = 1_704_067_200_000.0; // 2024-01-01T00:00:00Z
        for text in [
            "2024-01-01",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00.000Z",
            "2024-01-01T02:00:00+02:00",
            "2023-12-31T19:00:00-05:00",
            "2024-01-01T00:00:00",
        ] {
            assert_eq!(date(text), Some(Value::Float(midnight)), "{text}");
        }
        assert_eq!(date("1704067200000"), Some(Value::Int(1_704_067_200_000)));
        assert_eq!(date("2024-13-01"), None);
        assert_eq!(date("soon"), None);
    }
}
