//! Users, roles and permissions through the real binary (issue 12): the user and role
//! operations with Harper's answers, a permission matrix generated from the roles'
//! grants (roles × operations × protocols), attributes a role may not read never
//! appearing in any read path, the read-only system database, and the failed-login
//! limit.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestServer;

const SCHEMA: &str = r#"
type Owner @table(database: "dev") @export(name: "owners") {
  id: ID @primaryKey
  name: String
  secret: String
  dogs: [Dog] @relationship(to: ownerId)
}
type Dog @table(database: "dev") @export(name: "dogs") {
  id: ID @primaryKey
  name: String @indexed
  secret: String @indexed
  ownerId: ID @indexed
  owner: Owner @relationship(from: ownerId)
}
"#;

const PASSWORD: &str = "pw-for-tests";

fn table(read: bool, insert: bool, update: bool, delete: bool) -> Value {
    json!({"read": read, "insert": insert, "update": update, "delete": delete, "attribute_permissions": []})
}

fn attribute(name: &str, read: bool, write: bool) -> Value {
    json!({"attribute_name": name, "read": read, "insert": write, "update": write})
}

/// The roles of the matrix, with what each may do.
struct Role {
    name: &'static str,
    permission: Value,
    may: &'static [Can],
    active: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Can {
    Describe,
    Read,
    Insert,
    Update,
    Delete,
    Structure,
    Administer,
}

fn roles() -> Vec<Role> {
    use Can::*;
    let mut restricted = table(true, true, true, false);
    restricted["attribute_permissions"] = json!([
        attribute("name", true, true),
        attribute("secret", false, false),
        attribute("ownerId", true, true),
        attribute("owner", true, false)
    ]);
    let mut owners = table(true, false, false, false);
    owners["attribute_permissions"] = json!([attribute("name", true, false), attribute("dogs", true, false)]);
    vec![
        Role {
            name: "structure",
            permission: json!({"structure_user": ["dev"]}),
            may: &[Describe, Read, Insert, Update, Delete, Structure],
            active: true,
        },
        Role {
            name: "reader",
            permission: json!({"dev": {"tables": {"Dog": table(true, false, false, false)}}}),
            may: &[Describe, Read],
            active: true,
        },
        Role {
            name: "inserter",
            permission: json!({"dev": {"tables": {"Dog": table(false, true, false, false)}}}),
            may: &[Describe, Insert],
            active: true,
        },
        Role {
            name: "restricted",
            permission: json!({"dev": {"tables": {"Dog": restricted, "Owner": owners}}}),
            may: &[Describe, Read, Insert, Update],
            active: true,
        },
        Role { name: "nothing", permission: json!({}), may: &[], active: true },
        Role {
            name: "switched_off",
            permission: json!({"dev": {"tables": {"Dog": table(true, true, true, true)}}}),
            may: &[],
            active: false,
        },
    ]
}

/// A server with the dev tables, two records, and one user per role (named as the
/// role).
async fn fixture() -> TestServer {
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    let s = TestServer::start_app(
        &[("components/dev/config.yaml", config), ("components/dev/schema.graphql", SCHEMA)],
        &[],
    )
    .await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "Owner",
        "records": [{"id": "o1", "name": "Ann", "secret": "owner-secret"}]}))
        .await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "Dog",
        "records": [{"id": "1", "name": "Rex", "secret": "dog-secret", "ownerId": "o1"}]}))
        .await;
    for role in roles() {
        s.ok(json!({"operation": "add_role", "role": role.name, "permission": role.permission})).await;
        s.ok(json!({"operation": "add_user", "username": role.name, "password": PASSWORD, "role": role.name,
            "active": role.active}))
            .await;
    }
    s
}

