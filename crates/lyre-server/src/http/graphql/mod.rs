//! GraphQL querying (`graphql: true` in a component's `config.yaml`): `POST /graphql`
//! and `GET /graphql?query=…` on the REST port answer queries over the exported
//! tables, as Harper's `server/graphqlQuerying.ts` does.
//!
//! Each top-level field names an export; its arguments are equality conditions (an
//! object argument reaches through a relationship: `Dog(owner: {name: "Ann"})`);
//! its selection is the attributes and relationships to return, nested as deep as
//! the relationships go. Named operations, variables (defaults, non-null checks),
//! fragments (spread and inline, nested), aliases and `__typename` are understood.
//! Mutations and subscriptions are refused. Fields are checked against the tables'
//! schemas before anything runs (a field a schema-defined table does not have is a
//! validation error, with its line and column); the searches run as the request's
//! user, so roles apply as over REST.
//!
//! Errors take GraphQL's shape (`{"errors": [{"message", "locations"}]}`). Their
//! status follows GraphQL over HTTP: with `Accept: application/json`, a document
//! that cannot be run is answered 200; otherwise (`application/graphql-response+json`,
//! the default) 400. A malformed request (no `query`, bad `variables`) is 400 either
//! way, a method other than GET and POST 405.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apollo_compiler::Node;
use apollo_compiler::ast::{self, Definition, OperationType, Selection};
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::catalog::TableSchema;
use lyre_core::query::{Comparator, Condition, Field, Operator, Query, Select, Shaped};
use lyre_core::{Context, Object, Value};

pub(crate) mod documents;

use documents::SyntaxError;

use crate::app::AppState;
use crate::components::Exports;
use crate::http::error::ApiError;

/// The largest answer a query may build (its results are held until it is sent).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// How deep selections may nest through relationships and objects (REST's bound).
const MAX_DEPTH: usize = crate::http::rest::query::MAX_PATH_DEPTH;

/// The most fields an operation may select, fragments spread out (a document of a
/// few lines can otherwise spread to billions).
const MAX_FIELDS: usize = 10_000;

/// The content type of GraphQL answers.
const GRAPHQL_RESPONSE: &str = "application/graphql-response+json; charset=utf-8";

/// Whether `path` is the GraphQL endpoint.
pub fn is_endpoint(path: &str) -> bool {
    path == "/graphql" || path == "/graphql/"
}

/// What went wrong, and how it is answered.
#[derive(Debug)]
enum Failure {
    /// The HTTP request itself (status, message).
    Request(StatusCode, String),
    /// The document cannot be run: a syntax error, an unknown field, a missing
    /// variable (message, line and column when known).
    Document(String, Option<(usize, usize)>),
    /// Running it failed (a refused permission, a storage error).
    Run(ApiError),
}

impl From<ApiError> for Failure {
    fn from(err: ApiError) -> Self {
        Failure::Run(err)
    }
}

impl From<lyre_core::Error> for Failure {
    fn from(err: lyre_core::Error) -> Self {
        Failure::Run(err.into())
    }
}

/// Where a node is in the document (line and column), when known.
type Locate<'a> = &'a dyn Fn(Option<apollo_compiler::parser::SourceSpan>) -> Option<(usize, usize)>;

fn invalid(message: impl Into<String>, at: Option<(usize, usize)>) -> Failure {
    Failure::Document(message.into(), at)
}

/// Answers a GraphQL request; `body` is taken only by a POST.
pub async fn handle(
    state: &Arc<AppState>,
    exports: &Exports,
    ctx: Context,
    parts: &Parts,
    body: &mut Option<Body>,
) -> Response {
    let json_errors_ok = json_errors_ok(parts);
    let answered = async {
        let request = read_request(state, parts, body).await?;
        let operation = Operation::plan(state, exports, &request)?;
        operation.run(&ctx).await
    }
    .await;
    match answered {
        Ok(bytes) => ([(header::CONTENT_TYPE, GRAPHQL_RESPONSE)], bytes).into_response(),
        Err(failure) => failure_response(failure, json_errors_ok),
    }
}

/// A request to the endpoint refused before it is read (no login), in GraphQL's
/// error shape with the refusal's status.
pub fn refused(err: ApiError, parts: &Parts) -> Response {
    failure_response(Failure::Run(err), json_errors_ok(parts))
}

