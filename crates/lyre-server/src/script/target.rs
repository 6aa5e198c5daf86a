//! A request's query as Harper's `RequestTarget` shows it to code: the REST query
//! string, parsed by REST's grammar, as a query object (`conditions`, `operator`,
//! `limit`, `offset`, `sort`, `select`), so a handler can read what was asked.

use lyre_core::query::{Condition, Field, Operator, Query, Select, Shaped, SortKey};
use lyre_core::{Object, Value};

/// `query` as Harper's query object: conditions as `{attribute, comparator,
/// value}` (a relationship's as the attribute path `[relationship, attribute]`),
/// groups as `{operator, conditions}`, `sort` as `{attribute, descending, next}`,
/// `select` as names (`{name, select}` for a relationship's). Only what the query
/// sets is there, but `conditions` always is.
pub fn query_object(query: &Query) -> Value {
    let mut out = Object::default();
    out.insert("conditions".into(), Value::Array(query.conditions.iter().map(|c| condition(c, &[])).collect()));
    if query.operator == Operator::Or {
        out.insert("operator".into(), "or".into());
    }
    if let Some(limit) = query.limit {
        out.insert("limit".into(), Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    }
    if query.offset > 0 {
        out.insert("offset".into(), Value::Int(i64::try_from(query.offset).unwrap_or(i64::MAX)));
    }
    if let Some(sort) = sort(&query.sort) {
        out.insert("sort".into(), sort);
    }
    if let Some(select) = select(&query.select) {
        out.insert("select".into(), select);
    }
    Value::Object(out)
}

/// A condition, its attribute below the relationships in `path`.
fn condition(condition: &Condition, path: &[&str]) -> Value {
    let mut out = Object::default();
    match condition {
        Condition::Compare { attribute, comparator, value } => {
            let attribute = match path {
                [] => Value::String(attribute.clone()),
                _ => Value::Array(
                    path.iter().map(|p| Value::from(*p)).chain([Value::from(attribute.as_str())]).collect(),
                ),
            };
            out.insert("attribute".into(), attribute);
            out.insert("comparator".into(), comparator.name().into());
            out.insert("value".into(), value.clone());
        }
        Condition::Related { relationship, condition: inner } => {
            let deeper: Vec<&str> = path.iter().copied().chain([relationship.as_str()]).collect();
            return self::condition(inner, &deeper);
        }
        Condition::Group { operator, conditions } => {
            out.insert("operator".into(), if *operator == Operator::Or { "or" } else { "and" }.into());
            out.insert(
                "conditions".into(),
                Value::Array(conditions.iter().map(|c| self::condition(c, path)).collect()),
            );
        }
    }
    Value::Object(out)
}

/// The sort keys as Harper chains them (`next`), most significant first.
fn sort(keys: &[SortKey]) -> Option<Value> {
    keys.iter().rev().fold(None, |next, key| {
        let mut out = Object::default();
        out.insert("attribute".into(), key.attribute.clone().into());
        out.insert("descending".into(), key.descending.into());
        if let Some(next) = next {
            out.insert("next".into(), next);
        }
        Some(Value::Object(out))
    })
}

/// A projection as names: one name for a bare value's, else their array.
fn select(select: &Select) -> Option<Value> {
    match select {
        Select::Raw | Select::All => None,
        Select::Attributes(names) => Some(Value::Array(names.iter().map(|n| Value::from(n.as_str())).collect())),
        Select::Fields { fields, shape: Shaped::Value } if fields.len() == 1 => Some(field(&fields[0])),
        Select::Fields { fields, .. } => Some(Value::Array(fields.iter().map(field).collect())),
    }
}

fn field(field: &Field) -> Value {
    match &field.nested {
        None => Value::String(field.name.clone()),
        Some(nested) => {
            let mut out = Object::default();
            out.insert("name".into(), field.name.clone().into());
            out.insert("select".into(), Value::Array(nested.iter().map(self::field).collect()));
            Value::Object(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use lyre_core::query::Comparator;

    use super::*;

    fn compare(attribute: &str, value: i64) -> Condition {
        Condition::Compare { attribute: attribute.into(), comparator: Comparator::LessThan, value: Value::Int(value) }
    }

    /// Relationships become attribute paths, groups keep their operator, a bare
    /// value's projection is one name and a relationship's nests.
    #[test]
    fn groups_paths_and_projections_read_as_harpers() {
        let query = Query {
            operator: Operator::Or,
            conditions: vec![
                Condition::Related { relationship: "owner".into(), condition: Box::new(compare("age", 3)) },
                Condition::Group { operator: Operator::And, conditions: vec![compare("a", 1), compare("b", 2)] },
            ],
            select: Select::Fields {
                fields: vec![
                    Field { name: "id".into(), nested: None },
                    Field { name: "owner".into(), nested: Some(vec![Field { name: "name".into(), nested: None }]) },
                ],
                shape: Shaped::Object,
            },
            ..Query::default()
        };
        let expected = serde_json::json!({
            "conditions": [
                {"attribute": ["owner", "age"], "comparator": "less_than", "value": 3},
                {"operator": "and", "conditions": [
                    {"attribute": "a", "comparator": "less_than", "value": 1},
                    {"attribute": "b", "comparator": "less_than", "value": 2}
                ]}
            ],
            "operator": "or",
            "select": ["id", {"name": "owner", "select": ["name"]}]
        });
        assert_eq!(serde_json::to_value(query_object(&query)).unwrap(), expected);
        let one = Select::Fields { fields: vec![Field { name: "name".into(), nested: None }], shape: Shaped::Value };
        assert_eq!(select(&one), Some(Value::from("name")));
    }
}
