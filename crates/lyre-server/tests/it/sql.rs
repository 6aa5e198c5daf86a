//! The `sql` operation through the real binary: Harper's answers for queries and
//! writes, indexes used (seen through EXPLAIN), bad input refused with the right
//! status and nothing written, and permissions applied to every table a statement
//! touches.

use serde_json::{Value, json};

use crate::support::TestServer;

async fn sql(s: &TestServer, text: &str) -> (u16, Value) {
    s.op(json!({"operation": "sql", "sql": text})).await
}

async fn dogs() -> TestServer {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_database", "database": "dev"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "breed", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [
        {"id": 1, "dog_name": "Penny", "owner_name": "Kyle", "breed_id": 154, "age": 7},
        {"id": 2, "dog_name": "Harper", "owner_name": "Stephen", "breed_id": 346, "age": 5},
        {"id": 3, "dog_name": "Alby", "owner_name": null, "breed_id": 348, "age": 7},
        {"id": 4, "dog_name": "Billy", "owner_name": "Kyle", "breed_id": 999, "age": 2},
    ]}))
    .await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "breed", "records": [
        {"id": 154, "name": "Labrador"}, {"id": 346, "name": "Husky"}, {"id": 348, "name": "Beagle"},
    ]}))
    .await;
    s
}

#[tokio::test]
async fn queries_answer_harpers_rows() {
    let s = dogs().await;
    let (status, body) = sql(&s, "SELECT dog_name, age FROM dev.dog WHERE age = 7 ORDER BY dog_name").await;
    assert_eq!((status, body), (200, json!([{"dog_name": "Alby", "age": 7}, {"dog_name": "Penny", "age": 7}])));
    let (status, body) = sql(&s, "SELECT TOP 2 dog_name FROM dev.dog ORDER BY id").await;
    assert_eq!((status, body), (200, json!([{"dog_name": "Penny"}, {"dog_name": "Harper"}])));
    // Harper's collecting aggregates: ARRAY and GROUP_CONCAT.
    let (status, body) = sql(
        &s,
        "SELECT age, ARRAY(dog_name) AS names, GROUP_CONCAT(dog_name) AS joined FROM dev.dog GROUP BY age ORDER BY age",
    )
    .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!([
                {"age": 2, "names": ["Billy"], "joined": "Billy"},
                {"age": 5, "names": ["Harper"], "joined": "Harper"},
                {"age": 7, "names": ["Penny", "Alby"], "joined": "Penny,Alby"},
            ])
        )
    );
    let (status, body) = sql(&s, "SELECT GROUP_CONCAT(dog_name SEPARATOR ';') FROM dev.dog").await;
    assert_eq!(status, 400, "a separator is refused, not ignored: {body}");
    let (status, body) = sql(&s, "SELECT COUNT(*), AVG(age) FROM dev.dog").await;
    assert_eq!((status, body), (200, json!([{"COUNT(*)": 4, "AVG(age)": 5.25}])));
    let (_, body) =
        sql(&s, "SELECT d.dog_name, b.name FROM dev.dog d LEFT JOIN dev.breed b ON d.breed_id = b.id ORDER BY d.id")
            .await;
    assert_eq!(
        body,
        json!([
            {"dog_name": "Penny", "name": "Labrador"},
            {"dog_name": "Harper", "name": "Husky"},
            {"dog_name": "Alby", "name": "Beagle"},
            {"dog_name": "Billy", "name": null},
        ])
    );
    // A full join keeps both sides' unmatched rows; USING is refused naming the join.
    s.ok(
        json!({"operation": "insert", "database": "dev", "table": "breed", "records": [{"id": 500, "name": "Corgi"}]}),
    )
    .await;
    let (status, body) = sql(
        &s,
        "SELECT d.dog_name, b.name FROM dev.dog d FULL OUTER JOIN dev.breed b ON d.breed_id = b.id ORDER BY d.id, b.name",
    )
    .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!([
                {"dog_name": null, "name": "Corgi"},
                {"dog_name": "Penny", "name": "Labrador"},
                {"dog_name": "Harper", "name": "Husky"},
                {"dog_name": "Alby", "name": "Beagle"},
                {"dog_name": "Billy", "name": null},
            ])
        )
    );
    let (status, body) = sql(&s, "SELECT * FROM dev.dog d JOIN dev.breed b USING (id)").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("`JOIN dev.breed b USING(id)`"), "{body}");
    // LIKE ignores case, as Harper's does; `*` leads with the key and the timestamps.
    let (_, body) = sql(&s, "SELECT * FROM dev.dog WHERE dog_name LIKE 'pen%'").await;
    let row = body[0].as_object().expect("one row");
    let keys: Vec<&str> = row.keys().map(String::as_str).collect();
    assert_eq!(&keys[..3], ["id", "__createdtime__", "__updatedtime__"]);
    assert_eq!(row["dog_name"], "Penny");
}