/// Whether the client takes errors as plain JSON (`Accept: application/json`),
/// which GraphQL over HTTP answers with 200.
fn json_errors_ok(parts: &Parts) -> bool {
    parts
        .headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json") && !accept.contains("graphql-response"))
}

fn failure_response(failure: Failure, json_errors_ok: bool) -> Response {
    let (status, message, at) = match failure {
        Failure::Request(status, message) => (status, message, None),
        Failure::Document(message, at) => {
            (if json_errors_ok { StatusCode::OK } else { StatusCode::BAD_REQUEST }, message, at)
        }
        Failure::Run(err) => (
            StatusCode::from_u16(err.code().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            err.message().to_string(),
            None,
        ),
    };
    let mut error = serde_json::json!({ "message": message });
    if let Some((line, column)) = at {
        error["locations"] = serde_json::json!([{ "line": line, "column": column }]);
    }
    let content_type = if json_errors_ok { "application/json; charset=utf-8" } else { GRAPHQL_RESPONSE };
    let mut response =
        (status, [(header::CONTENT_TYPE, content_type)], serde_json::json!({ "errors": [error] }).to_string())
            .into_response();
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    }
    response
}

/// A GraphQL request: the document, its variables, which operation to run.
struct GraphqlRequest {
    query: String,
    variables: Object,
    operation_name: Option<String>,
}

/// Reads the request from the query string (GET) or the body (POST: JSON, CBOR or
/// MessagePack, as any REST body).
async fn read_request(state: &AppState, parts: &Parts, body: &mut Option<Body>) -> Result<GraphqlRequest, Failure> {
    let bad = |message: &str| Failure::Request(StatusCode::BAD_REQUEST, message.to_string());
    let mut fields = Object::default();
    match parts.method {
        Method::GET => {
            for pair in parts.uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                let (key, value) = (crate::http::rest::query::decode(key), crate::http::rest::query::decode(value));
                let value = match key.as_str() {
                    "variables" | "extensions" => serde_json::from_str::<Value>(&value)
                        .map_err(|e| Failure::Request(StatusCode::BAD_REQUEST, format!("`{key}` is not JSON: {e}")))?,
                    _ => Value::from(value),
                };
                fields.insert(key, value);
            }
        }
        Method::POST => {
            let decoded = crate::http::body::read_and_decode(
                state,
                &parts.headers,
                body,
                state.rest_body_limit,
                crate::http::body::Bodies::Structured,
            )
            .await?;
            match decoded.value {
                Value::Object(object) => fields = object,
                _ => return Err(bad("Request body must be an object.")),
            }
        }
        _ => return Err(Failure::Request(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed".into())),
    }
    let query = match fields.shift_remove("query") {
        Some(Value::String(query)) => query.to_string(),
        Some(_) => return Err(bad("Request body `query` field must be a string.")),
        None => return Err(bad("Request body must contain a `query` field.")),
    };
    let variables = match fields.shift_remove("variables") {
        None | Some(Value::Null) => Object::default(),
        Some(Value::Object(variables)) => variables,
        Some(_) => return Err(bad("Request body `variables` field must be an object.")),
    };
    let operation_name = match fields.shift_remove("operationName") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.to_string()),
        Some(_) => return Err(bad("Request body `operationName` field must be a string.")),
    };
    Ok(GraphqlRequest { query, variables, operation_name })
}

/// One top-level field, planned: the search to run and how to shape its results.
struct Root {
    /// The key it answers under (its alias, or its name).
    key: String,
    table: lyre_core::Table,
    query: Query,
    shape: Vec<Shape>,
}

/// How one selected field appears in a result: under `key`, the record's `name`,
/// and for objects the selection inside it.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    key: String,
    name: String,
    /// `__typename`: this type's name, not a stored value.
    typename: Option<String>,
    nested: Option<Vec<Shape>>,
}

/// A document's chosen operation, planned.
struct Operation {
    roots: Vec<Root>,
}