/// One operation of the matrix: its body (given a name unique to the caller) and
/// what it needs.
fn operations(caller: &str) -> Vec<(&'static str, Value, Can)> {
    let dog = |extra: Value| {
        let mut record = json!({"id": format!("{caller}-dog"), "name": "Fido"});
        record.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        record
    };
    vec![
        ("describe_table", json!({"operation": "describe_table", "database": "dev", "table": "Dog"}), Can::Describe),
        (
            "search_by_id",
            json!({"operation": "search_by_id", "database": "dev", "table": "Dog", "ids": ["1"], "get_attributes": ["*"]}),
            Can::Read,
        ),
        (
            "search_by_value",
            json!({"operation": "search_by_value", "database": "dev", "table": "Dog", "search_attribute": "name", "search_value": "Rex", "get_attributes": ["*"]}),
            Can::Read,
        ),
        (
            "search_by_conditions",
            json!({"operation": "search_by_conditions", "database": "dev", "table": "Dog", "conditions": [{"search_attribute": "name", "search_type": "equals", "search_value": "Rex"}], "get_attributes": ["*"]}),
            Can::Read,
        ),
        (
            "insert",
            json!({"operation": "insert", "database": "dev", "table": "Dog", "records": [dog(json!({}))]}),
            Can::Insert,
        ),
        (
            "update",
            json!({"operation": "update", "database": "dev", "table": "Dog", "records": [{"id": "1", "name": "Rex"}]}),
            Can::Update,
        ),
        (
            "upsert",
            json!({"operation": "upsert", "database": "dev", "table": "Dog", "records": [{"id": "1", "name": "Rex"}]}),
            Can::Update,
        ),
        (
            "delete",
            json!({"operation": "delete", "database": "dev", "table": "Dog", "ids": [format!("{caller}-missing")]}),
            Can::Delete,
        ),
        (
            "create_table",
            json!({"operation": "create_table", "database": "dev", "table": format!("t_{caller}"), "primary_key": "id"}),
            Can::Structure,
        ),
        (
            "add_user",
            json!({"operation": "add_user", "username": format!("new_{caller}"), "password": "x", "role": "reader", "active": true}),
            Can::Administer,
        ),
        ("list_roles", json!({"operation": "list_roles"}), Can::Administer),
    ]
}

fn allowed(role: &Role, need: Can) -> bool {
    // Upsert needs insert and update.
    role.may.contains(&need)
}