#[tokio::test]
async fn joins_cross_databases_and_insert_select_copies_rows() {
    let s = dogs().await;
    s.ok(json!({"operation": "create_database", "database": "other"})).await;
    s.ok(json!({"operation": "create_table", "database": "other", "table": "owner", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "other", "table": "owner", "records": [
        {"id": 1, "name": "Kyle", "city": "Denver"}, {"id": 2, "name": "Stephen", "city": "Austin"},
    ]}))
    .await;
    let (status, body) = sql(
        &s,
        "SELECT d.dog_name, o.city FROM dev.dog d INNER JOIN other.owner o ON o.name = d.owner_name ORDER BY d.id",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{"dog_name": "Penny", "city": "Denver"}, {"dog_name": "Harper", "city": "Austin"}, {"dog_name": "Billy", "city": "Denver"}])
    );
    let (status, body) = sql(
        &s,
        "INSERT INTO other.owner (id, name, city) SELECT id + 100, dog_name, 'kennel' FROM dev.dog WHERE age = 7",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"message": "inserted 2 of 2 records", "inserted_hashes": [101, 103], "skipped_hashes": []})
    );
    let (_, body) = sql(&s, "SELECT id, name FROM other.owner WHERE city = 'kennel' ORDER BY id").await;
    assert_eq!(body, json!([{"id": 101, "name": "Penny"}, {"id": 103, "name": "Alby"}]));
}

#[tokio::test]
async fn date_geo_and_json_functions_answer_through_sql() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_database", "database": "dev"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "place", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "place", "records": [
        {"id": 1, "at": {"type": "Point", "coordinates": [0, 0]}, "opened": "2024-03-05T10:20:30.456Z", "tags": {"color": "red", "toys": ["ball", "rope"]}},
        {"id": 2, "at": {"type": "Point", "coordinates": [1, 0]}, "opened": 1709634030456i64, "tags": ["calm"]},
    ]}))
    .await;
    let (status, body) = sql(
        &s,
        "SELECT id, DATE_FORMAT(opened, 'YYYY-MM-DD') AS day, DATE_ADD(opened, 1, 'days') AS next, EXTRACT(opened, 'month') AS month, \
         SEARCH_JSON('toys[1]', tags) AS toy FROM dev.place ORDER BY id",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([
            {"id": 1, "day": "2024-03-05", "next": 1709720430456i64, "month": "03", "toy": "rope"},
            {"id": 2, "day": "2024-03-05", "next": 1709720430456i64, "month": "03", "toy": null},
        ])
    );
    let (_, body) = sql(
        &s,
        "SELECT b.id FROM dev.place a CROSS JOIN dev.place b WHERE a.id = 1 AND geoNear(a.at, b.at, 112) AND b.id <> 1",
    )
    .await;
    assert_eq!(body, json!([{"id": 2}]));
    let (_, body) = sql(&s, "SELECT id FROM dev.place WHERE SEARCH_JSON('\"calm\" in $', tags)").await;
    assert_eq!(body, json!([{"id": 2}]));
    let (status, body) =
        sql(&s, "SELECT geoDistance(at, '{\"type\":\"Polygon\",\"coordinates\":[]}') FROM dev.place").await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn indexes_serve_conditions_and_joins() {
    let s = dogs().await;
    let (status, plan) =
        sql(&s, "EXPLAIN SELECT * FROM dev.dog d JOIN dev.breed b ON b.id = d.breed_id WHERE d.owner_name = 'Kyle'")
            .await;
    assert_eq!(status, 200);
    assert_eq!(plan, json!(["d: index(owner_name)", "b: lookup by id for each row"]));
    let (_, plan) = sql(&s, "EXPLAIN SELECT id FROM dev.dog WHERE dog_name LIKE 'Pe%'").await;
    assert_eq!(plan, json!(["dog: union(4)"]), "each case spelling of the prefix is an index range");
    let (_, plan) = sql(&s, "EXPLAIN SELECT id FROM dev.dog WHERE id IN (1, 2)").await;
    assert_eq!(plan, json!(["dog: keys(2)"]));
    let (_, plan) = sql(&s, "EXPLAIN SELECT id FROM dev.dog ORDER BY age DESC LIMIT 2").await;
    assert_eq!(plan, json!(["dog: sort-index(age)"]), "ORDER BY an indexed attribute with LIMIT reads in index order");
    // Without a LIMIT (or with a page past core's window) the statement sorts, under
    // its memory budget, instead of core holding every match outside it.
    let (_, plan) = sql(&s, "EXPLAIN SELECT id FROM dev.dog WHERE id IN (1, 2) ORDER BY age").await;
    assert_eq!(plan, json!(["dog: keys(2)"]));
    let (_, body) = sql(&s, "SELECT id FROM dev.dog WHERE age >= 5 ORDER BY age DESC LIMIT 1 OFFSET 20000").await;
    assert_eq!(body, json!([]));
    // A range on the sorted attribute reads its index range in order, and stops.
    let (_, plan) = sql(&s, "EXPLAIN SELECT id FROM dev.dog WHERE age >= 5 ORDER BY age LIMIT 2").await;
    assert_eq!(plan, json!(["dog: index(age)"]));
    let (_, body) = sql(&s, "SELECT id, age FROM dev.dog WHERE age >= 5 ORDER BY age LIMIT 2").await;
    assert_eq!(body, json!([{"id": 2, "age": 5}, {"id": 1, "age": 7}]));
}