impl Operation {
    /// Parses the document, picks the operation, resolves its variables and plans
    /// every top-level field against the exports.
    fn plan(state: &AppState, exports: &Exports, request: &GraphqlRequest) -> Result<Operation, Failure> {
        let document = state
            .graphql_documents
            .parse(&request.query)
            .map_err(|SyntaxError { message, at }| invalid(message, at))?;
        let locate = |node: Option<apollo_compiler::parser::SourceSpan>| {
            node.and_then(|span| span.line_column_range(&document.sources)).map(|r| (r.start.line, r.start.column))
        };
        let mut operations: Vec<&Node<ast::OperationDefinition>> = Vec::new();
        let mut fragments = HashMap::new();
        // Fragments do not count: `{ dogs { ...f } } fragment f on Dog { id }` is
        // one anonymous operation (the spec's "Lone Anonymous Operation").
        let operation_count =
            document.definitions.iter().filter(|d| matches!(d, Definition::OperationDefinition(_))).count();
        for definition in &document.definitions {
            match definition {
                Definition::OperationDefinition(operation) => {
                    if operation.name.is_none() && operation_count > 1 {
                        return Err(invalid(
                            "Unnamed operations are only allowed when there is a single operation in the document.",
                            locate(operation.location()),
                        ));
                    }
                    if operations.iter().any(|o| o.name.is_some() && o.name == operation.name) {
                        let name = operation.name.as_ref().map_or("", |n| n.as_str());
                        return Err(invalid(
                            format!("Duplicate operation definition: {name}"),
                            locate(operation.location()),
                        ));
                    }
                    operations.push(operation);
                }
                Definition::FragmentDefinition(fragment) => {
                    fragments.insert(fragment.name.as_str(), fragment);
                }
                other => {
                    return Err(invalid(
                        "Unexpected non-executable definition: a query document holds operations and fragments.",
                        locate(other.location()),
                    ));
                }
            }
        }
        let operation = match &request.operation_name {
            None if operations.len() == 1 => operations[0],
            None => {
                return Err(invalid(
                    "Operation name is required when there are multiple operations in the document.",
                    None,
                ));
            }
            Some(name) => operations
                .iter()
                .find(|o| o.name.as_ref().is_some_and(|n| n.as_str() == name))
                .copied()
                .ok_or_else(|| invalid(format!("Operation `{name}` not found."), None))?,
        };
        match operation.operation_type {
            OperationType::Query => {}
            OperationType::Mutation => {
                return Err(invalid("Mutations are not supported yet.", locate(operation.location())));
            }
            OperationType::Subscription => {
                return Err(invalid("Subscriptions are not supported.", locate(operation.location())));
            }
        }
        let variables = resolve_variables(operation, &request.variables, &locate)?;
        let planner = Planner {
            state,
            fragments: &fragments,
            variables: &variables,
            locate: &locate,
            planned: Default::default(),
        };
        let mut roots = Vec::new();
        for field in planner.fields(&operation.selection_set)? {
            let Some(export) = exports.get(field.name.as_str()) else {
                return Err(invalid(format!("Resource `{}` not found.", field.name), locate(field.location())));
            };
            if field.selection_set.is_empty() {
                // A table's records are objects: the spec wants their fields named.
                return Err(invalid(
                    format!("Field \"{0}\" of type \"[{0}]\" must have a selection of subfields.", field.name),
                    locate(field.location()),
                ));
            }
            let table = state.engine.database(&export.database).and_then(|db| db.table(&export.table))?;
            let (select, shape) = planner.selection(Some(table.schema()), &field.selection_set, 0)?;
            let conditions = planner.conditions(table.schema(), &field.arguments)?;
            let query = Query {
                conditions,
                select: Select::Fields { fields: select, shape: Shaped::Object },
                ..Default::default()
            };
            let key = field.alias.as_ref().unwrap_or(&field.name).to_string();
            if roots.iter().any(|r: &Root| r.key == key) {
                return Err(invalid(
                    format!("Fields \"{key}\" conflict: give one of them an alias."),
                    locate(field.location()),
                ));
            }
            roots.push(Root { key, table, query, shape });
        }
        Ok(Operation { roots })
    }