#[tokio::test]
async fn the_permission_matrix_over_the_operations_api() {
    let s = fixture().await;
    let mut failures = Vec::new();
    for role in roles() {
        for (name, body, need) in operations(role.name) {
            let need_both = name == "upsert";
            let expected = if !role.active {
                401
            } else if allowed(&role, need) && (!need_both || allowed(&role, Can::Insert)) {
                200
            } else {
                403
            };
            let (status, answer) = s.op_as(role.name, PASSWORD, &body).await;
            if status != expected {
                failures.push(format!("{} {name}: {status} (expected {expected}) {answer}", role.name));
                continue;
            }
            if status == 403 {
                let refusal = answer["unauthorized_access"].as_array().map_or(0, Vec::len)
                    + answer["invalid_schema_items"].as_array().map_or(0, Vec::len);
                if refusal == 0 || answer["error"].as_str().is_none() {
                    failures.push(format!("{} {name}: a 403 without Harper's body: {answer}", role.name));
                }
            }
            if status == 200 && name.starts_with("search") {
                for record in answer.as_array().into_iter().flatten() {
                    if record.get("secret").is_some() && role.name == "restricted" {
                        failures.push(format!("{name} showed the restricted role a secret: {record}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn the_permission_matrix_over_rest() {
    let s = fixture().await;
    let mut failures = Vec::new();
    for role in roles() {
        let id = format!("{}-rest", role.name);
        let requests: Vec<(Method, String, Option<Value>, Can, u16)> = vec![
            (Method::GET, "/dogs/1".into(), None, Can::Read, 200),
            (Method::GET, "/dogs/?name=Rex".into(), None, Can::Read, 200),
            (Method::POST, "/dogs/".into(), Some(json!({"name": "Post"})), Can::Insert, 201),
            (Method::PATCH, "/dogs/1".into(), Some(json!({"name": "Rex"})), Can::Update, 204),
            (Method::DELETE, format!("/dogs/{id}"), None, Can::Delete, 204),
        ];
        for (method, path, body, need, ok) in requests {
            // PATCH upserts: insert and update both.
            let permitted = allowed(&role, need) && (method != Method::PATCH || allowed(&role, Can::Insert));
            let expected = if !role.active {
                401
            } else if permitted {
                ok
            } else {
                403
            };
            let (status, answer) = s.rest_as(role.name, PASSWORD, method.clone(), &path, body.as_ref()).await;
            let matches = status == expected || (expected == 204 && status == 200);
            if !matches {
                failures.push(format!("{} {method} {path}: {status} (expected {expected}) {answer}", role.name));
            }
            if role.name == "restricted" && answer.to_string().contains("secret") {
                failures.push(format!("{method} {path} showed the restricted role a secret: {answer}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_restricted_attribute_appears_in_no_read_path_and_cannot_be_written() {
    let s = fixture().await;
    // Each read answers, with what the role may see (so "no secret" is not "nothing").
    let reads = [
        ("/dogs/1", "Rex"),
        ("/dogs/?name=Rex", "Rex"),
        ("/dogs/?select(id,name,owner)", "Ann"),
        ("/dogs/1?select(id,owner{name,secret})", "Ann"),
        ("/owners/o1?select(id,name,dogs)", "Rex"),
    ];
    for (path, visible) in reads {
        let (status, answer) = s.rest_as("restricted", PASSWORD, Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}: {answer}");
        assert!(answer.to_string().contains(visible), "{path} lost what it may show: {answer}");
        assert!(!answer.to_string().contains("-secret"), "{path} showed a secret: {answer}");
    }
    // A condition through a relationship into what the role may not read is refused
    // whether or not it would match (the answer would tell what is hidden).
    for (role, query) in [
        ("restricted", "/dogs/?owner.secret=owner-secret"),
        ("restricted", "/dogs/?owner.secret=nothing-like-it"),
        ("reader", "/dogs/?owner.name=Ann"),
        ("reader", "/dogs/?owner.name=Nobody"),
    ] {
        let (status, answer) = s.rest_as(role, PASSWORD, Method::GET, query, None).await;
        assert_eq!(status, 403, "{role} {query}: {answer}");
    }
    let (status, _) = s.rest_as("restricted", PASSWORD, Method::GET, "/dogs/?owner.name=Ann", None).await;
    assert_eq!(status, 200, "a readable related attribute may be queried");
    // Through a relationship, the related record comes without what the role may not read.
    let (status, answer) = s.rest_as("restricted", PASSWORD, Method::GET, "/dogs/1?select(id,owner)", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["owner"]["name"], "Ann", "{answer}");
    // Naming it is refused.
    let (status, answer) = s
        .op_as(
            "restricted",
            PASSWORD,
            &json!({"operation": "search_by_value", "database": "dev", "table": "Dog",
            "search_attribute": "secret", "search_value": "dog-secret", "get_attributes": ["id"]}),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    // A write touching it is refused whole: neither record is stored.
    let (status, answer) = s
        .op_as(
            "restricted",
            PASSWORD,
            &json!({"operation": "insert", "database": "dev", "table": "Dog",
            "records": [{"id": "ok", "name": "fine"}, {"id": "bad", "name": "x", "secret": "mine"}]}),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    // An attribute the role has no grant on at all is, to it, an attribute that does not exist.
    assert_eq!(answer["invalid_schema_items"], json!(["Attribute 'secret' does not exist on 'dev.Dog'"]), "{answer}");
    // One it may read but not write is named with what it lacks.
    let (status, answer) = s
        .op_as(
            "restricted",
            PASSWORD,
            &json!({"operation": "update", "database": "dev", "table": "Dog",
            "records": [{"id": "1", "owner": "o2"}]}),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer["unauthorized_access"][0]["required_attribute_permissions"],
        json!([{"attribute_name": "owner", "required_permissions": ["update"]}])
    );
    let found = s
        .ok(json!({"operation": "search_by_id", "database": "dev", "table": "Dog", "ids": ["ok", "bad"], "get_attributes": ["id"]}))
        .await;
    assert_eq!(found, json!([]));
    // The super user still reads everything.
    let (_, _, all) = s.rest_send(Method::GET, "/dogs/1", None, &[]).await;
    assert_eq!(all["secret"], "dog-secret");
    // A full replace (PUT) by the role keeps what it may not change, as in Harper.
    let body = json!({"id": "1", "name": "Rex II", "ownerId": "o1"});
    let (status, answer) = s.rest_as("restricted", PASSWORD, Method::PUT, "/dogs/1", Some(&body)).await;
    assert_eq!(status, 204, "{answer}");
    let (_, _, after) = s.rest_send(Method::GET, "/dogs/1", None, &[]).await;
    assert_eq!((after["name"].as_str(), after["secret"].as_str()), (Some("Rex II"), Some("dog-secret")), "{after}");
}

#[tokio::test]
async fn descriptions_show_only_what_a_role_may_see() {
    let s = fixture().await;
    let (status, all) = s.op_as("restricted", PASSWORD, &json!({"operation": "describe_all"})).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all.as_object().unwrap().keys().collect::<Vec<_>>(), ["dev"], "no system, no other database: {all}");
    let attributes: Vec<&str> =
        all["dev"]["Dog"]["attributes"].as_array().unwrap().iter().map(|a| a["attribute"].as_str().unwrap()).collect();
    assert!(attributes.contains(&"name") && !attributes.contains(&"secret"), "{attributes:?}");
    let (_, table) = s
        .op_as("restricted", PASSWORD, &json!({"operation": "describe_table", "database": "dev", "table": "Dog"}))
        .await;
    assert!(!table.to_string().contains("secret"), "{table}");
    // A database or table that does not exist looks, to a role, like one it may not see.
    for (database, table) in [("dev", "Cat"), ("nodb", "Dog"), ("dev", "Owner")] {
        let body = json!({"operation": "search_by_id", "database": database, "table": table, "ids": ["1"], "get_attributes": ["id"]});
        let (status, answer) = s.op_as("reader", PASSWORD, &body).await;
        assert_eq!(status, 403, "{database}.{table}: {answer}");
        assert!(answer["unauthorized_access"].as_array().unwrap().is_empty(), "{answer}");
    }
    let (status, nothing) = s.op_as("nothing", PASSWORD, &json!({"operation": "describe_all"})).await;
    assert_eq!((status, nothing), (200, json!({})));
    let (status, answer) =
        s.op_as("nothing", PASSWORD, &json!({"operation": "describe_database", "database": "dev"})).await;
    assert_eq!((status, answer["invalid_schema_items"].clone()), (403, json!(["database 'dev' does not exist"])));
}

#[tokio::test]
async fn user_and_role_operations_answer_as_harper() {
    let s = fixture().await;
    s.fails(
        json!({"operation": "add_user", "username": "reader", "password": "p", "role": "reader", "active": true}),
        409,
        "User reader already exists",
    )
    .await;
    s.fails(
        json!({"operation": "add_user", "username": "u2", "password": "p", "role": "nosuch", "active": true}),
        404,
        "nosuch role not found",
    )
    .await;
    s.fails(
        json!({"operation": "drop_role", "id": "reader"}),
        409,
        "Cannot drop role reader as it has active user(s) tied to this role",
    )
    .await;
    s.fails(json!({"operation": "drop_user", "username": "admin"}), 400, "User admin cannot drop themselves").await;
    s.fails(json!({"operation": "drop_user", "username": "ghost"}), 404, "User ghost does not exist").await;
    s.fails(json!({"operation": "drop_role", "id": "ghost"}), 404, "Role not found").await;
    s.fails(
        json!({"operation": "add_role", "role": "reader", "permission": {}}),
        409,
        "A role with name 'reader' already exists",
    )
    .await;

    let users = s.ok(json!({"operation": "list_users"})).await;
    let reader = users.as_array().unwrap().iter().find(|u| u["username"] == "reader").expect("listed");
    assert_eq!(reader["role"]["role"], "reader", "the role is expanded: {reader}");
    assert!(reader.get("password").is_none(), "no secrets: {reader}");
    let roles = s.ok(json!({"operation": "list_roles"})).await;
    assert!(roles.as_array().unwrap().iter().any(|r| r["id"] == "inserter"));

    let (status, info) = s.op_as("reader", PASSWORD, &json!({"operation": "user_info"})).await;
    assert_eq!(status, 200);
    assert_eq!(info["username"], "reader");
    assert_eq!(info["role"]["permission"]["dev"]["tables"]["Dog"]["read"], true);
    assert!(info.get("password").is_none());

    // alter_user: a new password works at once, the old one no longer does.
    let altered = s.ok(json!({"operation": "alter_user", "username": "reader", "password": "new-pw"})).await;
    assert_eq!(altered["message"], "updated 1 of 1 records");
    assert_eq!(altered["update_hashes"], json!(["reader"]));
    assert_eq!(s.op_as("reader", PASSWORD, &json!({"operation": "user_info"})).await.0, 401);
    assert_eq!(s.op_as("reader", "new-pw", &json!({"operation": "user_info"})).await.0, 200);
    // Switched off: refused at login, with Harper's message, and only with the right password.
    s.ok(json!({"operation": "alter_user", "username": "reader", "active": false})).await;
    let (status, answer) = s.op_as("reader", "new-pw", &json!({"operation": "user_info"})).await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("Cannot complete request: User is inactive")));
    let (status, answer) = s.op_as("reader", "wrong", &json!({"operation": "user_info"})).await;
    assert_eq!((status, answer["error"].as_str()), (401, Some("Login failed")));
    // With its only active user switched off, the role can go; then the user's role is gone.
    assert_eq!(
        s.ok(json!({"operation": "drop_user", "username": "reader"})).await["message"],
        "reader successfully deleted"
    );
    assert_eq!(s.ok(json!({"operation": "drop_role", "id": "reader"})).await["message"], "reader successfully deleted");

    // alter_role narrows a role for its logged-in users at once.
    let (status, _) = s
        .op_as("structure", PASSWORD, &json!({"operation": "describe_table", "database": "dev", "table": "Dog"}))
        .await;
    assert_eq!(status, 200);
    s.ok(json!({"operation": "alter_role", "id": "structure", "permission": {}})).await;
    let (status, _) = s
        .op_as("structure", PASSWORD, &json!({"operation": "describe_table", "database": "dev", "table": "Dog"}))
        .await;
    assert_eq!(status, 403);
    s.fails(json!({"operation": "alter_role", "id": "ghost", "permission": {}}), 400, "Invalid role id").await;
    // A role may keep its own name but not take another role's.
    s.ok(json!({"operation": "alter_role", "id": "structure", "role": "structure", "permission": {}})).await;
    s.ok(json!({"operation": "add_role", "role": "other", "permission": {}})).await;
    let taken = json!({"operation": "alter_role", "id": "structure", "role": "other", "permission": {}});
    s.fails(taken, 409, "A role with name 'other' already exists").await;

    // No change may leave nobody who can manage the server: a restart makes a new
    // admin only when there are no users at all.
    let last = "This change would leave no active user with a super_user role";
    let super_role = s.ok(json!({"operation": "user_info"})).await["role"]["id"].clone();
    s.fails(json!({"operation": "alter_role", "id": super_role, "permission": {"super_user": false}}), 400, last).await;
    s.fails(json!({"operation": "alter_user", "username": "admin", "active": false}), 400, last).await;
    s.fails(json!({"operation": "alter_user", "username": "admin", "role": "other"}), 400, last).await;
    assert_eq!(s.ok(json!({"operation": "user_info"})).await["role"]["permission"]["super_user"], true, "unchanged");
    // With a second active super user, the first may step down.
    s.ok(json!({"operation": "add_user", "username": "deputy", "password": PASSWORD, "role": super_role, "active": true}))
        .await;
    s.ok(json!({"operation": "alter_user", "username": "admin", "role": "other"})).await;
    let (status, _) = s.op_as("deputy", PASSWORD, &json!({"operation": "list_users"})).await;
    assert_eq!(status, 200, "the deputy manages the server");
}

#[tokio::test]
async fn another_user_s_job_is_for_super_users() {
    let s = fixture().await;
    let job =
        s.ok(json!({"operation": "delete_audit_logs_before", "database": "dev", "table": "Dog", "timestamp": 1})).await;
    let id = job["job_id"].as_str().unwrap();
    let (status, answer) = s.op_as("reader", PASSWORD, &json!({"operation": "get_job", "id": id})).await;
    assert_eq!(status, 403, "{answer}");
    let found = s.ok(json!({"operation": "get_job", "id": id})).await;
    assert_eq!(found[0]["user"], "admin", "{found}");
}

#[tokio::test]
async fn malformed_permissions_are_refused_naming_where() {
    let s = fixture().await;
    let (status, answer) = s
        .op(json!({"operation": "add_role", "role": "bad", "permission": {
            "nodb": {"tables": {}},
            "dev": {"tables": {"Cat": {}, "Dog": {"read": "yes", "insert": false, "update": false, "delete": false,
                "attribute_permissions": [{"attribute_name": "wings", "read": true, "insert": false, "update": false}]}}}}}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "Errors in the role permissions JSON provided");
    assert_eq!(answer["main_permissions"], json!(["database 'nodb' does not exist", "Table 'dev.Cat' does not exist"]));
    assert_eq!(
        answer["schema_permissions"]["dev_Dog"],
        json!(["Table READ permission must be a boolean", "Invalid attribute 'wings' in 'attribute_permissions'"])
    );
    // Nothing was stored.
    let roles = s.ok(json!({"operation": "list_roles"})).await;
    assert!(!roles.as_array().unwrap().iter().any(|r| r["id"] == "bad"));
}

#[tokio::test]
async fn the_system_database_changes_only_through_the_user_operations() {
    let s = fixture().await;
    for operation in ["insert", "update", "upsert"] {
        let body = json!({"operation": operation, "database": "system", "table": "hdb_user",
            "records": [{"username": "admin", "active": false, "password": "plain"}]});
        let (status, answer) = s.op(body).await;
        assert_eq!(status, 403, "{operation}: {answer}");
    }
    let (status, _) =
        s.op(json!({"operation": "delete", "database": "system", "table": "hdb_user", "ids": ["admin"]})).await;
    assert_eq!(status, 403);
    // The super user is still active and can still log in.
    let users = s.ok(json!({"operation": "list_users"})).await;
    let admin = users.as_array().unwrap().iter().find(|u| u["username"] == "admin").unwrap();
    assert_eq!(admin["active"], true);
    // Reading is allowed to the super user, refused to others.
    s.ok(json!({"operation": "search_by_id", "database": "system", "table": "hdb_role", "ids": ["reader"], "get_attributes": ["*"]}))
        .await;
    let (status, _) = s
        .op_as(
            "structure",
            PASSWORD,
            &json!({"operation": "search_by_id", "database": "system", "table": "hdb_user",
            "ids": ["admin"], "get_attributes": ["*"]}),
        )
        .await;
    assert_eq!(status, 403);
    // A structure user of every database is not shown the system database either.
    s.ok(json!({"operation": "add_role", "role": "builder", "permission": {"structure_user": true}})).await;
    s.ok(json!({"operation": "add_user", "username": "builder", "password": PASSWORD, "role": "builder", "active": true}))
        .await;
    let describe = json!({"operation": "describe_database", "database": "system"});
    assert_eq!(s.op_as("builder", PASSWORD, &describe).await.0, 403);
    let (status, all) = s.op_as("builder", PASSWORD, &json!({"operation": "describe_all"})).await;
    assert_eq!(status, 200);
    assert!(all.get("dev").is_some() && all.get("system").is_none(), "{all}");
}

#[tokio::test]
async fn unauthenticated_rest_requests_learn_no_table_names() {
    let s = fixture().await;
    let client = reqwest::Client::new();
    for path in ["/dogs/1", "/nosuchtable/1"] {
        let response = client.get(s.rest(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
}

#[tokio::test]
async fn rest_logins_follow_the_password_through_the_login_cache() {
    // A login verified once is answered from the cache after (the Basic header
    // decoded on the stack, or, when long, the general way): the cache must still
    // hold the whole password, take the name up to the first colon, and forget a
    // changed password or a dropped user.
    let s = fixture().await;
    s.ok(json!({"operation": "add_user", "username": "keeper", "password": "a:b", "role": "reader", "active": true}))
        .await;
    let s = &s;
    let get = |password: String| async move { s.rest_as("keeper", &password, Method::GET, "/dogs/1", None).await.0 };
    for _ in 0..2 {
        assert_eq!(get("a:b".into()).await, 200);
    }
    for wrong in ["a", "a:b:c", "a:", ""] {
        assert_eq!(get(wrong.into()).await, 401, "{wrong:?}");
    }
    use base64::Engine as _;
    let header = |scheme: &str| format!("{scheme} {}", base64::engine::general_purpose::STANDARD.encode("keeper:a:b"));
    for scheme in ["basic", "BASIC ", "Basic  "] {
        let response =
            reqwest::Client::new().get(s.rest("/dogs/1")).header("authorization", header(scheme)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{scheme:?}");
    }
    s.ok(json!({"operation": "alter_user", "username": "keeper", "password": "new"})).await;
    assert_eq!(get("a:b".into()).await, 401);
    assert_eq!(get("new".into()).await, 200);
    // Credentials longer than the stack's room log in too, and are refused when wrong.
    let long = "p".repeat(400);
    s.ok(json!({"operation": "alter_user", "username": "keeper", "password": long})).await;
    for _ in 0..2 {
        assert_eq!(get(long.clone()).await, 200);
    }
    assert_eq!(get(format!("{long}q")).await, 401);
    assert_eq!(get("new".into()).await, 401);
    s.ok(json!({"operation": "drop_user", "username": "keeper"})).await;
    assert_eq!(get(long).await, 401);
}

#[tokio::test]
async fn failed_logins_are_bounded_per_name() {
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    let s = TestServer::start_app(
        &[("components/dev/config.yaml", config), ("components/dev/schema.graphql", SCHEMA)],
        &[("AUTHENTICATION_MAXLOGINATTEMPTS", "3")],
    )
    .await;
    s.ok(json!({"operation": "add_role", "role": "r", "permission": {}})).await;
    s.ok(json!({"operation": "add_user", "username": "victim", "password": "right", "role": "r", "active": true}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "bystander", "password": "mine", "role": "r", "active": true}))
        .await;
    let info = json!({"operation": "user_info"});
    for _ in 0..3 {
        assert_eq!(s.op_as("victim", "guess", &info).await.0, 401);
    }
    // Over the limit: even the right password waits, and says for how long.
    let (status, answer) = s.op_as("victim", "right", &info).await;
    assert_eq!(status, 429, "{answer}");
    assert!(answer["error"].as_str().unwrap().starts_with("Too many failed login attempts"), "{answer}");
    // The address is limited too, for every name ...
    assert_eq!(s.op_as("bystander", "mine", &info).await.0, 429);
    // ... but not another address (127.0.0.2 is loopback too), except for the name.
    let elsewhere =
        reqwest::Client::builder().local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap()).build().unwrap();
    let from_elsewhere = |user: &'static str, password: &'static str| {
        elsewhere.post(s.url("/")).basic_auth(user, Some(password)).json(&info).send()
    };
    assert_eq!(from_elsewhere("bystander", "mine").await.unwrap().status().as_u16(), 200);
    assert_eq!(from_elsewhere("victim", "right").await.unwrap().status().as_u16(), 429);
}