#[tokio::test]
async fn writes_answer_harpers_bodies_and_are_atomic() {
    let s = dogs().await;
    let (status, body) =
        sql(&s, "INSERT INTO dev.dog (id, dog_name, age) VALUES (10, 'Ten', 1), (1, \"dup\", 1)").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"message": "inserted 1 of 2 records", "inserted_hashes": [10], "skipped_hashes": [1]}));
    let (_, body) =
        sql(&s, "UPDATE dev.dog SET age = age + 1, owner_name = UPPER(owner_name) WHERE owner_name = 'Kyle'").await;
    assert_eq!(body, json!({"message": "updated 2 of 2 records", "update_hashes": [1, 4], "skipped_hashes": []}));
    let (_, body) = sql(&s, "SELECT id, age, owner_name FROM dev.dog WHERE id IN (1, 4) ORDER BY id").await;
    assert_eq!(body, json!([{"id": 1, "age": 8, "owner_name": "KYLE"}, {"id": 4, "age": 3, "owner_name": "KYLE"}]));
    let (_, body) = sql(&s, "DELETE FROM dev.dog WHERE id = 10").await;
    assert_eq!(
        body,
        json!({"message": "1 of 1 record successfully deleted", "deleted_hashes": [10], "skipped_hashes": []})
    );
    let (_, body) = sql(&s, "DELETE FROM dev.dog WHERE age > 100").await;
    assert_eq!(
        body,
        json!({"message": "0 of 0 records successfully deleted", "deleted_hashes": [], "skipped_hashes": []})
    );

    // A backslash in a string is itself (standard SQL, as Harper reads it), also
    // when UPDATE and DELETE select rows with it and in a LIKE's ESCAPE.
    let (_, body) = sql(&s, r"INSERT INTO dev.dog (id, dog_name) VALUES (30, 'C:\temp\n''s')").await;
    assert_eq!(body["inserted_hashes"], json!([30]));
    let (_, body) = sql(&s, "SELECT dog_name FROM dev.dog WHERE id = 30").await;
    assert_eq!(body, json!([{"dog_name": r"C:\temp\n's"}]));
    let (_, body) = sql(&s, r"SELECT id FROM dev.dog WHERE dog_name LIKE 'C:\\t%' ESCAPE '\' -- a comment \").await;
    assert_eq!(body, json!([{"id": 30}]), "{body}");
    let (_, body) = sql(&s, r"SELECT id FROM dev.dog WHERE dog_name LIKE 'C:\_%' ESCAPE '\'").await;
    assert_eq!(body, json!([]), "an escaped _ is itself: {body}");
    // An escaped quote is a quote, as MySQL-style escaping of values writes it.
    let (_, body) = sql(&s, r"SELECT id FROM dev.dog WHERE dog_name = 'C:\temp\n\'s' OR dog_name = 'x'").await;
    assert_eq!(body, json!([{"id": 30}]), "{body}");
    let (_, body) = sql(&s, r"SELECT id FROM dev.dog WHERE dog_name = 'a\' OR 1=1 #'").await;
    assert_eq!(body, json!([]), "an escaped quote does not end the literal: {body}");
    let (_, body) = sql(&s, r"UPDATE dev.dog SET age = 1 WHERE dog_name = 'C:\temp\n''s'").await;
    assert_eq!(body["update_hashes"], json!([30]), "{body}");
    let (_, body) = sql(&s, r"DELETE FROM dev.dog WHERE dog_name = 'C:\temp\n''s'").await;
    assert_eq!(body["deleted_hashes"], json!([30]), "{body}");

    // A row that fails validation fails the whole statement: nothing is written.
    let too_long = "k".repeat(2_000);
    let (status, body) =
        sql(&s, &format!("INSERT INTO dev.dog (id, dog_name) VALUES (20, 'ok'), ('{too_long}', 'no')")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|m| m.contains("Primary key size is too large")), "{body}");
    let (_, body) = sql(&s, "SELECT id FROM dev.dog WHERE id = 20").await;
    assert_eq!(body, json!([]), "the valid row of a failed INSERT was not written");
}

