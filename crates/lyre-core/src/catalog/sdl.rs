//! Reading `schema.graphql`: Harper's directives to table definitions.
//!
//! The GraphQL document is parsed with apollo-compiler's AST (not validated as a
//! GraphQL schema: Harper's directives are undeclared there). Every error names the
//! file, line, column and directive or field at fault.

use std::collections::HashMap;
use std::fmt;

use apollo_compiler::ast::{self, Definition, Directive, FieldDefinition, ObjectTypeDefinition, Type};
use apollo_compiler::{Node, ast::Document};

use crate::catalog::schema::{Computed, Expiration, NestedField, Relationship, Shape, Stamp};
use crate::catalog::vector::{Distance, VectorIndex};

/// The scalar types a field may have.
const SCALARS: [&str; 11] =
    ["ID", "String", "Int", "Long", "Float", "BigInt", "Boolean", "Date", "Bytes", "Any", "Blob"];

/// Field types `@expiresAt` accepts: each can hold a time as ms since the epoch
/// (`Int` cannot: it stops at 2^31).
const EXPIRY_TYPES: [&str; 4] = ["Long", "Float", "Date", "Any"];

/// A schema file that could not be read, with where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SdlError {
    /// The file.
    pub path: String,
    /// 1-based line, when known.
    pub line: usize,
    /// 1-based column, when known.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SdlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.path, self.line, self.column, self.message)
    }
}

/// A table declared by a `@table` type.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDefinition {
    /// The GraphQL type's name.
    pub type_name: String,
    /// `@table(database:)`, default `data`.
    pub database: String,
    /// `@table(table:)`, default the type name.
    pub table: String,
    /// `@export(name:)`: the URL path the table is served at, when exported.
    pub export: Option<String>,
    /// `@table(audit:)`.
    pub audit: bool,
    /// `@table(expiration:, eviction:, scanInterval:)`.
    pub expiration: Option<Expiration>,
    /// `@sealed`.
    pub sealed: bool,
    /// The `@expiresAt` field: each record's own expiry time (ms since the epoch).
    pub expires_at: Option<String>,
    /// The `@primaryKey` field.
    pub primary_key: String,
    /// Its declared type.
    pub primary_key_type: String,
    /// Every stored field but the primary key, in declaration order.
    pub attributes: Vec<DeclaredAttribute>,
    /// `@relationship` fields.
    pub relationships: Vec<Relationship>,
}

/// A stored field of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredAttribute {
    /// The field's name.
    pub name: String,
    /// Its type name (a scalar, or a nested type's name).
    pub type_name: String,
    /// `@indexed` (an ordinary index).
    pub indexed: bool,
    /// `@indexed(type: "HNSW", …)`: a vector index instead of an ordinary one.
    pub vector: Option<VectorIndex>,
    /// List, required, nested fields, time stamp.
    pub shape: Shape,
}

/// Reads a schema document into table definitions.
pub fn parse_sdl(source: &str, path: &str) -> Result<Vec<TableDefinition>, SdlError> {
    // A file of comments only (a new application's template) defines nothing; the
    // GraphQL grammar itself rejects an empty document.
    if source.lines().all(|line| line.trim().is_empty() || line.trim_start().starts_with('#')) {
        return Ok(Vec::new());
    }
    let document = Document::parse(source, path).map_err(|with_errors| {
        let first = with_errors.errors.iter().next();
        let (line, column) = first
            .as_ref()
            .and_then(|d| d.line_column_range())
            .map(|r| (r.start.line, r.start.column))
            .unwrap_or((1, 1));
        let message = first.map(|d| d.error.to_string()).unwrap_or_else(|| "invalid GraphQL".to_string());
        SdlError { path: path.to_string(), line, column, message }
    })?;
    Reader { document: &document, path }.tables()
}

struct Reader<'d> {
    document: &'d Document,
    path: &'d str,
}