    /// Runs every top-level search (on the blocking pool) and writes the answer.
    async fn run(self, ctx: &Context) -> Result<Vec<u8>, Failure> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"data\":{");
        for (index, root) in self.roots.into_iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            let Root { key, table, query, shape } = root;
            serde_json::to_writer(&mut out, &key)
                .map_err(|e| ApiError::new(lyre_core::Code::Internal, e.to_string()))?;
            out.push(b':');
            let budget = MAX_ANSWER_BYTES.saturating_sub(out.len());
            // One record by its primary key (and what it relates to) is answered
            // here: the hand-off to a blocking thread cost more than the search.
            let part = if table.answers_one_record(&query) {
                answer(&table, ctx, query, &shape, budget)?
            } else {
                let ctx = ctx.clone();
                crate::http::blocking::blocking("a GraphQL query", move || answer(&table, &ctx, query, &shape, budget))
                    .await?
            };
            out.extend_from_slice(&part);
        }
        out.extend_from_slice(b"}}");
        Ok(out)
    }
}

/// Runs one top-level field's search and writes its results, in `shape`, as a JSON
/// array of at most `budget` bytes.
fn answer(
    table: &lyre_core::Table,
    ctx: &Context,
    query: Query,
    shape: &[Shape],
    budget: usize,
) -> Result<Vec<u8>, ApiError> {
    let mut part = vec![b'['];
    let mut first = true;
    let mut too_large = false;
    let mut failed = None;
    table.search(ctx, query)?.run(&mut |value| {
        if !first {
            part.push(b',');
        }
        first = false;
        if let Err(err) = serde_json::to_writer(&mut part, &reshape(value, shape)) {
            failed = Some(err);
            return std::ops::ControlFlow::Break(());
        }
        if part.len() > budget {
            too_large = true;
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    })?;
    if let Some(err) = failed {
        return Err(ApiError::new(lyre_core::Code::Internal, err.to_string()));
    }
    if too_large {
        return Err(ApiError::bad_request(format!(
            "the answer is larger than {MAX_ANSWER_BYTES} bytes; narrow the query with arguments"
        )));
    }
    part.push(b']');
    Ok(part)
}

/// The operation's variables: each declared one from the request, else its default,
/// else null; a non-null one with neither is an error. Undeclared ones are ignored.
fn resolve_variables(
    operation: &ast::OperationDefinition,
    given: &Object,
    locate: Locate<'_>,
) -> Result<HashMap<String, Value>, Failure> {
    let mut resolved = HashMap::new();
    for definition in &operation.variables {
        let name = definition.name.as_str();
        let value = match (given.get(name), &definition.default_value) {
            (Some(value), _) => value.clone(),
            (None, Some(default)) => constant(default, locate)?,
            (None, None) if definition.ty.is_non_null() => {
                return Err(invalid(
                    format!("Variable ${name} is required, but not provided."),
                    locate(definition.location()),
                ));
            }
            (None, None) => Value::Null,
        };
        resolved.insert(name.to_string(), value);
    }
    Ok(resolved)
}

/// A literal value (no variables: a default).
fn constant(value: &Node<ast::Value>, locate: Locate<'_>) -> Result<Value, Failure> {
    literal(value, &HashMap::new(), locate)
}

/// A GraphQL value as a record value: numbers, strings, booleans, null, objects and
/// variables (lists and enums are not supported, as in Harper).
fn literal(value: &Node<ast::Value>, variables: &HashMap<String, Value>, locate: Locate<'_>) -> Result<Value, Failure> {
    let at = locate(value.location());
    Ok(match &**value {
        ast::Value::Null => Value::Null,
        ast::Value::Boolean(b) => Value::Bool(*b),
        ast::Value::String(s) => Value::from(s.as_str()),
        ast::Value::Int(i) => match i.as_str().parse::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Float(i.as_str().parse::<f64>().map_err(|e| invalid(e.to_string(), at))?),
        },
        ast::Value::Float(f) => Value::Float(f.try_to_f64().map_err(|e| invalid(e.to_string(), at))?),
        ast::Value::Variable(name) => variables
            .get(name.as_str())
            .cloned()
            .ok_or_else(|| invalid(format!("Variable ${name} is not defined."), at))?,
        ast::Value::Object(fields) => {
            let mut object = Object::default();
            for (name, value) in fields {
                object.insert(name.to_string(), literal(value, variables, locate)?);
            }
            Value::Object(object)
        }
        ast::Value::List(_) => return Err(invalid("Value type, List, is not supported.", at)),
        ast::Value::Enum(_) => return Err(invalid("Value type, Enum, is not supported.", at)),
    })
}