#[tokio::test]
async fn bad_statements_are_refused_with_what_is_wrong() {
    let s = dogs().await;
    let (status, body) = sql(&s, "SELECT * FROM dev.dog WHERE").await;
    assert_eq!(status, 400);
    let message = body["error"].as_str().expect("an error");
    assert!(message.starts_with("Invalid SQL at: ") && message.contains("line 1, column 28"), "{message}");
    let (status, body) = sql(&s, "SELECT *\nFROM dev.dog\nWHERE age = = 3").await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().is_some_and(|m| m.contains("line 3")), "{body}");

    for (text, status, message) in [
        ("SELECT nope FROM dev.dog", 400, "unknown column nope"),
        ("SELECT id FROM dev.dog d JOIN dev.breed b ON b.id = d.breed_id", 400, "ambiguous column reference id"),
        ("SELECT * FROM dev.nope", 404, "Table 'dev.nope' does not exist"),
        ("SELECT * FROM nodb.dog", 404, "database 'nodb' does not exist"),
        ("DROP TABLE dev.dog", 400, "is not supported in SQL"),
        ("SELECT 1 FROM dev.dog; DELETE FROM dev.dog", 400, "send one per request"),
        ("SELECT * FROM dev.dog WHERE dog_name REGEXP '('", 400, "REGEXP pattern"),
        ("SELECT UPPER(dog_name, 1) FROM dev.dog", 400, "takes 1 arguments"),
        ("SELECT COUNT(*) FROM dev.dog WHERE COUNT(*) > 1", 400, "not allowed here"),
    ] {
        let (got, body) = sql(&s, text).await;
        assert_eq!(got, status, "{text}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(message), "{text}: {error}");
    }
    for body in [json!({"operation": "sql"}), json!({"operation": "sql", "sql": "  "})] {
        let (status, answer) = s.op(body).await;
        assert_eq!((status, answer), (400, json!({"error": "The 'sql' parameter is missing from the request body"})));
    }
    let (status, _) = s.op(json!({"operation": "sql", "sql": 42})).await;
    assert_eq!(status, 400);
    // Deep nesting is refused by a limit, not by the stack: parentheses, and long
    // chains of operators (which sqlparser builds as deep trees without recursing).
    let parentheses = format!("SELECT {}1{} FROM dev.dog", "(".repeat(5_000), ")".repeat(5_000));
    let chain = format!("SELECT 1{} FROM dev.dog", "+1".repeat(500_000));
    let ors = format!("SELECT id FROM dev.dog WHERE {}id = 0", "id = 1 OR ".repeat(100_000));
    for deep in [parentheses, chain, ors] {
        let (status, body) = sql(&s, &deep).await;
        assert_eq!(status, 400, "{body}");
    }
    let (status, body) = sql(&s, &format!("SELECT 1 FROM dev.dog WHERE id = {}", "1".repeat(2 << 20))).await;
    assert_eq!(status, 400, "{body}");
    // Text that would grow past 16 MiB is refused before it is built.
    let big = "a".repeat(1_000);
    let replace = format!(
        "SELECT REPLACE(REPLACE(REPLACE('{big}', 'a', '{big}'), 'a', '{big}'), 'a', '{big}') AS x FROM dev.dog"
    );
    let (status, body) = sql(&s, &replace).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|m| m.contains("more than the 16777216 allowed")), "{body}");
    let (status, _) = sql(&s, "SELECT id FROM dev.dog").await;
    assert_eq!(status, 200, "the server still answers");
}

