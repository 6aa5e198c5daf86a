//! The engine end to end below the protocols: tables, writes, queries, restarts.

use std::ops::ControlFlow;

use lyre_core::catalog::TableSpec;
use lyre_core::query::{Comparator, Condition, Operator, Query, Select, SortKey};
use lyre_core::{Context, Engine, Object, Value};

mod common;
use common::{options, record};

fn dynamic(name: &str) -> TableSpec {
    TableSpec::dynamic(name, "id")
}

fn collect(search: lyre_core::query::Search) -> Vec<Object> {
    let mut out = Vec::new();
    search
        .run(&mut |r| {
            match r {
                Value::Object(o) => out.push(o),
                other => panic!("expected an object, got {other:?}"),
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

fn ids(records: &[Object]) -> Vec<Value> {
    records.iter().map(|r| r["id"].clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queries_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::system();
    {
        let (engine, generated) = Engine::open(options(dir.path())).await.unwrap();
        assert!(generated.is_none());
        engine.create_table(&ctx, "dev", dynamic("dog")).await.unwrap();
        let dog = engine.database("dev").unwrap().table("dog").unwrap();
        let summary = dog
            .insert(
                &ctx,
                vec![
                    record(r#"{"id":1,"name":"Penny","age":5,"breed":"Lab"}"#),
                    record(r#"{"id":2,"name":"Kato","age":3,"breed":"Labrador Mix"}"#),
                    record(r#"{"id":3,"name":"Riley","age":8,"breed":"Husky","tags":["a","b"]}"#),
                    record(r#"{"name":"Rex","age":5}"#),
                ],
            )
            .await
            .unwrap();
        assert_eq!(summary.written.len(), 4);
        assert_eq!(summary.new_attributes, ["name", "age", "breed", "tags"]);
        let again = dog.insert(&ctx, vec![record(r#"{"id":1,"name":"Dup"}"#)]).await.unwrap();
        assert_eq!(again.skipped, vec![Value::Int(1)]);

        let dog = engine.database("dev").unwrap().table("dog").unwrap();
        let eq = |attr: &str, c, v: Value| Condition::Compare { attribute: attr.into(), comparator: c, value: v };
        let five = dog
            .search(
                &ctx,
                Query { conditions: vec![eq("age", Comparator::Equals, Value::Int(5))], ..Default::default() },
            )
            .unwrap();
        assert_eq!(five.explain(), "index(age)");
        assert_eq!(collect(five).len(), 2);
        let lab = dog
            .search(
                &ctx,
                Query { conditions: vec![eq("breed", Comparator::StartsWith, "Lab".into())], ..Default::default() },
            )
            .unwrap();
        assert_eq!(ids(&collect(lab)), [Value::Int(1), Value::Int(2)]);
        let sorted = dog
            .search(
                &ctx,
                Query {
                    sort: vec![SortKey { attribute: "age".into(), descending: true }],
                    limit: Some(2),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(sorted.explain(), "sort-index(age)");
        let ages: Vec<Value> = collect(sorted).iter().map(|r| r["age"].clone()).collect();
        assert_eq!(ages, [Value::Int(8), Value::Int(5)]);
        let either = dog
            .search(
                &ctx,
                Query {
                    operator: Operator::Or,
                    conditions: vec![
                        eq("age", Comparator::GreaterThan, Value::Int(6)),
                        eq("tags", Comparator::Equals, "a".into()),
                    ],
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(either.explain(), "union(2)");
        assert_eq!(ids(&collect(either)), [Value::Int(3)]);
        let update =
            dog.update(&ctx, vec![record(r#"{"id":2,"age":4}"#), record(r#"{"id":99,"age":1}"#)]).await.unwrap();
        assert_eq!(update.written, [Value::Int(2)]);
        assert_eq!(update.skipped, [Value::Int(99)]);
        let got = dog.get_many(&ctx, &[Value::Int(2), Value::Int(42)], &Select::Raw).unwrap();
        assert_eq!(got[0]["age"], Value::Int(4));
        assert_eq!(got[0]["name"], Value::from("Kato"));
        let deleted = dog.delete(&ctx, vec![Value::Int(3), Value::Int(77)]).await.unwrap();
        assert_eq!(deleted.deleted, [Value::Int(3)]);
        engine.shutdown().await;
    }
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let dog = engine.database("dev").unwrap().table("dog").unwrap();
    let all = collect(dog.search(&ctx, Query::default()).unwrap());
    assert_eq!(all.len(), 3);
    let tags = dog
        .search(
            &ctx,
            Query {
                conditions: vec![Condition::Compare {
                    attribute: "tags".into(),
                    comparator: Comparator::Equals,
                    value: "a".into(),
                }],
                ..Default::default()
            },
        )
        .unwrap();
    assert!(collect(tags).is_empty(), "index entries of a deleted record must be gone");
    assert!(engine.users().authenticate("admin", "password", None).is_ok());
    assert!(engine.users().authenticate("admin", "wrong", None).is_err());
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_uses_the_most_selective_index_and_never_scans_for_indexed_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::system();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    engine.create_table(&ctx, "dev", dynamic("t")).await.unwrap();
    let t = engine.database("dev").unwrap().table("t").unwrap();
    let records = (0..400)
        .map(|i| {
            record(&format!(
                r#"{{"id":{i},"status":"{}","code":"c{i:03}","n":{i}}}"#,
                if i % 2 == 0 { "even" } else { "odd" }
            ))
        })
        .collect();
    t.insert(&ctx, records).await.unwrap();
    let t = engine.database("dev").unwrap().table("t").unwrap();
    let cmp = |attr: &str, c, v: Value| Condition::Compare { attribute: attr.into(), comparator: c, value: v };
    let plan = |conditions: Vec<Condition>| t.search(&ctx, Query { conditions, ..Default::default() }).unwrap();

    let both =
        plan(vec![cmp("status", Comparator::Equals, "even".into()), cmp("code", Comparator::Equals, "c010".into())]);
    assert_eq!(both.explain(), "index(code)", "the rarer value drives");
    assert_eq!(ids(&collect(both)), [Value::Int(10)]);
    let reversed =
        plan(vec![cmp("code", Comparator::StartsWith, "c01".into()), cmp("status", Comparator::Equals, "odd".into())]);
    assert_eq!(reversed.explain(), "index(code)");
    assert_eq!(collect(reversed).len(), 5);
    for (condition, expected) in [
        (cmp("n", Comparator::GreaterThan, Value::Int(390)), "index(n)"),
        (cmp("n", Comparator::Between, vec![Value::Int(5), Value::Int(9)].into()), "index(n)"),
        (cmp("code", Comparator::StartsWith, "c39".into()), "index(code)"),
        (cmp("id", Comparator::Equals, Value::Int(7)), "keys(1)"),
        (cmp("id", Comparator::LessThan, Value::Int(3)), "primary-range"),
    ] {
        assert_eq!(plan(vec![condition.clone()]).explain(), expected, "{condition:?}");
    }
    let sorted = t
        .search(
            &ctx,
            Query {
                sort: vec![SortKey { attribute: "n".into(), descending: true }],
                limit: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(sorted.explain(), "sort-index(n)", "a sort on an indexed attribute streams");
    assert_eq!(ids(&collect(sorted)), [Value::Int(399), Value::Int(398), Value::Int(397)]);
    let unsortable = t
        .search(
            &ctx,
            Query {
                conditions: vec![cmp("status", Comparator::Equals, "odd".into())],
                sort: vec![SortKey { attribute: "n".into(), descending: false }],
                limit: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(unsortable.explain(), "index(status)+sort");
    assert_eq!(ids(&collect(unsortable)), [Value::Int(1), Value::Int(3)]);
    engine.shutdown().await;
}