impl Reader<'_> {
    fn error<T>(
        &self,
        node: Option<apollo_compiler::parser::SourceSpan>,
        message: impl Into<String>,
    ) -> Result<T, SdlError> {
        let (line, column) = node
            .and_then(|span| span.line_column_range(&self.document.sources))
            .map(|r| (r.start.line, r.start.column))
            .unwrap_or((1, 1));
        Err(SdlError { path: self.path.to_string(), line, column, message: message.into() })
    }

    fn object_types(&self) -> HashMap<&str, &Node<ObjectTypeDefinition>> {
        self.document
            .definitions
            .iter()
            .filter_map(|d| match d {
                Definition::ObjectTypeDefinition(t) => Some((t.name.as_str(), t)),
                _ => None,
            })
            .collect()
    }

    fn tables(&self) -> Result<Vec<TableDefinition>, SdlError> {
        let types = self.object_types();
        let mut tables = Vec::new();
        for definition in &self.document.definitions {
            let Definition::ObjectTypeDefinition(ty) = definition else {
                continue;
            };
            if ty.name == "Query" || ty.directives.get("table").is_none() {
                continue;
            }
            tables.push(self.table(ty, &types)?);
        }
        Ok(tables)
    }

    /// Where a table type's records live: `(database, table)`.
    fn location(&self, ty: &Node<ObjectTypeDefinition>) -> Result<(String, String), SdlError> {
        let table = ty.directives.get("table");
        let database = match table {
            Some(d) => self.string_arg(d, "database")?.or(self.string_arg(d, "schema")?),
            None => None,
        };
        let name = match table {
            Some(d) => self.string_arg(d, "table")?,
            None => None,
        };
        Ok((database.unwrap_or_else(|| "data".to_string()), name.unwrap_or_else(|| ty.name.to_string())))
    }

    fn table(
        &self,
        ty: &Node<ObjectTypeDefinition>,
        types: &HashMap<&str, &Node<ObjectTypeDefinition>>,
    ) -> Result<TableDefinition, SdlError> {
        let (database, table) = self.location(ty)?;
        let directive = ty.directives.get("table");
        let audit = match directive {
            Some(d) => self.bool_arg(d, "audit")?.unwrap_or(true),
            None => true,
        };
        let expiration = match directive {
            Some(d) => self.expiration(d)?,
            None => None,
        };
        let export = match ty.directives.get("export") {
            Some(d) => Some(self.string_arg(d, "name")?.unwrap_or_else(|| ty.name.to_string())),
            None => None,
        };
        let mut primary_key = None;
        let mut expires_at = None;
        let mut attributes = Vec::new();
        let mut relationships = Vec::new();
        for field in &ty.fields {
            if let Some(rel) = field.directives.get("relationship") {
                relationships.push(self.relationship(field, rel, types)?);
                continue;
            }
            if field.directives.get("primaryKey").is_some() {
                if field.directives.get("computed").is_some() {
                    return self.error(
                        field.location(),
                        format!("the primary key {}.{} cannot be @computed", ty.name, field.name),
                    );
                }
                if let Some(directive) = field.directives.get("expiresAt") {
                    return self.error(
                        directive.location(),
                        format!("@expiresAt cannot be on the primary key {}.{}", ty.name, field.name),
                    );
                }
                if primary_key.is_some() {
                    return self.error(field.location(), format!("type {} has more than one @primaryKey", ty.name));
                }
                let (type_name, _) = self.base_type(&field.ty);
                primary_key = Some((field.name.to_string(), type_name.to_string()));
                continue;
            }
            let mut attribute = self.attribute(ty, field, types)?;
            if let Some(directive) = field.directives.get("expiresAt") {
                if expires_at.is_some() {
                    return self.error(directive.location(), format!("type {} has more than one @expiresAt", ty.name));
                }
                if attribute.shape.list || !EXPIRY_TYPES.contains(&attribute.type_name.as_str()) {
                    return self.error(
                        directive.location(),
                        format!(
                            "@expiresAt on {}.{} needs a Long, Float, Date or Any field (ms since the epoch)",
                            ty.name, field.name
                        ),
                    );
                }
                // The sweep finds due records through this index, as Harper's does.
                attribute.indexed = true;
                expires_at = Some(attribute.name.clone());
            }
            attributes.push(attribute);
        }
        let Some((primary_key, primary_key_type)) = primary_key else {
            return self.error(ty.location(), format!("type {} has @table but no @primaryKey field", ty.name));
        };
        Ok(TableDefinition {
            type_name: ty.name.to_string(),
            database,
            table,
            export,
            audit,
            expiration,
            sealed: ty.directives.get("sealed").is_some(),
            expires_at,
            primary_key,
            primary_key_type,
            attributes,
            relationships,
        })
    }

    fn attribute(
        &self,
        owner: &Node<ObjectTypeDefinition>,
        field: &Node<FieldDefinition>,
        types: &HashMap<&str, &Node<ObjectTypeDefinition>>,
    ) -> Result<DeclaredAttribute, SdlError> {
        let mut shape = self.shape(&field.ty, field, types, 0)?;
        let created = field.directives.get("createdTime").is_some();
        let updated = field.directives.get("updatedTime").is_some();
        if let Some(directive) = field.directives.get("computed") {
            if created || updated {
                return self.error(
                    directive.location(),
                    format!("{}.{} cannot be both @computed and a time stamp", owner.name, field.name),
                );
            }
            shape.computed = Some(Computed {
                from: self.string_arg(directive, "from")?,
                version: self.string_arg(directive, "version")?,
                enumerable: field.directives.get("enumerable").is_some(),
            });
        }
        shape.stamp = match (created, updated) {
            (true, true) => {
                return self.error(
                    field.location(),
                    format!("{}.{} cannot be both @createdTime and @updatedTime", owner.name, field.name),
                );
            }
            (true, false) => Some(Stamp::Created),
            (false, true) => Some(Stamp::Updated),
            (false, false) => None,
        };
        let (type_name, _) = self.base_type(&field.ty);
        let (indexed, vector) = match field.directives.get("indexed") {
            None => (false, None),
            Some(d) => match self.string_arg(d, "type")? {
                None => (true, None),
                Some(kind) if kind == "HNSW" => {
                    if !shape.list || !matches!(type_name, "Float" | "Int" | "Long" | "Any") {
                        return self.error(
                            d.location(),
                            format!(
                                "@indexed(type: \"HNSW\") on {}.{} needs a list of numbers ([Float])",
                                owner.name, field.name
                            ),
                        );
                    }
                    (false, Some(self.vector_index(d, &format!("{}.{}", owner.name, field.name))?))
                }
                Some(kind) => {
                    return self.error(
                        d.location(),
                        format!(
                            "@indexed(type: \"{kind}\") on {}.{} is not an index type Lyre knows (HNSW, or none for an ordinary index)",
                            owner.name, field.name
                        ),
                    );
                }
            },
        };
        Ok(DeclaredAttribute { name: field.name.to_string(), type_name: type_name.to_string(), indexed, vector, shape })
    }

    /// The options of `@indexed(type: "HNSW", …)` on `field`, with Harper's names
    /// and defaults; an unknown option, distance or out-of-range value fails the
    /// schema with the directive's position.
    fn vector_index(&self, d: &Node<Directive>, field: &str) -> Result<VectorIndex, SdlError> {
        const OPTIONS: [&str; 10] = [
            "type",
            "distance",
            "M",
            "efConstruction",
            "efConstructionSearch",
            "mL",
            "optimizeRouting",
            "quantization",
            "filterExpansion",
            "maxLagMilliseconds",
        ];
        if let Some(unknown) = d.arguments.iter().find(|a| !OPTIONS.contains(&a.name.as_str())) {
            return self.error(
                unknown.location(),
                format!("@indexed(type: \"HNSW\") on {field} has no option '{}'", unknown.name),
            );
        }
        let mut spec = VectorIndex::default();
        if let Some(name) = self.string_arg(d, "distance")? {
            spec.distance = match Distance::parse(&name) {
                Some(distance) => distance,
                None => {
                    return self.error(
                        d.location(),
                        format!(
                            "@indexed(type: \"HNSW\") on {field}: unknown distance '{name}' (cosine, euclidean or dotProduct)"
                        ),
                    );
                }
            };
        }
        let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(m) = self.int_arg(d, "M")? {
            spec.m = small(m);
            spec.ml = 1.0 / f64::from(spec.m.max(2)).ln();
        }
        if let Some(ef) = self.int_arg(d, "efConstruction")? {
            spec.ef_construction = small(ef);
            spec.ef_search = spec.ef_search.max(small(ef).min(4096));
        }
        if let Some(ef) = self.int_arg(d, "efConstructionSearch")? {
            spec.ef_search = small(ef);
        }
        if let Some(ml) = self.float_arg(d, "mL")? {
            spec.ml = ml;
        }
        if let Some(routing) = self.float_arg(d, "optimizeRouting")? {
            spec.optimize_routing = routing;
        }
        if let Some(expansion) = self.int_arg(d, "filterExpansion")? {
            spec.filter_expansion = small(expansion);
        }
        spec.max_lag_ms = self.int_arg(d, "maxLagMilliseconds")?.filter(|&ms| ms > 0);
        match self.string_arg(d, "quantization")?.as_deref() {
            None | Some("none") => {}
            Some("int8") => spec.quantization = true,
            Some(other) => {
                return self.error(
                    d.location(),
                    format!("@indexed(type: \"HNSW\") on {field}: unknown quantization '{other}' (int8 or none)"),
                );
            }
        }
        if let Err(message) = spec.check() {
            return self.error(d.location(), format!("@indexed(type: \"HNSW\") on {field}: {message}"));
        }
        Ok(spec)
    }

    fn float_arg(&self, directive: &Node<Directive>, name: &str) -> Result<Option<f64>, SdlError> {
        match self.argument(directive, name).map(|v| (v, v.as_ref())) {
            None => Ok(None),
            Some((v, ast::Value::Int(i))) => i
                .as_str()
                .parse::<f64>()
                .map(Some)
                .or_else(|_| self.error(v.location(), format!("@{}({name}:) must be a number", directive.name))),
            Some((v, ast::Value::Float(f))) => f
                .as_str()
                .parse::<f64>()
                .map(Some)
                .or_else(|_| self.error(v.location(), format!("@{}({name}:) must be a number", directive.name))),
            Some((v, _)) => self.error(v.location(), format!("@{}({name}:) must be a number", directive.name)),
        }
    }

    /// The shape of a field's type; nested (non-table) object types become nested
    /// fields, at most 16 levels deep.
    fn shape(
        &self,
        ty: &Type,
        field: &Node<FieldDefinition>,
        types: &HashMap<&str, &Node<ObjectTypeDefinition>>,
        depth: usize,
    ) -> Result<Shape, SdlError> {
        let (name, list) = self.base_type(ty);
        let required = ty.is_non_null();
        if SCALARS.contains(&name) {
            return Ok(Shape { list, required, ..Shape::default() });
        }
        let Some(nested) = types.get(name) else {
            return self.error(field.location(), format!("field {} has unknown type {name}", field.name));
        };
        if nested.directives.get("table").is_some() {
            return self.error(
                field.location(),
                format!("field {} refers to table type {name} without @relationship", field.name),
            );
        }
        if depth >= 16 {
            return self.error(field.location(), format!("type {name} nests too deeply (a cycle?)"));
        }
        let mut fields = Vec::new();
        for inner in &nested.fields {
            let (inner_name, _) = self.base_type(&inner.ty);
            fields.push(NestedField {
                name: inner.name.to_string(),
                type_name: inner_name.to_string(),
                shape: self.shape(&inner.ty, inner, types, depth + 1)?,
            });
        }
        Ok(Shape { list, required, fields, ..Shape::default() })
    }

    fn relationship(
        &self,
        field: &Node<FieldDefinition>,
        directive: &Node<Directive>,
        types: &HashMap<&str, &Node<ObjectTypeDefinition>>,
    ) -> Result<Relationship, SdlError> {
        let (target, list) = self.base_type(&field.ty);
        let Some(target_type) = types.get(target).filter(|t| t.directives.get("table").is_some()) else {
            return self.error(
                field.location(),
                format!("@relationship field {} must have a @table type, not {target}", field.name),
            );
        };
        let from = self.string_arg(directive, "from")?;
        let to = self.string_arg(directive, "to")?;
        if from.is_none() && to.is_none() {
            return self.error(directive.location(), format!("@relationship on {} needs `from` or `to`", field.name));
        }
        if to.is_some() && from.is_none() && !list {
            return self.error(field.location(), format!("@relationship(to:) field {} must be a list", field.name));
        }
        let (database, table) = self.location(target_type)?;
        Ok(Relationship { name: field.name.to_string(), database, table, from, to, list })
    }

    /// The named type under any list and non-null wrappers, and whether it is a list.
    fn base_type<'t>(&self, ty: &'t Type) -> (&'t str, bool) {
        match ty {
            Type::Named(n) | Type::NonNullNamed(n) => (n.as_str(), false),
            Type::List(inner) | Type::NonNullList(inner) => (self.base_type(inner).0, true),
        }
    }

    fn argument<'a>(&self, directive: &'a Node<Directive>, name: &str) -> Option<&'a Node<ast::Value>> {
        directive.arguments.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    fn string_arg(&self, directive: &Node<Directive>, name: &str) -> Result<Option<String>, SdlError> {
        match self.argument(directive, name).map(|v| (v, v.as_ref())) {
            None => Ok(None),
            Some((_, ast::Value::String(s))) => Ok(Some(s.clone())),
            Some((_, ast::Value::Enum(e))) => Ok(Some(e.to_string())),
            Some((v, _)) => self.error(v.location(), format!("@{}({name}:) must be a string", directive.name)),
        }
    }

    fn bool_arg(&self, directive: &Node<Directive>, name: &str) -> Result<Option<bool>, SdlError> {
        match self.argument(directive, name).map(|v| (v, v.as_ref())) {
            None => Ok(None),
            Some((_, ast::Value::Boolean(b))) => Ok(Some(*b)),
            Some((v, _)) => self.error(v.location(), format!("@{}({name}:) must be a boolean", directive.name)),
        }
    }

    /// `@table(expiration:, eviction:, scanInterval:)`; `None` without `expiration`.
    fn expiration(&self, directive: &Node<Directive>) -> Result<Option<Expiration>, SdlError> {
        let Some(seconds) = self.int_arg(directive, "expiration")? else {
            return Ok(None);
        };
        let eviction = self.int_arg(directive, "eviction")?.unwrap_or(0);
        let scan_interval = self.int_arg(directive, "scanInterval")?;
        for (name, value, least) in
            [("expiration", Some(seconds), 1), ("eviction", Some(eviction), 0), ("scanInterval", scan_interval, 1)]
        {
            if let Some(value) = value.filter(|v| *v < least || *v > Expiration::MAX_SECONDS) {
                let location = self.argument(directive, name).and_then(|v| v.location());
                let most = Expiration::MAX_SECONDS;
                return self
                    .error(location, format!("@table({name}:) must be from {least} to {most} (seconds), not {value}"));
            }
        }
        Ok(Some(Expiration { expiration: seconds, eviction, scan_interval }))
    }

    fn int_arg(&self, directive: &Node<Directive>, name: &str) -> Result<Option<u64>, SdlError> {
        match self.argument(directive, name).map(|v| (v, v.as_ref())) {
            None => Ok(None),
            Some((v, ast::Value::Int(i))) => match i.as_str().parse::<u64>() {
                Ok(n) => Ok(Some(n)),
                Err(_) => {
                    self.error(v.location(), format!("@{}({name}:) must be a non-negative integer", directive.name))
                }
            },
            Some((v, _)) => self.error(v.location(), format!("@{}({name}:) must be an integer", directive.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOP: &str = r#"
type Product @table(database: "shop") @export(name: "products") {
  id: ID @primaryKey
  name: String! @indexed
  price: Float @indexed
  tags: [String] @indexed
  brandId: ID @indexed
  brand: Brand @relationship(from: brandId)
  details: Details
  createdAt: Long @createdTime
  updatedAt: Long @updatedTime
}
type Details { color: String weight: Float }
type Brand @table(database: "shop") @export {
  id: ID @primaryKey
  name: String @indexed
  products: [Product] @relationship(to: brandId)
}
type Session @table @sealed { id: ID @primaryKey }
"#;

    #[test]
    fn harper_directives_become_table_definitions() {
        let tables = parse_sdl(SHOP, "schema.graphql").unwrap();
        assert_eq!(tables.len(), 3);
        let product = &tables[0];
        assert_eq!(
            (product.database.as_str(), product.table.as_str(), product.export.as_deref()),
            ("shop", "Product", Some("products"))
        );
        assert_eq!((product.primary_key.as_str(), product.primary_key_type.as_str()), ("id", "ID"));
        let names: Vec<&str> = product.attributes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["name", "price", "tags", "brandId", "details", "createdAt", "updatedAt"]);
        assert!(product.attributes[0].shape.required && product.attributes[0].indexed);
        assert!(product.attributes[2].shape.list);
        assert_eq!(product.attributes[4].shape.fields.len(), 2);
        assert_eq!(product.attributes[5].shape.stamp, Some(Stamp::Created));
        assert_eq!(product.relationships[0].from.as_deref(), Some("brandId"));
        assert_eq!(product.relationships[0].table, "Brand");
        let brand = &tables[1];
        assert_eq!(brand.export.as_deref(), Some("Brand"));
        assert_eq!(brand.relationships[0].to.as_deref(), Some("brandId"));
        assert!(brand.relationships[0].list);
        assert!(tables[2].sealed);
        assert_eq!(tables[2].database, "data");
        assert_eq!(tables[2].export, None);
    }

    #[test]
    fn a_file_of_comments_defines_nothing() {
        assert_eq!(parse_sdl("# nothing yet\n\n", "s.graphql").unwrap(), Vec::new());
    }

    #[test]
    fn errors_name_file_line_and_problem() {
        let err = parse_sdl("type A @table {\n  id: ID @primaryKey\n  x: Nope\n}\n", "app/schema.graphql").unwrap_err();
        assert_eq!((err.path.as_str(), err.line), ("app/schema.graphql", 3));
        assert!(err.message.contains("unknown type Nope"), "{err}");
        let err = parse_sdl("type A @table { name: String }", "s.graphql").unwrap_err();
        assert!(err.to_string().contains("no @primaryKey"), "{err}");
        let err = parse_sdl("type A @table(expiration: \"soon\") { id: ID @primaryKey }", "s.graphql").unwrap_err();
        assert!(err.message.contains("@table(expiration:) must be an integer"), "{err}");
        let err = parse_sdl("type A @table(expiration: 0) { id: ID @primaryKey }", "s.graphql").unwrap_err();
        assert!(err.message.contains("@table(expiration:) must be from 1 to 3153600000 (seconds), not 0"), "{err}");
        let huge = "type A @table(expiration: 3600, eviction: 18446744073709548016) { id: ID @primaryKey }";
        assert!(parse_sdl(huge, "s.graphql").unwrap_err().message.contains("@table(eviction:) must be from 0"));
        let parsed = parse_sdl(
            "type A @table(expiration: 60, eviction: 30, scanInterval: 5) { id: ID @primaryKey }\ntype B @table(expiration: 8) { id: ID @primaryKey }",
            "s.graphql",
        )
        .unwrap();
        assert_eq!(parsed[0].expiration, Some(Expiration { expiration: 60, eviction: 30, scan_interval: Some(5) }));
        assert_eq!(parsed[1].expiration.map(|e| e.sweep_period().as_secs()), Some(2));
        let err = parse_sdl("type A @table { id: ID @primaryKey", "s.graphql").unwrap_err();
        assert_eq!(err.line, 1, "{err}");
        let err =
            parse_sdl("type A @table { id: ID @primaryKey b: B }\ntype B @table { id: ID @primaryKey }", "s.graphql")
                .unwrap_err();
        assert!(err.message.contains("without @relationship"), "{err}");
    }

    #[test]
    fn computed_fields_keep_their_expression_version_and_visibility() {
        let sdl = "type P @table { id: ID @primaryKey\n price: Float\n total: Float @computed(from: \"price * 2\", version: \"2\") @indexed\n \
                   label: String @computed @enumerable }";
        let parsed = parse_sdl(sdl, "s.graphql").unwrap();
        let total = &parsed[0].attributes[1];
        assert!(total.indexed);
        let expected = Computed { from: Some("price * 2".into()), version: Some("2".into()), enumerable: false };
        assert_eq!(total.shape.computed, Some(expected));
        let label = &parsed[0].attributes[2];
        assert_eq!(label.shape.computed, Some(Computed { from: None, version: None, enumerable: true }));
        let err = parse_sdl("type P @table { id: ID @primaryKey @computed(from: \"1\") }", "s.graphql").unwrap_err();
        assert!(err.message.contains("cannot be @computed"), "{err}");
    }

    #[test]
    fn expires_at_marks_one_time_field_and_indexes_it() {
        let parsed = parse_sdl("type S @table { id: ID @primaryKey\n until: Date @expiresAt }", "s.graphql").unwrap();
        assert_eq!(parsed[0].expires_at.as_deref(), Some("until"));
        assert!(parsed[0].attributes[0].indexed);
        for (sdl, line, message) in [
            ("type S @table { id: ID @primaryKey\n until: String @expiresAt }", 2, "needs a Long, Float"),
            ("type S @table { id: ID @primaryKey\n until: Int @expiresAt }", 2, "needs a Long, Float"),
            ("type S @table { id: ID @primaryKey\n until: [Long] @expiresAt }", 2, "needs a Long, Float"),
            ("type S @table { id: Long @primaryKey @expiresAt }", 1, "cannot be on the primary key S.id"),
            (
                "type S @table { id: ID @primaryKey\n a: Long @expiresAt\n b: Long @expiresAt }",
                3,
                "more than one @expiresAt",
            ),
        ] {
            let err = parse_sdl(sdl, "s.graphql").unwrap_err();
            assert_eq!(err.line, line, "{err}");
            assert!(err.message.contains(message), "{err}");
        }
    }
}