/// What planning a field's selection and arguments needs.
struct Planner<'a> {
    state: &'a AppState,
    fragments: &'a HashMap<&'a str, &'a Node<ast::FragmentDefinition>>,
    variables: &'a HashMap<String, Value>,
    locate: Locate<'a>,
    /// Fields selected so far, fragments spread out.
    planned: std::cell::Cell<usize>,
}

impl Planner<'_> {
    /// The fields of a selection set, fragments (spread or inline) filled in; a
    /// fragment that spreads itself, or more than [`MAX_FIELDS`] fields in the whole
    /// operation, is refused.
    fn fields<'s>(&'s self, selections: &'s [Selection]) -> Result<Vec<&'s Node<ast::Field>>, Failure> {
        let mut out = Vec::new();
        self.spread(selections, &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    fn spread<'s>(
        &'s self,
        selections: &'s [Selection],
        visiting: &mut Vec<&'s str>,
        out: &mut Vec<&'s Node<ast::Field>>,
    ) -> Result<(), Failure> {
        for selection in selections {
            match selection {
                Selection::Field(field) => {
                    let planned = self.planned.get() + 1;
                    self.planned.set(planned);
                    if planned > MAX_FIELDS {
                        return Err(invalid(
                            format!("The operation selects more than {MAX_FIELDS} fields."),
                            (self.locate)(field.location()),
                        ));
                    }
                    out.push(field);
                }
                Selection::FragmentSpread(spread) => {
                    let name = spread.fragment_name.as_str();
                    let at = (self.locate)(spread.location());
                    let Some(fragment) = self.fragments.get(name) else {
                        return Err(invalid(format!("Fragment `{name}` not found."), at));
                    };
                    if visiting.contains(&name) {
                        return Err(invalid(format!("Cannot spread fragment \"{name}\" within itself."), at));
                    }
                    visiting.push(name);
                    self.spread(&fragment.selection_set, visiting, out)?;
                    visiting.pop();
                }
                Selection::InlineFragment(inline) => self.spread(&inline.selection_set, visiting, out)?,
            }
        }
        Ok(())
    }

    /// A selection on `table`: the core projection (relationships with their own)
    /// and the shape results are rebuilt in (keys, order, nested selections).
    /// `table` is `None` inside a nested object attribute, where any field may be
    /// selected.
    fn selection(
        &self,
        table: Option<&TableSchema>,
        selections: &[Selection],
        depth: usize,
    ) -> Result<(Vec<Field>, Vec<Shape>), Failure> {
        if depth > MAX_DEPTH {
            return Err(invalid(format!("Selections nest deeper than {MAX_DEPTH} levels."), None));
        }
        let mut select: Vec<Field> = Vec::new();
        let mut shape = Vec::new();
        for field in self.fields(selections)? {
            let name = field.name.as_str();
            let key = field.alias.as_ref().unwrap_or(&field.name).to_string();
            if name == "__typename" {
                let typename = table.map_or("Object", |t| t.name.as_str()).to_string();
                shape.push(Shape { key, name: name.into(), typename: Some(typename), nested: None });
                continue;
            }
            let at = (self.locate)(field.location());
            let relationship = table.and_then(|t| t.relationships.iter().find(|r| r.name == name));
            if let Some(table) = table
                && table.schema_defined
                && relationship.is_none()
                && table.attribute(name).is_none()
                && name != "$id"
            {
                return Err(invalid(format!("Cannot query field \"{name}\" on type \"{}\".", table.name), at));
            }
            let (nested_select, nested_shape) = match (relationship, field.selection_set.is_empty()) {
                (Some(relationship), false) => {
                    let related = self
                        .state
                        .engine
                        .database(&relationship.database)
                        .and_then(|db| db.table(&relationship.table))
                        .map_err(ApiError::from)?;
                    let (inner, shape) = self.selection(Some(related.schema()), &field.selection_set, depth + 1)?;
                    (Some(inner), Some(shape))
                }
                // A nested object attribute: the whole value is read, the selection
                // picked out of it.
                (None, false) => {
                    let (_, shape) = self.selection(None, &field.selection_set, depth + 1)?;
                    (None, Some(shape))
                }
                (_, true) => (None, None),
            };
            merge(&mut select, Field { name: name.to_string(), nested: nested_select });
            shape.push(Shape { key, name: name.to_string(), typename: None, nested: nested_shape });
        }
        Ok((select, shape))
    }

    /// A field's arguments as conditions: each an equality on an attribute; an object
    /// on a relationship holds conditions on the related records.
    fn conditions(&self, table: &TableSchema, arguments: &[Node<ast::Argument>]) -> Result<Vec<Condition>, Failure> {
        arguments
            .iter()
            .map(|argument| {
                let value = literal(&argument.value, self.variables, self.locate)?;
                condition(table, argument.name.as_str(), value, (self.locate)(argument.location()))
            })
            .collect()
    }
}