#[tokio::test]
async fn a_statement_past_its_memory_budget_fails_clearly() {
    let s = TestServer::start_with(&[("SQL_MEMORYBUDGET", "200000")]).await;
    s.ok(json!({"operation": "create_database", "database": "dev"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    let records: Vec<Value> = (0..1000).map(|i| json!({"id": i, "pad": "x".repeat(200)})).collect();
    s.ok(json!({"operation": "insert", "database": "dev", "table": "t", "records": records})).await;
    for text in [
        "SELECT a.id, b.id FROM dev.t a CROSS JOIN dev.t b",
        "SELECT * FROM dev.t ORDER BY pad",
        "SELECT a.id, b.id FROM dev.t a CROSS JOIN dev.t b WHERE a.id < 300 AND b.id < 300 ORDER BY b.id LIMIT 2",
    ] {
        let (status, body) = sql(&s, text).await;
        assert_eq!(status, 400, "{text}: {body}");
        assert!(body["error"].as_str().is_some_and(|m| m.contains("memory budget of 200000 bytes")), "{body}");
    }
    // Without an order the page is the first rows that pass: the cross join (and
    // a scan filtered by what no index answers) stops once it has them.
    // (300 × 300 rows would be past the budget: the inputs alone are within it.)
    let pairs = "SELECT a.id AS a, b.id AS b FROM dev.t a CROSS JOIN dev.t b WHERE a.id < 300 AND b.id < 300";
    let (status, body) = sql(&s, &format!("{pairs} LIMIT 2 OFFSET 1")).await;
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(2)), "{body}");
    assert!(body.as_array().unwrap().iter().all(|row| row["a"].is_i64() && row["b"].is_i64()), "{body}");
    let (status, body) = sql(&s, "SELECT id FROM dev.t WHERE UPPER(pad) LIKE 'X%' LIMIT 3").await;
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(3)), "{body}");
    let (status, body) = sql(&s, &format!("SELECT COUNT(*) AS n FROM ({pairs} LIMIT 5) AS p")).await;
    assert_eq!((status, body), (200, json!([{"n": 5}])));
    // Grouping holds its groups, not the rows it reads: 1,000 rows of 200 bytes
    // group within the budget they would pass if held.
    let (status, body) = sql(&s, "SELECT id % 3 AS g, COUNT(*) AS n FROM dev.t GROUP BY id % 3 ORDER BY g").await;
    assert_eq!((status, body), (200, json!([{"g": 0, "n": 334}, {"g": 1, "n": 333}, {"g": 2, "n": 333}])));
    // So does a grouped join: each lookup batch's records are freed once joined.
    let (status, body) = sql(
        &s,
        "SELECT a.id % 3 AS g, COUNT(b.pad) AS n FROM dev.t a INNER JOIN dev.t b ON b.id = a.id GROUP BY a.id % 3 ORDER BY g",
    )
    .await;
    assert_eq!((status, body), (200, json!([{"g": 0, "n": 334}, {"g": 1, "n": 333}, {"g": 2, "n": 333}])));
}

