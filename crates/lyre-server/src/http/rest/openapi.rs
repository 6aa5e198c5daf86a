//! `GET /openapi`: an OpenAPI 3 description of the exported tables (super users only).

use lyre_core::catalog::TableSchema;
use lyre_core::{Engine, Object, Value};

use crate::components::Exports;

fn object(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn schema_type(type_name: Option<&str>) -> Value {
    let (ty, format) = match type_name {
        Some("Int" | "Long" | "BigInt") => ("integer", None),
        Some("Float") => ("number", None),
        Some("Boolean") => ("boolean", None),
        Some("Date") => ("string", Some("date-time")),
        Some("Bytes") => ("string", Some("binary")),
        Some("String" | "ID") => ("string", None),
        _ => return object(vec![]),
    };
    let mut pairs = vec![("type", Value::from(ty))];
    if let Some(format) = format {
        pairs.push(("format", format.into()));
    }
    object(pairs)
}

fn table_schema(table: &TableSchema) -> Value {
    let mut properties = Object::default();
    for attribute in &table.attributes {
        let mut ty = schema_type(attribute.type_name.as_deref());
        if attribute.shape.list {
            ty = object(vec![("type", "array".into()), ("items", ty)]);
        }
        properties.insert(attribute.name.clone(), ty);
    }
    let required: Vec<Value> =
        table.attributes.iter().filter(|a| a.shape.required).map(|a| a.name.clone().into()).collect();
    let mut pairs = vec![("type", Value::from("object")), ("properties", Value::Object(properties))];
    if !required.is_empty() {
        pairs.push(("required", Value::Array(required)));
    }
    object(pairs)
}

fn operation(summary: String, tag: &str, responses: Vec<(&str, &str)>) -> Value {
    let responses = responses
        .into_iter()
        .map(|(code, text)| (code.to_string(), object(vec![("description", text.into())])))
        .collect();
    object(vec![
        ("summary", summary.into()),
        ("tags", Value::Array(vec![tag.into()])),
        ("responses", Value::Object(responses)),
    ])
}

/// The document for every export that resolves to a table.
pub fn document(engine: &Engine, exports: &Exports, host: &str) -> Value {
    let mut paths = Object::default();
    let mut schemas = Object::default();
    for export in exports.iter() {
        let Ok(table) = engine.database(&export.database).and_then(|db| db.table(&export.table)) else { continue };
        let schema = table.schema();
        let name = &export.name;
        schemas.insert(name.clone(), table_schema(schema));
        let id = object(vec![
            ("name", "id".into()),
            ("in", "path".into()),
            ("required", true.into()),
            ("schema", schema_type(schema.primary_key_attribute().and_then(|a| a.type_name.as_deref()))),
        ]);
        paths.insert(
            format!("/{name}/"),
            object(vec![
                ("get", operation(format!("Search {name}"), name, vec![("200", "matching records")])),
                (
                    "post",
                    operation(
                        format!("Create a {name} record"),
                        name,
                        vec![("201", "created; the body is the new key"), ("409", "the key exists")],
                    ),
                ),
                ("delete", operation(format!("Delete the matching {name} records"), name, vec![("200", "deleted")])),
            ]),
        );
        let mut by_id = object(vec![
            (
                "get",
                operation(
                    format!("Read a {name} record"),
                    name,
                    vec![("200", "the record"), ("304", "not modified"), ("404", "no such record")],
                ),
            ),
            ("put", operation(format!("Replace a {name} record"), name, vec![("204", "written")])),
            ("patch", operation(format!("Update a {name} record"), name, vec![("204", "written")])),
            ("delete", operation(format!("Delete a {name} record"), name, vec![("200", "deleted")])),
        ]);
        if let Value::Object(map) = &mut by_id {
            map.insert("parameters".into(), Value::Array(vec![id]));
        }
        paths.insert(format!("/{name}/{{id}}"), by_id);
    }
    let security = object(vec![("basicAuth", object(vec![("type", "http".into()), ("scheme", "basic".into())]))]);
    object(vec![
        ("openapi", "3.0.3".into()),
        ("info", object(vec![("title", "Lyre REST interface".into()), ("version", env!("CARGO_PKG_VERSION").into())])),
        (
            "servers",
            Value::Array(vec![object(vec![
                ("description", "REST API".into()),
                ("url", format!("http://{host}").into()),
            ])]),
        ),
        ("paths", Value::Object(paths)),
        ("components", object(vec![("schemas", Value::Object(schemas)), ("securitySchemes", security)])),
        ("security", Value::Array(vec![object(vec![("basicAuth", Value::Array(Vec::new()))])])),
    ])
}