/// Adds `field` to a projection; a field selected twice (under two aliases, say) is
/// read once with both selections: a whole record wins over a selection of it.
fn merge(select: &mut Vec<Field>, field: Field) {
    let Some(existing) = select.iter_mut().find(|f| f.name == field.name) else {
        select.push(field);
        return;
    };
    match (&mut existing.nested, field.nested) {
        (Some(inner), Some(more)) => {
            for nested in more {
                merge(inner, nested);
            }
        }
        (slot, _) => *slot = None,
    }
}

/// An equality on `name`, or (an object on a relationship) conditions on its records.
/// Text on a typed attribute is read as that type, as REST reads it (`age: "6"`
/// is 6: JSON variables often carry numbers as text), as Harper does.
fn condition(table: &TableSchema, name: &str, value: Value, at: Option<(usize, usize)>) -> Result<Condition, Failure> {
    match value {
        Value::Object(fields) => {
            if !table.relationships.iter().any(|r| r.name == name) {
                return Err(invalid(
                    format!("Argument `{name}` is an object, but \"{}\" has no relationship \"{name}\".", table.name),
                    at,
                ));
            }
            let conditions = fields
                .into_iter()
                .map(|(attribute, value)| match value {
                    Value::Object(_) => Err(invalid(
                        format!("Argument `{name}.{attribute}`: conditions reach one relationship deep."),
                        at,
                    )),
                    value => Ok(Condition::Compare { attribute, comparator: Comparator::Equals, value }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Condition::Related {
                relationship: name.to_string(),
                condition: Box::new(Condition::Group { operator: Operator::And, conditions }),
            })
        }
        Value::String(text) if typed_for_coercion(table, name) => {
            let value = crate::http::rest::query::coerce(table, name, &text)?;
            Ok(Condition::Compare { attribute: name.to_string(), comparator: Comparator::Equals, value })
        }
        value => Ok(Condition::Compare { attribute: name.to_string(), comparator: Comparator::Equals, value }),
    }
}

/// Whether text for attribute `name` is read as its declared type: a number, a
/// Boolean or a Date (text stays text for `String`, `ID`, `Any` and undeclared).
fn typed_for_coercion(table: &TableSchema, name: &str) -> bool {
    table
        .attribute(name)
        .and_then(|a| a.type_name.as_deref())
        .is_some_and(|declared| matches!(declared, "Int" | "Long" | "BigInt" | "Float" | "Boolean" | "Date"))
}

/// A projected record rebuilt in the selection's shape: its keys (aliases), its
/// order, `null` where the record has nothing, nested selections applied.
fn reshape(value: Value, shape: &[Shape]) -> Value {
    let Value::Object(mut record) = value else { return value };
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Object::default();
    for field in shape {
        let value = if let Some(name) = &field.typename {
            Value::from(name.as_str())
        } else if seen.insert(field.name.as_str()) && shape.iter().filter(|f| f.name == field.name).count() == 1 {
            record.shift_remove(&field.name).unwrap_or(Value::Null)
        } else {
            record.get(&field.name).cloned().unwrap_or(Value::Null)
        };
        let value = match &field.nested {
            Some(nested) => match value {
                Value::Array(items) => Value::Array(items.into_iter().map(|v| reshape(v, nested)).collect()),
                other => reshape(other, nested),
            },
            None => value,
        };
        out.insert(field.key.clone(), value);
    }
    Value::Object(out)
}