/// Clients updating one row at once through SQL: every `SET n = n + 1` counts
/// (each row is written only if it is still what the statement read, else the
/// statement is worked out again), and a `WHERE` on a value another client changes
/// meanwhile is judged on the current row: one claim wins, the rest update nothing.
#[tokio::test]
async fn concurrent_sql_updates_lose_nothing_and_judge_where_on_current_rows() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_database", "database": "dev"})).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "seat", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "seat", "records": [{"id": "s1", "n": 0, "owner": "free"}]}))
        .await;
    const CLIENTS: usize = 6;
    const EACH: usize = 20;
    let increments = (0..CLIENTS).map(|_| async {
        for _ in 0..EACH {
            let (status, body) = sql(&s, "UPDATE dev.seat SET n = n + 1 WHERE id = 's1'").await;
            assert_eq!((status, body["update_hashes"].clone()), (200, json!(["s1"])), "{body}");
        }
    });
    futures_util::future::join_all(increments).await;
    let (_, body) = sql(&s, "SELECT n FROM dev.seat WHERE id = 's1'").await;
    assert_eq!(body, json!([{"n": CLIENTS * EACH}]), "no increment lost");

    let claims = (0..CLIENTS).map(|i| {
        let text = format!("UPDATE dev.seat SET owner = 'c{i}' WHERE id = 's1' AND owner = 'free'");
        let s = &s;
        async move { sql(s, &text).await }
    });
    let answers = futures_util::future::join_all(claims).await;
    let won = answers.iter().filter(|(status, body)| *status == 200 && body["update_hashes"] == json!(["s1"])).count();
    assert_eq!(won, 1, "{answers:?}");
    assert!(answers.iter().all(|(status, _)| *status == 200), "{answers:?}");
}

#[tokio::test]
async fn permissions_apply_to_every_table_a_statement_touches() {
    let s = dogs().await;
    let dog = json!({"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": [
        {"attribute_name": "id", "read": true, "insert": false, "update": false},
        {"attribute_name": "dog_name", "read": true, "insert": false, "update": false},
        {"attribute_name": "breed_id", "read": true, "insert": false, "update": false},
    ]});
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": {"dev": {"tables": {"dog": dog}}}})).await;
    s.ok(json!({"operation": "add_user", "role": "reader", "username": "reader", "password": "pw-reader", "active": true})).await;
    let as_reader = |text: &str| {
        let body = json!({"operation": "sql", "sql": text});
        let s = &s;
        async move { s.op_as("reader", "pw-reader", &body).await }
    };
    let (status, body) = as_reader("SELECT id, dog_name FROM dev.dog WHERE id = 1").await;
    assert_eq!((status, body), (200, json!([{"id": 1, "dog_name": "Penny"}])));
    // `*` leaves out what the role may not read.
    let (_, body) = as_reader("SELECT * FROM dev.dog WHERE id = 1").await;
    assert!(body[0].get("owner_name").is_none() && body[0]["dog_name"] == "Penny", "{body}");
    // Naming a hidden attribute anywhere is refused, as Harper refuses it.
    for text in [
        "SELECT owner_name FROM dev.dog",
        "SELECT id FROM dev.dog WHERE owner_name = 'Kyle'",
        "SELECT id FROM dev.dog ORDER BY age",
        "SELECT COUNT(DISTINCT owner_name) FROM dev.dog",
    ] {
        let (status, body) = as_reader(text).await;
        assert_eq!(status, 403, "{text}: {body}");
        assert!(body["unauthorized_access"].is_array() || body["invalid_schema_items"].is_array(), "{text}: {body}");
    }
    // A table the role has no grant on, joined or alone.
    let (status, _) = as_reader("SELECT d.id, b.name FROM dev.dog d JOIN dev.breed b ON b.id = d.breed_id").await;
    assert!(status == 403 || status == 404, "{status}");
    // Writes need write grants.
    for text in [
        "INSERT INTO dev.dog (id, dog_name) VALUES (50, 'x')",
        "UPDATE dev.dog SET dog_name = 'x' WHERE id = 1",
        "DELETE FROM dev.dog WHERE id = 1",
    ] {
        let (status, body) = as_reader(text).await;
        assert_eq!(status, 403, "{text}: {body}");
    }
    let (_, body) = sql(&s, "SELECT dog_name FROM dev.dog WHERE id = 1").await;
    assert_eq!(body, json!([{"dog_name": "Penny"}]), "nothing was written");
}
