//! JavaScript applications: components' `resources.js` deployed through the
//! Operations API and served over REST with Harper's Resource API.

use reqwest::Method;
use serde_json::{Value, json};

use crate::components::payload;
use crate::support::{PASSWORD, TestServer, USER};

/// Harper's application template (HarperDB/application-template, Apache-2.0): its
/// `config.yaml`, `schema.graphql` and `resources.js`, as the template has them.
const TEMPLATE_CONFIG: &str =
    "rest: true\ngraphqlSchema:\n  files: 'schema.graphql'\njsResource:\n  files: 'resources.js'\n";
const TEMPLATE_SCHEMA: &str = r#"type TableName @table @export {
    id: ID @primaryKey # Here we define primary key (must be one)
    name: String # we can define any other attributes here
    tag: String @indexed # we can specify any attributes that should be indexed
}
"#;
const TEMPLATE_RESOURCES: &str = r#"/** Here we can define any JavaScript-based resources and extensions to tables

export class MyCustomResource extends tables.TableName {
	// we can define our own custom POST handler
	post(content) {
		// do something with the incoming content;
		return super.post(content);
	}
	// or custom GET handler
	get() {
		// we can modify this resource before returning
		return super.get();
	}
}
 */
// we can also define a custom resource without a specific table
export class Greeting extends Resource {
	// a "Hello, world!" handler
	static loadAsInstance = false; // use the updated/newer Resource API

	get() {
		return { greeting: 'Hello, world!' };
	}
}"#;

const KENNEL_SCHEMA: &str = r#"
type Dog @table @export { id: ID @primaryKey name: String breed: String @indexed }
type Cat @table { id: ID @primaryKey name: String }
"#;

/// A table's class overriding `get` (the newer API) and `put` (the instance-loading
/// one), a custom endpoint with `post`, and resources that fail in each way.
const KENNEL_RESOURCES: &str = r#"
import { shout } from './lib/words.js';
import { tables, Resource } from 'harperdb';

export class Dog extends tables.Dog {
	static loadAsInstance = false;
	async get(target) {
		const found = await super.get(target);
		if (!found || target.isCollection) return found;
		return { ...found, loud: shout(found.name) };
	}
}

export class Cats extends tables.Cat {
	put(data, target) {
		return super.put({ ...data, name: shout(data.name) }, target);
	}
}

export class Relay extends Resource {
	static loadAsInstance = false;
	get(target) {
		// The request's target, passed on: still checked as the request's user.
		return tables.Dog.get(target);
	}
}

export class DogsLegacy extends tables.Dog {
	get(target) {
		return super.get(target);
	}
}

export class OpenCats extends tables.Cat {
	static loadAsInstance = false;
	allowRead() {
		return true;
	}
}

export class ClosedDogs extends tables.Dog {
	static loadAsInstance = false;
	allowRead(user) {
		return user?.username === 'nobody';
	}
}

export class Posts extends tables.Cat {
	post(content) {
		return super.post(content);
	}
}

export const v2 = { Dogs: class extends tables.Dog { static loadAsInstance = false; get(target) { return super.get(target); } } };

export class Echo extends Resource {
	static loadAsInstance = false;
	post(target, data) {
		// A context the script froze still fetches what it is asked for.
		const context = Object.freeze(this.getContext());
		context.responseHeaders.set('X-Echoed', 'yes');
		return { echoed: data, user: context.user?.username ?? null, probe: context.headers.get('X-Probe') };
	}
}

export class Fails extends Resource {
	static loadAsInstance = false;
	get(target) {
		switch (target.get('how')) {
			case 'client': throw new ClientError('no such thing here', 418);
			case 'headed': this.getContext().responseHeaders.set('X-Before', 'kept'); throw new ClientError('with a header', 409);
			case 'headed-later': return Promise.resolve().then(() => { this.getContext().responseHeaders.set('X-Before', 'later'); throw new ClientError('later', 409); });
			case 'status': { const e = new Error('bad input'); e.statusCode = 400; throw e; }
			case 'plain': throw new Error('a secret detail');
			case 'value': throw 42;
			case 'nothing': return undefined;
			case 'bomb': { let x = {}; for (let i = 0; i < 40; i++) x = { a: x, b: x }; return x; }
			case 'response': return { status: 202, headers: { 'X-Kind': 'raw' }, body: 'accepted' };
			case 'getter': return { get a() { throw new Error('a getter secret'); } };
			case 'bigint': return { n: 123n, low: -(2n ** 63n) };
			case 'huge': return { n: 2n ** 64n + 5n };
			case 'store-huge': return tables.Dog.put({ id: 'huge', name: 'Huge', extra: 2n ** 64n + 5n });
			default: return { ok: true };
		}
	}
}

export class Runaway extends Resource {
	static loadAsInstance = false;
	get(target) {
		if (target.get('how') === 'memory') {
			const hoard = [];
			for (;;) hoard.push('x'.repeat(1 << 16) + hoard.length);
		}
		for (;;) {}
	}
}

export class Searches extends Resource {
	static loadAsInstance = false;
	async get(target) {
		const found = [];
		for await (const dog of tables.Dog.search({ conditions: [{ attribute: 'breed', value: target.get('breed') }] })) found.push(dog.id);
		const listed = tables.Dog.search({ conditions: [{ attribute: 'breed', value: target.get('breed') }], select: ['name'] });
		const queried = tables.Dog.search(`breed=${target.get('breed')}`);
		return { ids: found.sort(), names: listed.map((dog) => dog.name).sort(), queried: queried.map((dog) => dog.id) };
	}
}

export class Later extends Resource {
	static loadAsInstance = false;
	get(target) {
		// Not awaited: it still runs to its end after the answer.
		tables.Dog.put(target.get('id'), { name: 'written later' });
		Promise.reject(new Error('nobody awaits this'));
		return { started: true };
	}
}

export const api = { v1: { Greeting: class extends Resource { static loadAsInstance = false; get() { return 'nested'; } } } };

export class Settles extends Resource {
	static loadAsInstance = false;
	async get(target) {
		const how = target.get('how');
		const context = this.getContext();
		context.responseHeaders.set('X-Settled', how);
		// A microtask queued before the answer runs before it is read, as after an `await`.
		Promise.resolve().then(() => context.responseHeaders.set('X-Microtask', 'ran'));
		if (how.startsWith('wait')) await new Promise((resolve) => setTimeout(resolve, 5));
		if (how.endsWith('reject')) throw new ClientError(`refused: ${how}`, 409);
		return { settled: how, id: target.get('id') };
	}
}

export class Thenable extends Resource {
	static loadAsInstance = false;
	get(target) {
		const how = target.get('how');
		return { then: (resolve, reject) => (how === 'reject' ? reject(new ClientError('the thenable refused', 410)) : resolve({ via: 'thenable' })) };
	}
}
"#;

const WORDS: &str = "export function shout(text) { return String(text).toUpperCase() + '!'; }\n";

/// The `config.yaml` of a component with a schema and `resources.js`.
const APP_CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\njsResource:\n  files: 'resources.js'\n";

/// A server started with component `name`: `schema` and `resources` under
/// [`APP_CONFIG`], with `env` set.
async fn scripted_app(name: &str, schema: &str, resources: &str, env: &[(&str, &str)]) -> TestServer {
    let (config, schema_file, resources_file) = (
        format!("components/{name}/config.yaml"),
        format!("components/{name}/schema.graphql"),
        format!("components/{name}/resources.js"),
    );
    TestServer::start_app(&[(&config, APP_CONFIG), (&schema_file, schema), (&resources_file, resources)], env).await
}

/// Deploys `files` as component `name`; the operation's status and answer.
/// Deploys component `name` serving REST with `resources` as its only script; it
/// must load.
async fn deploy_resources(s: &TestServer, name: &str, resources: &str) {
    let config = "rest: true\njsResource:\n  files: 'resources.js'\n";
    let (status, answer) = deploy(s, name, &[("config.yaml", config), ("resources.js", resources)]).await;
    assert_eq!(status, 200, "{answer}");
}

async fn deploy(s: &TestServer, name: &str, files: &[(&str, &str)]) -> (u16, Value) {
    s.op(json!({"operation": "deploy_component", "project": name, "payload": payload(files)})).await
}

async fn kennel(env: &[(&str, &str)]) -> TestServer {
    let s = TestServer::start_with(env).await;
    let (status, answer) = deploy(
        &s,
        "kennel",
        &[
            ("config.yaml", TEMPLATE_CONFIG),
            ("schema.graphql", KENNEL_SCHEMA),
            ("resources.js", KENNEL_RESOURCES),
            ("lib/words.js", WORDS),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    s
}

/// A REST request without credentials: status, headers and body.
/// Adds user `username` (password `pw`) whose role `role` may read only `attribute`
/// of `table`, and write nothing.
async fn add_reader_of_one_attribute(s: &TestServer, role: &str, username: &str, table: &str, attribute: &str) {
    s.ok(json!({"operation": "add_role", "role": role, "permission": {"data": {"tables": {
        table: {"read": true, "insert": false, "update": false, "delete": false,
                "attribute_permissions": [{"attribute_name": attribute, "read": true, "insert": false, "update": false}]}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": username, "password": "pw", "role": role, "active": true})).await;
}

async fn anonymous(
    s: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = s.client.request(method, s.rest(path));
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("request");
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let text = response.text().await.expect("body");
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test]
async fn the_application_template_deploys_and_greets() {
    let s = TestServer::start().await;
    let files =
        [("config.yaml", TEMPLATE_CONFIG), ("schema.graphql", TEMPLATE_SCHEMA), ("resources.js", TEMPLATE_RESOURCES)];
    let (status, answer) = deploy(&s, "application-template", &files).await;
    assert_eq!(status, 200, "{answer}");
    // As the template's README has it: no credentials needed for a plain resource.
    let (status, headers, body) = anonymous(&s, Method::GET, "/Greeting", None).await;
    assert_eq!((status, body), (200, json!({"greeting": "Hello, world!"})));
    assert_eq!(headers["content-type"], "application/json");
    // The exported table is served as before.
    let (status, _, _) = s.rest_send(Method::PUT, "/TableName/1", Some(&json!({"name": "a", "tag": "t"})), &[]).await;
    assert_eq!(status, 204);
    let (status, _, body) = s.rest_send(Method::GET, "/TableName/?tag=t", None, &[]).await;
    assert_eq!((status, body), (200, json!([{"id": "1", "name": "a", "tag": "t"}])));
}

#[tokio::test]
async fn a_tables_class_answers_what_it_overrides_and_the_table_the_rest() {
    let s = kennel(&[]).await;
    // PUT is not overridden: the table's own handler.
    let (status, _, _) = s.rest_send(Method::PUT, "/Dog/d1", Some(&json!({"name": "rex", "breed": "lab"})), &[]).await;
    assert_eq!(status, 204);
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/d1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "d1", "name": "rex", "breed": "lab", "loud": "REX!"})));
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/missing", None, &[]).await;
    assert_eq!(status, 404, "{body}");
    // A collection through super.get: REST's query grammar.
    s.rest_send(Method::PUT, "/Dog/d2", Some(&json!({"name": "fido", "breed": "pug"})), &[]).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/?breed=pug&select(name,breed)", None, &[]).await;
    assert_eq!((status, body), (200, json!([{"name": "fido", "breed": "pug"}])));
    // A script's own search, iterated with `for await` and as an array.
    let (status, _, body) = s.rest_send(Method::GET, "/Searches?breed=pug", None, &[]).await;
    assert_eq!((status, body), (200, json!({"ids": ["d2"], "names": ["fido"], "queried": ["d2"]})));
    // A nested export of a table's class serves the table's own methods at its path.
    let (status, _, _) = s.rest_send(Method::PUT, "/v2/Dogs/n1", Some(&json!({"name": "nested"})), &[]).await;
    assert_eq!(status, 204);
    let (status, _, body) = s.rest_send(Method::GET, "/v2/Dogs/n1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "n1", "name": "nested"})));
    // The instance-loading post creates from the body: 201 and where.
    let (status, headers, body) = s.rest_send(Method::POST, "/Posts/", Some(&json!({"name": "new"})), &[]).await;
    assert_eq!(status, 201, "{body}");
    let id = body.as_str().unwrap().to_string();
    assert_eq!(headers["location"], id.as_str());
    let stored = s.ok(json!({"operation": "search_by_id", "table": "Cat", "ids": [id], "get_attributes": ["*"]})).await;
    assert_eq!(stored[0]["name"], "new");
    // The description.
    let (status, _, body) = s.rest_send(Method::GET, "/Dog", None, &[]).await;
    assert_eq!((status, body["name"].clone(), body["database"].clone()), (200, json!("Dog"), json!("data")));
    // An unexported table's class, in the instance-loading mode, changes what it stores.
    let (status, _, body) = s.rest_send(Method::PUT, "/Cats/c1", Some(&json!({"name": "tom"})), &[]).await;
    assert_eq!(status, 204, "{body}");
    let stored =
        s.ok(json!({"operation": "search_by_id", "table": "Cat", "ids": ["c1"], "get_attributes": ["*"]})).await;
    assert_eq!(stored[0]["name"], "TOM!");
    let (status, _, body) = s.rest_send(Method::GET, "/Cats/c1", None, &[]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("TOM!")));
}

#[tokio::test]
async fn endpoints_answer_in_harpers_shapes() {
    let s = kennel(&[]).await;
    let (status, headers, body) =
        s.rest_send(Method::POST, "/Echo", Some(&json!({"a": [1, 2]})), &[("X-Probe", "found")]).await;
    assert_eq!((status, body), (200, json!({"echoed": {"a": [1, 2]}, "user": USER, "probe": "found"})));
    assert_eq!(headers["x-echoed"], "yes");
    // A text/plain body is the text itself, as Harper gives it (a table reads it as JSON).
    for text in ["hello text", r#"{"a":1}"#] {
        let post = s.client.post(s.rest("/Echo")).basic_auth(USER, Some(PASSWORD)).header("content-type", "text/plain");
        let answer: Value = post.body(text).send().await.unwrap().json().await.unwrap();
        assert_eq!(answer["echoed"], json!(text));
    }
    let (status, _, body) = anonymous(&s, Method::POST, "/Echo", Some(json!({}))).await;
    assert_eq!((status, body), (200, json!({"echoed": {}, "user": null, "probe": null})));
    // No `put`: 405 naming the method, with what is allowed.
    let (status, headers, body) = s.rest_send(Method::PUT, "/Echo/1", Some(&json!({})), &[]).await;
    assert_eq!(status, 405);
    assert_eq!(body, json!("ClientError: The Echo does not have a put method implemented to handle HTTP method PUT"));
    assert!(headers["allow"].to_str().unwrap().contains("POST"), "{headers:?}");
    // Thrown errors: their status and `Name: message`.
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=client", None, &[]).await;
    assert_eq!((status, body), (418, json!("ClientError: no such thing here")));
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=status", None, &[]).await;
    assert_eq!((status, body), (400, json!("Error: bad input")));
    // Headers set before the throw are kept, as Harper keeps them.
    for (how, kept) in [("headed", "kept"), ("headed-later", "later")] {
        let (status, headers, _) = s.rest_send(Method::GET, &format!("/Fails?how={how}"), None, &[]).await;
        assert_eq!((status, headers.get("x-before").map(|v| v.to_str().unwrap())), (409, Some(kept)), "{how}");
    }
    // An error the script gave no status: 500, its message only in the log (not `lyre dev`).
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=plain", None, &[]).await;
    assert_eq!(status, 500);
    assert!(!body.to_string().contains("secret"), "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=value", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    // A value that expands past what may leave JavaScript is refused, not expanded.
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=bomb", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    // Failing while the reply is read (a getter that throws): 500, and neither the
    // message nor the script's path reaches the client.
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=getter", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    assert!(!body.to_string().contains("secret") && !body.to_string().contains("resources.js"), "{body}");
    // BigInts keep their value, or are refused: never wrapped to 64 bits.
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=bigint", None, &[]).await;
    assert_eq!((status, body), (200, json!({"n": 123, "low": i64::MIN})));
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=huge", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=store-huge", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(s.rest_send(Method::GET, "/Dog/huge", None, &[]).await.0, 404, "nothing stored");
    let (status, _, body) = s.rest_send(Method::GET, "/Fails?how=nothing", None, &[]).await;
    assert_eq!((status, body), (404, json!("")));
    let (status, headers, body) = s.rest_send(Method::GET, "/Fails?how=response", None, &[]).await;
    assert_eq!((status, body), (202, json!("accepted")));
    assert_eq!(headers["x-kind"], "raw");
    // Nested exports are served at their path.
    let (status, _, body) = s.rest_send(Method::GET, "/api/v1/Greeting", None, &[]).await;
    assert_eq!((status, body), (200, json!("nested")));
}

#[tokio::test]
async fn async_handlers_answer_with_their_own_requests_context_however_they_settle() {
    let s = kennel(&[]).await;
    // Settled within the call or after a timer: each answer carries the headers its
    // handler set, those of the microtasks it queued too.
    for how in ["now", "wait"] {
        let (status, headers, body) = s.rest_send(Method::GET, &format!("/Settles?how={how}&id=1"), None, &[]).await;
        assert_eq!((status, body), (200, json!({"settled": how, "id": "1"})), "{how}");
        assert_eq!(headers["x-settled"], how, "{how}");
        assert_eq!(headers["x-microtask"], "ran", "{how}");
    }
    // Rejected within the call or after a timer: the error's status and message.
    for how in ["reject", "wait-reject"] {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/Settles?how={how}"), None, &[]).await;
        assert_eq!((status, body), (409, json!(format!("ClientError: refused: {how}"))), "{how}");
    }
    // A thenable that is not a promise is followed as `await` would.
    let (status, _, body) = s.rest_send(Method::GET, "/Thenable", None, &[]).await;
    assert_eq!((status, body), (200, json!({"via": "thenable"})));
    let (status, _, body) = s.rest_send(Method::GET, "/Thenable?how=reject", None, &[]).await;
    assert_eq!((status, body), (410, json!("ClientError: the thenable refused")));
    // Many in flight at once, some waiting on timers: each gets its own answer.
    let s = &s;
    let asks = (0..48).map(|n| {
        let how = if n % 3 == 0 { "now" } else { "wait" };
        let path = format!("/Settles?how={how}&id={n}");
        async move { (n, how, s.rest_send(Method::GET, &path, None, &[]).await) }
    });
    for (n, how, (status, headers, body)) in futures_util::future::join_all(asks).await {
        assert_eq!((status, body), (200, json!({"settled": how, "id": n.to_string()})));
        assert_eq!(headers["x-settled"], how);
    }
}

#[tokio::test]
async fn runaway_scripts_are_stopped_and_the_server_keeps_serving() {
    let s =
        kennel(&[("JAVASCRIPT_TIMEOUT", "1s"), ("JAVASCRIPT_MEMORYLIMIT", "33554432"), ("JAVASCRIPT_THREADS", "2")])
            .await;
    let (loop_answer, other) = tokio::join!(s.rest_send(Method::GET, "/Runaway", None, &[]), async {
        // The other worker answers while the first spins.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let answer = s.rest_send(Method::GET, "/Fails", None, &[]).await;
        (answer, started.elapsed())
    });
    let (status, _, body) = loop_answer;
    assert_eq!(status, 500);
    assert!(body.as_str().unwrap().contains("time budget"), "{body}");
    let ((status, _, body), waited) = other;
    assert_eq!((status, body), (200, json!({"ok": true})));
    assert!(waited < std::time::Duration::from_millis(800), "waited {waited:?} behind the loop");
    let (status, _, body) = s.rest_send(Method::GET, "/Runaway?how=memory", None, &[]).await;
    assert_eq!(status, 500);
    assert!(body.as_str().unwrap().contains("out of memory"), "{body}");
    // Both workers serve again, with their scripts loaded afresh.
    for _ in 0..4 {
        let (status, _, body) = s.rest_send(Method::GET, "/Fails", None, &[]).await;
        assert_eq!((status, body), (200, json!({"ok": true})));
    }
}

#[tokio::test]
async fn work_a_request_leaves_running_finishes_after_it_is_answered() {
    let s = kennel(&[]).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Later?id=later1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"started": true})));
    // The write nobody awaited still lands; the rejection nobody handled harms nothing.
    let mut found = Value::Null;
    for _ in 0..100 {
        let (status, _, body) = s.rest_send(Method::GET, "/Dog/later1", None, &[]).await;
        if status == 200 {
            found = body;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(found["name"], "written later", "{found}");
    let (status, _, body) = s.rest_send(Method::GET, "/Fails", None, &[]).await;
    assert_eq!((status, body), (200, json!({"ok": true})));
}

#[tokio::test]
async fn table_calls_through_a_request_are_checked_as_its_user() {
    let s = kennel(&[]).await;
    s.rest_send(Method::PUT, "/Dog/d1", Some(&json!({"name": "rex"})), &[]).await;
    s.ok(json!({"operation": "add_role", "role": "dog_reader", "permission": {"data": {"tables": {
        "Dog": {"read": true, "insert": false, "update": false, "delete": false, "attribute_permissions": []},
        "Cat": {"read": false, "insert": false, "update": false, "delete": false, "attribute_permissions": []}}}}}))
        .await;
    s.ok(json!({"operation": "add_user", "username": "r", "password": "pw", "role": "dog_reader", "active": true}))
        .await;
    let (status, body) = s.rest_as("r", "pw", Method::GET, "/Dog/d1", None).await;
    assert_eq!((status, body["loud"].clone()), (200, json!("REX!")));
    // A target passed on to another table call is checked as the request's user.
    let (status, _, body) = anonymous(&s, Method::GET, "/Relay/d1", None).await;
    assert_eq!((status, body), (401, json!("AccessViolation: Must login")));
    let (status, body) = s.rest_as(USER, PASSWORD, Method::GET, "/Relay/d1", None).await;
    assert_eq!((status, body["name"].clone()), (200, json!("rex")));
    // A class's own allowRead decides in the newer mode, either way.
    s.ok(json!({"operation": "upsert", "table": "Cat", "records": [{"id": "c1", "name": "tom"}]})).await;
    let (status, _, body) = anonymous(&s, Method::GET, "/OpenCats/c1", None).await;
    assert_eq!((status, body), (200, json!({"id": "c1", "name": "tom"})));
    let (status, body) = s.rest_as(USER, PASSWORD, Method::GET, "/ClosedDogs/d1", None).await;
    assert_eq!((status, body), (403, json!("AccessViolation: Unauthorized access to resource")));
    // The instance-loading class answers with what the role may read, as REST does.
    add_reader_of_one_attribute(&s, "name_reader", "n", "Dog", "name").await;
    s.rest_send(Method::PUT, "/Dog/d3", Some(&json!({"name": "max", "breed": "secret"})), &[]).await;
    let (status, legacy) = s.rest_as("n", "pw", Method::GET, "/DogsLegacy/d3", None).await;
    assert_eq!((status, legacy), (200, json!({"id": "d3", "name": "max"})));
    // The instance-loading class checks allowUpdate (the role's) before its put runs.
    let (status, body) = s.rest_as("r", "pw", Method::PUT, "/Cats/c9", Some(&json!({"name": "x"}))).await;
    assert_eq!(status, 403, "{body}");
    let stored =
        s.ok(json!({"operation": "search_by_id", "table": "Cat", "ids": ["c9"], "get_attributes": ["*"]})).await;
    assert_eq!(stored, json!([]));
    // Without credentials, a table's class asks for them; refusals read as Harper's.
    let (status, _, body) = anonymous(&s, Method::GET, "/Dog/d1", None).await;
    assert_eq!((status, body), (401, json!("AccessViolation: Must login")));
    let (status, body) = s.rest_as("r", "pw", Method::PUT, "/Cats/c9", Some(&json!({"name": "x"}))).await;
    assert_eq!((status, body), (403, json!("AccessViolation: Unauthorized access to resource")));
    // Wrong credentials are refused even where none are needed.
    let (status, body) = s.rest_as(USER, "wrong", Method::GET, "/Greeting", None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = s.rest_as(USER, PASSWORD, Method::GET, "/Greeting", None).await;
    assert_eq!(status, 404, "no Greeting in this component: {body}");
}

#[tokio::test]
async fn a_script_that_cannot_load_fails_its_component_with_file_and_line() {
    let s = kennel(&[("JAVASCRIPT_TIMEOUT", "2s")]).await;
    /// A component's name, its files, and what its load error must say.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 5] = [
        (
            "syntax",
            &[("resources.js", "export class A extends Resource {\n  get() {\n    return {;\n  }\n}\n")],
            &["resources.js:3", "SyntaxError"],
        ),
        ("missing", &[("resources.js", "import { x } from './nowhere.js';\nexport const y = x;\n")], &["nowhere.js"]),
        (
            "builtin",
            &[("resources.js", "import fs from 'node:fs';\nexport const y = fs;\n")],
            &["Node built-in module 'fs'", "resources.js"],
        ),
        (
            "throws",
            &[("resources.js", "\n\nthrow new TypeError('broken at load');\n")],
            &["resources.js:3", "TypeError: broken at load"],
        ),
        ("spins", &[("resources.js", "while (true) {}\n")], &["interrupted"]),
    ];
    // A source's expiration past what a duration holds is left out, not a crash.
    let huge = "tables.Dog.sourcedFrom(class extends Resource { get() {} }, { expiration: Number.MAX_VALUE });\n";
    let config = ("config.yaml", "rest: true\njsResource:\n  files: 'resources.js'\n");
    let (status, answer) = deploy(&s, "huge", &[config, ("resources.js", huge)]).await;
    assert_eq!(status, 200, "{answer}");
    for (name, files, expected) in cases {
        let mut files = files.to_vec();
        files.push(("config.yaml", "rest: true\njsResource:\n  files: 'resources.js'\n"));
        let (status, answer) = deploy(&s, name, &files).await;
        assert_eq!(status, 400, "{name}: {answer}");
        let message = answer["error"].as_str().unwrap_or_default();
        for part in expected {
            assert!(message.contains(part), "{name}: {message}");
        }
    }
    // The working component kept serving throughout.
    let (status, _, body) = s.rest_send(Method::GET, "/Fails", None, &[]).await;
    assert_eq!((status, body), (200, json!({"ok": true})));
}

#[tokio::test]
async fn a_redeployed_script_serves_its_new_code_without_a_restart() {
    let s = kennel(&[]).await;
    let version = |n: u32| {
        format!("export class Version extends Resource {{ static loadAsInstance = false; get() {{ return {n}; }} }}\n")
    };
    let config = "rest: true\njsResource:\n  files: 'resources.js'\n";
    let first = version(1);
    assert_eq!(deploy(&s, "versioned", &[("config.yaml", config), ("resources.js", &first)]).await.0, 200);
    let (_, _, body) = s.rest_send(Method::GET, "/Version", None, &[]).await;
    assert_eq!(body, json!(1));
    let second = version(2);
    assert_eq!(deploy(&s, "versioned", &[("config.yaml", config), ("resources.js", &second)]).await.0, 200);
    for _ in 0..3 {
        let (_, _, body) = s.rest_send(Method::GET, "/Version", None, &[]).await;
        assert_eq!(body, json!(2));
    }
    // The other component's resources were reloaded with it and still answer.
    let (status, _, _) = s.rest_send(Method::GET, "/Fails", None, &[]).await;
    assert_eq!(status, 200);
    s.ok(json!({"operation": "drop_component", "project": "versioned"})).await;
    let (status, _, _) = s.rest_send(Method::GET, "/Version", None, &[]).await;
    assert_eq!(status, 404);
}

/// A resource using the web-standard globals applications reach for.
const WEB_RESOURCES: &str = r#"
let ticks = 0;
const ticker = setInterval(() => { ticks++; if (ticks >= 3) clearInterval(ticker); }, 20);

export class Web extends Resource {
	static loadAsInstance = false;
	async get(target) {
		const origin = target.get('origin');
		const fetched = await fetch(`${origin}/hello?x=1`, { headers: { 'X-Token': 'abc' } });
		const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode('abc')));
		const url = new URL('/a/b?c=1#h', 'https://example.com:8443');
		url.searchParams.append('d', 'two words');
		await new Promise((resolve) => setTimeout(resolve, 30));
		const original = { when: new Date(0), list: [1, { deep: true }], map: new Map([['k', 'v']]) };
		const copy = structuredClone(original);
		// Parameters frozen, before or after their text is read, still read and change
		// their pairs (kept as an internal slot would be), and a request's target is one.
		const frozen = Object.freeze(new URLSearchParams('a=1&b=2'));
		frozen.append('c', '3');
		frozen.delete('b');
		const read = new URLSearchParams('x=1');
		read.get('x');
		Object.freeze(read).set('x', '2');
		Object.freeze(target);
		return {
			params: [frozen.toString(), read.toString(), target.get('origin') === origin, target instanceof URLSearchParams],
			status: fetched.status,
			ok: fetched.ok,
			contentType: fetched.headers.get('content-type'),
			body: await fetched.json(),
			digest: Array.from(digest.slice(0, 4)),
			url: [url.href, url.host, url.pathname, url.search, url.hash, url.origin],
			decoded: new TextDecoder().decode(new TextEncoder().encode('héllo')),
			cloned: copy !== original && copy.list[1] !== original.list[1] && copy.list[1].deep && copy.map.get('k') === 'v',
			base64: [btoa('hello'), atob('aGVsbG8=')],
			uuid: /^[0-9a-f-]{36}$/.test(crypto.randomUUID()),
			when: original.when,
			ticks,
		};
	}
}

export class Unreachable extends Resource {
	static loadAsInstance = false;
	async get() {
		await fetch('http://127.0.0.1:9/nothing');
	}
}

export class Forms extends Resource {
	static loadAsInstance = false;
	async get() {
		const blob = new Blob(['ab', new Uint8Array([99])], { type: 'Text/Plain' });
		const form = new FormData();
		form.append('name', 'Rex');
		form.append('photo', new Blob([new Uint8Array([0, 13, 10, 255])], { type: 'image/png' }), 'rex.png');
		form.append('name', 'Max');
		const sent = new Response(form);
		const type = sent.headers.get('content-type');
		const back = await sent.formData();
		const photo = back.get('photo');
		const plain = await new Response('x=1&y=two+words', { headers: { 'content-type': 'application/x-www-form-urlencoded' } }).formData();
		const { Blob: NodeBlob } = await import('node:buffer');
		const crafted = '--B\r\nContent-Disposition: form-data; filename="a.png"; name="photo"\r\n\r\nxy\r\n--B\r\nContent-Disposition: form-data; name=plain\r\n\r\nz\r\n--B--\r\n';
		const parsed = await new Response(crafted, { headers: { 'content-type': 'multipart/form-data; boundary=B' } }).formData();
		return {
			blob: [blob.size, blob.type, await blob.text(), await blob.slice(1).text()],
			multipart: type.startsWith('multipart/form-data; boundary='),
			names: back.getAll('name'),
			photo: [photo.name, photo.type, Array.from(await photo.bytes())],
			plain: [plain.get('x'), plain.get('y')],
			read: (await new Response(new Uint8Array([1, 2])).blob()).size,
			node: NodeBlob === Blob,
			crafted: [parsed.get('photo')?.name, await parsed.get('photo')?.text(), parsed.get('plain')],
		};
	}
}

export class Aborted extends Resource {
	static loadAsInstance = false;
	async get(target) {
		const origin = target.get('origin');
		const caught = [];
		try { await fetch(`${origin}/slow`, { signal: AbortSignal.timeout(50) }); } catch (e) { caught.push(e.name); }
		const controller = new AbortController();
		let heard = 0;
		controller.signal.addEventListener('abort', () => heard++);
		setTimeout(() => controller.abort('enough'), 20);
		try { await fetch(`${origin}/slow`, { signal: controller.signal }); } catch (e) { caught.push(String(e)); }
		controller.abort('again');
		try { await fetch(`${origin}/slow`, { signal: AbortSignal.abort() }); } catch (e) { caught.push(e.name); }
		const either = AbortSignal.any([new AbortController().signal, controller.signal]);
		// A timeout nobody listens to holds no timer, and is aborted once past due.
		const unheard = AbortSignal.timeout(5);
		await new Promise((resolve) => setTimeout(resolve, 20));
		caught.push(unheard.aborted && unheard.reason.name);
		return { caught, heard, reason: controller.signal.reason, either: [either.aborted, either.reason] };
	}
}
"#;

/// An HTTP request's head (up to the blank line), read from `socket`; `None` when
/// the client leaves first.
async fn read_head(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    Some(head)
}

/// A one-route HTTP server: answers every request, after `delay`, with JSON naming
/// its path and its `X-Token` header; counts the requests.
async fn origin(delay: std::time::Duration) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let counted = counted.clone();
            tokio::spawn(async move {
                let Some(head) = read_head(&mut socket).await else { return };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                let head = String::from_utf8_lossy(&head).to_string();
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                let token = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("x-token: ").map(str::to_string))
                    .unwrap_or_default();
                let body = json!({"path": path, "token": token}).to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (format!("http://{address}"), calls)
}

/// Blob, File and FormData as the web has them: a form is sent as multipart and
/// read back (files' bytes whole), an urlencoded body reads as a form.
#[tokio::test]
async fn blobs_and_forms_are_the_webs() {
    let s = TestServer::start().await;
    deploy_resources(&s, "web", WEB_RESOURCES).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Forms", None, &[]).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"blob": [3, "text/plain", "abc", "bc"], "multipart": true, "names": ["Rex", "Max"],
                "photo": ["rex.png", "image/png", [0, 13, 10, 255]], "plain": ["1", "two words"], "read": 2, "node": true,
                "crafted": ["a.png", "xy", "z"]})
        )
    );
}

/// `fetch` takes an AbortSignal (a controller's, `AbortSignal.timeout`'s): one that
/// aborts rejects the fetch with its reason without waiting for the origin.
#[tokio::test]
async fn an_aborted_signal_ends_a_fetch_with_its_reason() {
    let s = TestServer::start().await;
    deploy_resources(&s, "web", WEB_RESOURCES).await;
    let (origin, _) = origin(std::time::Duration::from_secs(2)).await;
    let (status, _, body) = s.rest_send(Method::GET, &format!("/Aborted?origin={origin}"), None, &[]).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"caught": ["TimeoutError", "enough", "AbortError", "TimeoutError"], "heard": 1, "reason": "enough",
                "either": [true, "enough"]})
        )
    );
}

#[tokio::test]
async fn scripts_have_the_web_standard_globals() {
    let s = TestServer::start().await;
    deploy_resources(&s, "web", WEB_RESOURCES).await;
    let (origin, _) = origin(std::time::Duration::ZERO).await;
    let (status, _, body) = s.rest_send(Method::GET, &format!("/Web?origin={origin}"), None, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], 200);
    assert_eq!(body["ok"], true);
    assert_eq!(body["contentType"], "application/json");
    assert_eq!(body["body"], json!({"path": "/hello?x=1", "token": "abc"}));
    // SHA-256("abc") begins ba 78 16 bf.
    assert_eq!(body["digest"], json!([0xba, 0x78, 0x16, 0xbf]));
    assert_eq!(
        body["url"],
        json!([
            "https://example.com:8443/a/b?c=1&d=two+words#h",
            "example.com:8443",
            "/a/b",
            "?c=1&d=two+words",
            "#h",
            "https://example.com:8443"
        ])
    );
    assert_eq!(body["decoded"], "héllo");
    assert_eq!(body["params"], json!(["a=1&c=3", "x=2", true, true]));
    assert_eq!(body["cloned"], true);
    assert_eq!(body["base64"], json!(["aGVsbG8=", "hello"]));
    assert_eq!(body["uuid"], true);
    // A `Date` answers as its `toJSON` gives it, as `JSON.stringify` would.
    assert_eq!(body["when"], "1970-01-01T00:00:00.000Z");
    // The module's interval ran between requests, three times, then stopped.
    let mut ticks = body["ticks"].clone();
    for _ in 0..50 {
        if ticks == json!(3) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let (_, _, body) = s.rest_send(Method::GET, &format!("/Web?origin={origin}"), None, &[]).await;
        ticks = body["ticks"].clone();
    }
    assert_eq!(ticks, json!(3));
    let (status, _, body) = s.rest_send(Method::GET, "/Unreachable", None, &[]).await;
    assert_eq!(status, 500, "{body}");
}

/// A resource fetching `count` bodies from `origin` at once.
const MANY_FETCHES: &str = r#"
export class Many extends Resource {
	static loadAsInstance = false;
	async get(target) {
		const origin = target.get('origin');
		const fetches = Array.from({ length: Number(target.get('count')) }, (_, i) => fetch(`${origin}/big/${i}`));
		try {
			const bodies = await Promise.all(fetches.map(async (f) => (await f).arrayBuffer()));
			return bodies.map((body) => body.byteLength);
		} catch (error) {
			return { error: error.message };
		}
	}
}
"#;

/// An HTTP server answering every request with a body of `size` bytes: all of it, or
/// (with `stall_after`) only that many, then nothing more until the client leaves, so
/// bodies stay half-read for as long as their fetches last.
async fn big_origin(size: usize, stall_after: Option<usize>) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                if read_head(&mut socket).await.is_none() {
                    return;
                }
                let start = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n");
                let body = vec![b'x'; stall_after.unwrap_or(size)];
                if socket.write_all(start.as_bytes()).await.is_err() || socket.write_all(&body).await.is_err() {
                    return;
                }
                if stall_after.is_some() {
                    // Until the client closes the connection.
                    let _ = socket.read(&mut [0u8; 1]).await;
                }
            });
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn fetches_together_hold_no_more_than_the_runtime_may() {
    const MIB: usize = 1 << 20;
    let env = [("JAVASCRIPT_MEMORYLIMIT", "33554432"), ("JAVASCRIPT_THREADS", "1"), ("JAVASCRIPT_TIMEOUT", "5s")];
    let s = TestServer::start_with(&env).await;
    deploy_resources(&s, "many", MANY_FETCHES).await;
    // Five 8 MiB bodies whose origin stops after 7 MiB: read as far as they go,
    // they would hold 35 MiB outside a runtime limited to 32 MiB.
    let stalling = big_origin(8 * MIB, Some(7 * MIB)).await;
    let (status, _, body) = s.rest_send(Method::GET, &format!("/Many?origin={stalling}&count=5"), None, &[]).await;
    assert_eq!(status, 200, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("would pass its memory limit (33554432 bytes)"), "{body}");
    // Once the fetches left waiting end (at the 5 s budget) and let their bodies
    // go, one body is read whole.
    let whole = big_origin(8 * MIB, None).await;
    let mut answered = Value::Null;
    for _ in 0..300 {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/Many?origin={whole}&count=1"), None, &[]).await;
        assert_eq!(status, 200, "{body}");
        answered = body;
        if answered == json!([8 * MIB]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(answered, json!([8 * MIB]));
}

const CACHE_SCHEMA: &str = "type Thing @table @export { id: ID @primaryKey path: String token: String }\n";

/// A caching table whose source is a script's class calling an HTTP origin.
fn cache_resources(origin: &str) -> String {
    format!(
        r#"
class ThingSource extends Resource {{
	async get() {{
		const id = this.getId();
		if (id === 'none') return undefined;
		if (id === 'broken') throw new Error('the origin is down');
		// A source may wait for a timer.
		await new Promise((resolve) => setTimeout(resolve, 5));
		const answer = await fetch(`{origin}/things/${{id}}`, {{ headers: {{ 'X-Token': 'secret' }} }});
		return answer.json();
	}}
}}
tables.Thing.sourcedFrom(ThingSource, {{ expiration: 1 }});
// A module may wait for a timer while it loads.
await new Promise((resolve) => setTimeout(resolve, 10));

export class ViaScript extends Resource {{
	static loadAsInstance = false;
	async get(target) {{
		return tables.Thing.get(target.id);
	}}
}}
"#
    )
}

#[tokio::test]
async fn a_script_source_fills_a_caching_table() {
    let s = TestServer::start().await;
    let (origin, calls) = origin(std::time::Duration::from_millis(150)).await;
    let config = "rest: true\ngraphqlSchema:\n  files: 'schema.graphql'\njsResource:\n  files: 'resources.js'\n";
    let resources = cache_resources(&origin);
    let files = [("config.yaml", config), ("schema.graphql", CACHE_SCHEMA), ("resources.js", resources.as_str())];
    let (status, answer) = deploy(&s, "cached", &files).await;
    assert_eq!(status, 200, "{answer}");
    let count = || calls.load(std::sync::atomic::Ordering::SeqCst);
    // A miss calls the source, which the record is stored from.
    let (status, _, body) = s.rest_send(Method::GET, "/Thing/a", None, &[]).await;
    assert_eq!((status, body), (200, json!({"path": "/things/a", "token": "secret", "id": "a"})));
    assert_eq!(count(), 1);
    // A hit does not.
    let (status, _, _) = s.rest_send(Method::GET, "/Thing/a", None, &[]).await;
    assert_eq!((status, count()), (200, 1));
    // Concurrent misses of one record: one call to the source.
    let reads = (0..8).map(|_| s.rest_send(Method::GET, "/Thing/b", None, &[]));
    for (status, _, body) in futures_util::future::join_all(reads).await {
        assert_eq!((status, body["path"].clone()), (200, json!("/things/b")));
    }
    assert_eq!(count(), 2);
    // Past its expiration the copy is fetched again.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let (status, _, _) = s.rest_send(Method::GET, "/Thing/a", None, &[]).await;
    assert_eq!((status, count()), (200, 3));
    // A record the source does not have; a source that fails.
    let (status, _, _) = s.rest_send(Method::GET, "/Thing/none", None, &[]).await;
    assert_eq!(status, 404);
    let (status, _, body) = s.rest_send(Method::GET, "/Thing/broken", None, &[]).await;
    assert_eq!(status, 502, "{body}");
    // A script reading the table reads through the source too.
    let (status, _, body) = s.rest_send(Method::GET, "/ViaScript/c", None, &[]).await;
    assert_eq!((status, body["path"].clone()), (200, json!("/things/c")));
    assert_eq!(count(), 4);
    let (status, _, body) = s.rest_send(Method::GET, "/Thing/c", None, &[]).await;
    assert_eq!((status, body["token"].clone(), count()), (200, json!("secret"), 4));
}

/// Classes that edit the query of the request they pass on, and searches given
/// conditions as an array or a single attribute to select, as Harper's take them.
const EDITED_QUERIES: &str = r#"
export class Pugs extends tables.Cat {
	static loadAsInstance = false;
	get(target) {
		// Edited in place: searched as it now stands (a row filter must not be dropped).
		target.conditions.push({ attribute: 'breed', value: 'pug' });
		return super.get(target);
	}
}
export class Asked extends tables.Cat {
	static loadAsInstance = false;
	get(target) {
		const { conditions, operator, limit, offset, sort, select } = target;
		// Narrowed in code from what was read: the search runs the edited conditions.
		target.conditions = conditions.filter((c) => c.attribute !== 'breed');
		return Promise.resolve(super.get(target)).then((found) => ({ asked: { conditions, operator, limit, offset, sort, select }, found }));
	}
}
export class Labs extends tables.Cat {
	static loadAsInstance = false;
	get(target) {
		if (target.isCollection) target.conditions = [{ attribute: 'breed', value: 'lab' }];
		return super.get(target);
	}
}
export class Eldest extends tables.Cat {
	static loadAsInstance = false;
	get(target) {
		if (target.isCollection) {
			target.limit = 1;
			target.sort = { attribute: 'age', descending: true };
		}
		return super.get(target);
	}
}
export class Names extends tables.Cat {
	static loadAsInstance = false;
	get(target) {
		if (target.isCollection) target.select = ['name'];
		return super.get(target);
	}
}
export class Searches extends Resource {
	static loadAsInstance = false;
	async get() {
		const pugs = await tables.Cat.search([{ attribute: 'breed', value: 'pug' }]);
		const labs = { conditions: [{ attribute: 'breed', value: 'lab' }], select: 'name', sort: { attribute: 'name' } };
		return { pugs: pugs.map((cat) => cat.id), labs: await tables.Cat.search(labs) };
	}
}
"#;

#[tokio::test]
async fn a_query_code_sets_on_its_target_is_the_one_searched() {
    let s = TestServer::start().await;
    let config = "rest: true\ngraphqlSchema:\n  files: 'schema.graphql'\njsResource:\n  files: 'resources.js'\n";
    let schema =
        "type Cat @table @export { id: ID @primaryKey name: String breed: String @indexed age: Int @indexed }\n";
    let files = [("config.yaml", config), ("schema.graphql", schema), ("resources.js", EDITED_QUERIES)];
    let (status, answer) = deploy(&s, "cats", &files).await;
    assert_eq!(status, 200, "{answer}");
    for (id, name, breed, age) in
        [("c1", "Tom", "lab", 3), ("c2", "Ace", "lab", 5), ("c3", "Bo", "pug", 7), ("c4", "Cy", "tabby", 1)]
    {
        let record = json!({"name": name, "breed": breed, "age": age});
        assert_eq!(s.rest_send(Method::PUT, &format!("/Cat/{id}"), Some(&record), &[]).await.0, 204);
    }
    let ids = |body: &Value| {
        let mut ids: Vec<String> =
            body.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
        ids.sort();
        ids
    };
    // Conditions set in code replace the query string's; a limit and sort set in
    // code go with the query string's conditions.
    for path in ["/Labs/", "/Labs/?age=gt=4"] {
        let (status, _, body) = s.rest_send(Method::GET, path, None, &[]).await;
        assert_eq!((status, ids(&body)), (200, vec!["c1".to_string(), "c2".to_string()]), "{path}: {body}");
    }
    let (_, _, eldest) = s.rest_send(Method::GET, "/Eldest/", None, &[]).await;
    assert_eq!(ids(&eldest), ["c3"], "{eldest}");
    let (_, _, eldest_lab) = s.rest_send(Method::GET, "/Eldest/?breed=lab", None, &[]).await;
    assert_eq!(ids(&eldest_lab), ["c2"], "{eldest_lab}");
    let (_, _, names) = s.rest_send(Method::GET, "/Names/?breed=pug", None, &[]).await;
    assert_eq!(names, json!([{"name": "Bo"}]));
    // Code reads the query string's parts as Harper's targets show them.
    let path = "/Asked/?breed=lab&age=ge=3&sort(-age,name)&select(id,age)&limit(1,2)";
    let (status, _, body) = s.rest_send(Method::GET, path, None, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["asked"],
        json!({
            "conditions": [
                {"attribute": "breed", "comparator": "equals", "value": "lab"},
                {"attribute": "age", "comparator": "greater_than_equal", "value": 3}
            ],
            "limit": 1, "offset": 1,
            "sort": {"attribute": "age", "descending": true, "next": {"attribute": "name", "descending": false}},
            "select": ["id", "age"]
        })
    );
    let (status, _, body) = s.rest_send(Method::GET, "/Pugs/?age=ge=1", None, &[]).await;
    assert_eq!((status, ids(&body)), (200, vec!["c3".to_string()]), "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/Asked/?breed=lab&age=ge=5", None, &[]).await;
    assert_eq!((status, ids(&body["found"])), (200, vec!["c2".to_string(), "c3".to_string()]), "{body}");
    let (status, _, searched) = s.rest_send(Method::GET, "/Searches", None, &[]).await;
    assert_eq!((status, searched), (200, json!({"pugs": ["c3"], "labs": ["Ace", "Tom"]})));
}

/// Answers that are not JSON values as they stand: bytes, a Map, a Set, a
/// generator and an async generator.
const SHAPED_ANSWERS: &str = r#"
export class Shaped extends Resource {
	static loadAsInstance = false;
	get(target) {
		switch (target.get('as')) {
			case 'bytes': return new TextEncoder().encode('u8 bytes');
			case 'buffer': return new Uint8Array([0, 1, 255]).buffer;
			case 'map': return new Map([['a', 1]]);
			case 'set': return new Set([1, 2]);
			case 'generator': return (function* () { yield 1; yield 2; })();
			case 'async': return (async function* () { yield { a: 1 }; yield { a: 2 }; })();
			case 'awaited': return Promise.resolve().then(() => (async function* () { yield 'later'; })());
		}
	}
}
"#;

/// A script's answer of bytes is sent as bytes (`application/octet-stream`), and
/// a Map, a Set or an iterable as the array of what it yields, as Harper sends
/// them; OPTIONS on a script's resource is answered as on a table (CORS asks it).
#[tokio::test]
async fn bytes_collections_and_iterables_a_script_answers_are_sent_as_harper_sends_them() {
    let s = TestServer::start().await;
    deploy_resources(&s, "shaped", SHAPED_ANSWERS).await;
    for (shape, bytes) in [("bytes", &b"u8 bytes"[..]), ("buffer", &[0, 1, 255][..])] {
        let answer =
            s.client.get(s.rest(&format!("/Shaped?as={shape}"))).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/octet-stream", "{shape}");
        assert_eq!(answer.bytes().await.unwrap().as_ref(), bytes, "{shape}");
    }
    for (shape, expected) in [
        ("map", json!([["a", 1]])),
        ("set", json!([1, 2])),
        ("generator", json!([1, 2])),
        ("async", json!([{"a": 1}, {"a": 2}])),
        ("awaited", json!(["later"])),
    ] {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/Shaped?as={shape}"), None, &[]).await;
        assert_eq!((status, body), (200, expected), "{shape}");
    }
    let (status, headers, _) = s.rest_send(Method::OPTIONS, "/Shaped", None, &[]).await;
    assert_eq!(status, 204);
    assert!(headers["allow"].to_str().unwrap().starts_with("GET, HEAD, POST"), "{headers:?}");
}

/// Node's Buffer and crypto as applications use them.
const BUFFERS: &str = r#"
import { createHash, createHmac, randomBytes } from 'node:crypto';
import cryptoModule from 'crypto';
import { Buffer as ImportedBuffer } from 'node:buffer';
export class Digests extends Resource {
	static loadAsInstance = false;
	get() {
		return {
			sha256: createHash('sha256').update('ab').update('c').digest('hex'),
			base64: createHash('sha1').update(Buffer.from('abc')).digest('base64'),
			hmac: createHmac('sha256', 'key').update('The quick brown fox jumps over the lazy dog').digest('hex'),
			random: randomBytes(70000).length,
			same: cryptoModule.createHash === createHash && ImportedBuffer === Buffer,
		};
	}
}
export class Bytes extends Resource {
	static loadAsInstance = false;
	get() {
		const b = Buffer.from('héllo');
		return {
			utf8: b.toString(),
			hex: b.toString('hex'),
			base64: b.toString('base64'),
			back: Buffer.from(b.toString('base64'), 'base64').toString(),
			fromHex: Buffer.from('68c3a9', 'hex').toString(),
			url: Buffer.from([251, 255]).toString('base64url'),
			fromUrl: Array.from(Buffer.from('-_8', 'base64url')),
			concat: Buffer.concat([Buffer.from('a'), Buffer.from('bc')]).toString(),
			isBuffer: [Buffer.isBuffer(b), Buffer.isBuffer(new Uint8Array(1))],
			length: [b.length, Buffer.byteLength('héllo')],
			json: Buffer.from('hi').toJSON(),
			slice: b.slice(1, 3).toString('hex'),
			equals: b.equals(Buffer.from('héllo')),
			alloc: Buffer.alloc(3, 'ab').toString(),
			immediate: typeof setImmediate,
		};
	}
}
"#;

#[tokio::test]
async fn node_buffers_and_crypto_work_as_node_s() {
    let s = TestServer::start().await;
    deploy_resources(&s, "buffers", BUFFERS).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Bytes", None, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "utf8": "héllo", "hex": "68c3a96c6c6f", "base64": "aMOpbGxv", "back": "héllo", "fromHex": "hé",
            "url": "-_8", "fromUrl": [251, 255], "concat": "abc", "isBuffer": [true, false], "length": [6, 6],
            "json": {"type": "Buffer", "data": [104, 105]}, "slice": "c3a9", "equals": true, "alloc": "aba",
            "immediate": "function"
        })
    );
    // Node's crypto and buffer modules, imported by either name.
    let (status, _, body) = s.rest_send(Method::GET, "/Digests", None, &[]).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({
                "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "base64": "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=",
                "hmac": "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8",
                "random": 70000,
                "same": true
            })
        )
    );
}

/// A resource telling what its target says of the request's path.
const TARGET_PATHS: &str = r#"
export class Where extends Resource {
	static loadAsInstance = false;
	get(target) {
		return { pathname: target.pathname, text: String(target), id: target.id ?? null, x: target.get('x') };
	}
}
"#;

/// A target's `pathname` is the path below the resource's own and its text that
/// path with the query, as Harper's `RequestTarget` (code routes on them).
#[tokio::test]
async fn a_targets_path_is_the_part_below_its_resource() {
    let s = TestServer::start().await;
    deploy_resources(&s, "paths", TARGET_PATHS).await;
    for (path, expected) in [
        ("/Where/abc?x=1", json!({"pathname": "/abc", "text": "/abc?x=1", "id": "abc", "x": "1"})),
        ("/Where/", json!({"pathname": "/", "text": "/", "id": null, "x": null})),
        ("/Where?x=2", json!({"pathname": "", "text": "?x=2", "id": null, "x": "2"})),
    ] {
        let (status, _, body) = s.rest_send(Method::GET, path, None, &[]).await;
        assert_eq!((status, body), (200, expected), "{path}");
    }
}

/// A resource setting two cookies and another header twice.
const COOKIES: &str = r#"
export class Cookies extends Resource {
	static loadAsInstance = false;
	get() {
		const headers = this.getContext().responseHeaders;
		headers.append('Set-Cookie', 'a=1; Path=/');
		headers.append('Set-Cookie', 'b=2; Path=/');
		headers.append('X-Multi', 'a');
		headers.append('X-Multi', 'b');
		return { cookies: headers.getSetCookie(), joined: headers.get('set-cookie') };
	}
}
"#;

/// Each cookie a script sets is a header of its own (joined, a browser would keep
/// only the first), as Harper sends them; other repeated headers are joined.
#[tokio::test]
async fn each_cookie_a_script_sets_is_a_header_of_its_own() {
    let s = TestServer::start().await;
    deploy_resources(&s, "cookies", COOKIES).await;
    let (status, headers, body) = s.rest_send(Method::GET, "/Cookies", None, &[]).await;
    assert_eq!(status, 200);
    let cookies: Vec<&str> = headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(cookies, ["a=1; Path=/", "b=2; Path=/"]);
    assert_eq!(headers["x-multi"], "a, b");
    assert_eq!(body, json!({"cookies": ["a=1; Path=/", "b=2; Path=/"], "joined": "a=1; Path=/, b=2; Path=/"}));
}

/// A source whose errors state statuses, and one that runs too long.
const STATED_SOURCE: &str = r#"
class StatedSource extends Resource {
	async get() {
		const id = this.getId();
		if (id === 'forbidden') {
			const error = new Error('not yours');
			error.statusCode = 403;
			throw error;
		}
		if (id === 'invalid') throw new ClientError('ids are numbers');
		if (id === 'unavailable') return { status: 503, headers: {}, body: 'down for maintenance' };
		if (id === 'moved') return { status: 301, headers: { location: '/elsewhere' }, body: '' };
		if (id === 'odd') {
			const error = new Error('an odd status');
			error.statusCode = 700;
			throw error;
		}
		if (id === 'plain') throw new Error('the origin is down');
		if (id === 'slow') for (;;) {}
		return { name: id };
	}
}
tables.Stated.sourcedFrom(StatedSource);

export class ReadsStated extends Resource {
	static loadAsInstance = false;
	async get(target) {
		return tables.Stated.get(target.id);
	}
}
"#;

#[tokio::test]
async fn a_script_sources_stated_error_status_reaches_the_client() {
    let s = TestServer::start_with(&[("JAVASCRIPT_TIMEOUT", "1s")]).await;
    let config = "rest: true\ngraphqlSchema:\n  files: 'schema.graphql'\njsResource:\n  files: 'resources.js'\n";
    let schema = "type Stated @table @export { id: ID @primaryKey name: String }\n";
    let files = [("config.yaml", config), ("schema.graphql", schema), ("resources.js", STATED_SOURCE)];
    let (status, answer) = deploy(&s, "stated", &files).await;
    assert_eq!(status, 200, "{answer}");
    // As Harper answers `error.statusCode`: a thrown 403, a `ClientError`'s 400,
    // a `Response` with 503; each time again, as nothing was stored.
    for (id, expected, says) in [
        ("forbidden", 403, "not yours"),
        ("invalid", 400, "ids are numbers"),
        ("unavailable", 503, "the source answered 503"),
        ("forbidden", 403, "not yours"),
    ] {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/Stated/{id}"), None, &[]).await;
        assert_eq!(status, expected, "{id}: {body}");
        assert!(body.as_str().is_some_and(|text| text.contains(says) && text.contains(id)), "{id}: {body}");
    }
    // A redirect is no record, a status outside 400-599 no status, and a plain
    // throw the source's failure: 502. A source past its budget: 504.
    for (id, expected) in [("moved", 502), ("odd", 502), ("plain", 502), ("slow", 504)] {
        let (status, _, body) = s.rest_send(Method::GET, &format!("/Stated/{id}"), None, &[]).await;
        assert_eq!(status, expected, "{id}: {body}");
    }
    // The runtime rebuilt after the stopped one still answers from the source.
    let (status, _, body) = s.rest_send(Method::GET, "/Stated/fine", None, &[]).await;
    assert_eq!((status, body), (200, json!({"name": "fine", "id": "fine"})));
    // A script reading the table meets the source's error itself.
    let (status, _, body) = s.rest_send(Method::GET, "/ReadsStated/forbidden", None, &[]).await;
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/ReadsStated/invalid", None, &[]).await;
    assert_eq!((status, body), (400, json!("ClientError: ids are numbers")));
}

#[tokio::test]
async fn packages_load_from_node_modules_as_es_modules_and_commonjs() {
    let s = TestServer::start().await;
    let config = "rest: true\njsResource:\n  files: 'resources.js'\n";
    let resources = r#"
import { greet, version } from 'cjs-greeter';
import greeter from 'cjs-greeter';
import shout from '@scope/esm-shout';
import settings from './settings.json';
export class Packages extends Resource {
	static loadAsInstance = false;
	get() {
		return { named: greet('Ann'), version, whole: greeter.greet('Bo'), esm: shout('hey'), settings, env: process.env.NODE_ENV ?? null, harper: greeter.harper, hashed: greeter.hashed };
	}
}
"#;
    let files = [
        ("config.yaml", config),
        ("resources.js", resources),
        ("settings.json", r#"{"mode": "test"}"#),
        ("node_modules/cjs-greeter/package.json", r#"{"name": "cjs-greeter", "main": "lib/index.js"}"#),
        (
            "node_modules/cjs-greeter/lib/index.js",
            "const helper = require('./helper');\nconst data = require('../data.json');\nconst { Resource } = require('harperdb');\nexports.greet = (name) => helper.prefix + name;\nexports.version = data.version;\nexports.harper = typeof Resource.get;\nexports.hashed = require('crypto').createHash('sha256').update('abc').digest('hex').slice(0, 8);\n",
        ),
        ("node_modules/cjs-greeter/lib/helper.js", "module.exports = { prefix: 'Hi ' };\n"),
        ("node_modules/cjs-greeter/data.json", r#"{"version": "1.2.3"}"#),
        (
            "node_modules/@scope/esm-shout/package.json",
            r#"{"name": "@scope/esm-shout", "type": "module", "exports": {".": {"import": "./shout.js", "require": "./nope.cjs"}}}"#,
        ),
        ("node_modules/@scope/esm-shout/shout.js", "export default (text) => text.toUpperCase() + '!';\n"),
    ];
    let (status, answer) = deploy(&s, "packages", &files).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _, body) = s.rest_send(Method::GET, "/Packages", None, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"named": "Hi Ann", "version": "1.2.3", "whole": "Hi Bo", "esm": "HEY!", "settings": {"mode": "test"}, "env": null, "harper": "function", "hashed": "ba7816bf"})
    );
    // A package that needs a Node built-in fails its component, naming both.
    let files = [
        ("config.yaml", config),
        ("resources.js", "import fsUser from 'fs-user';\nexport const x = fsUser;\n"),
        ("node_modules/fs-user/package.json", r#"{"name": "fs-user"}"#),
        ("node_modules/fs-user/index.js", "const fs = require('fs');\nmodule.exports = fs;\n"),
    ];
    let (status, answer) = deploy(&s, "builtin-user", &files).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"].as_str().unwrap_or_default();
    assert!(message.contains("Node built-in module 'fs'") && message.contains("fs-user"), "{message}");
}

#[tokio::test]
async fn harpers_legacy_custom_function_operations_work_on_components() {
    let s = TestServer::start().await;
    let status = s.ok(json!({"operation": "custom_functions_status"})).await;
    assert_eq!((status["port"].clone(), status["is_enabled"].clone()), (json!(s.http_port), json!(true)));
    assert!(status["directory"].as_str().unwrap().ends_with("components"), "{status}");
    let added = s.ok(json!({"operation": "add_custom_function_project", "project": "dogs"})).await;
    assert_eq!(added, json!({"message": "Successfully added project: dogs"}));
    s.fails(json!({"operation": "add_custom_function_project", "project": "dogs"}), 400, "Project already exists")
        .await;
    let helper = json!({"operation": "set_custom_function", "project": "dogs", "type": "helpers", "file": "example.js",
        "function_content": "export const answer = 42;\n"});
    assert_eq!(s.ok(helper).await, json!({"message": "Successfully updated custom function: example.js"}));
    assert_eq!(
        s.ok(json!({"operation": "get_custom_functions"})).await,
        json!({"dogs": {"routes": [], "helpers": ["example"]}})
    );
    let read = json!({"operation": "get_custom_function", "project": "dogs", "type": "helpers", "file": "example"});
    assert_eq!(s.ok(read).await, json!({"message": "export const answer = 42;\n"}));
    let missing = json!({"operation": "get_custom_function", "project": "dogs", "type": "helpers", "file": "nope"});
    s.fails(missing, 400, "File does not exist").await;
    let bad_type = json!({"operation": "get_custom_function", "project": "dogs", "type": "models", "file": "example"});
    s.fails(bad_type, 400, "'type' must be one of [helpers, routes]").await;
    let no_project = json!({"operation": "get_custom_function", "project": "cats", "type": "helpers", "file": "x"});
    s.fails(no_project, 400, "Project does not exist. Create one using 'add_custom_function_project'").await;
    // Packaged and deployed again under another name, as component operations do.
    let packaged = s.ok(json!({"operation": "package_custom_function_project", "project": "dogs"})).await;
    assert_eq!(packaged["project"], "dogs");
    let deployed = s
        .ok(json!({"operation": "deploy_custom_function_project", "project": "dogs2", "payload": packaged["payload"]}))
        .await;
    assert_eq!(deployed, json!({"message": "Successfully deployed: dogs2"}));
    let copied = json!({"operation": "get_custom_function", "project": "dogs2", "type": "helpers", "file": "example"});
    assert_eq!(s.ok(copied).await["message"], "export const answer = 42;\n");
    let dropped = json!({"operation": "drop_custom_function", "project": "dogs", "type": "helpers", "file": "example"});
    assert_eq!(s.ok(dropped).await, json!({"message": "Successfully deleted custom function: example.js"}));
    let gone = s.ok(json!({"operation": "drop_custom_function_project", "project": "dogs"})).await;
    assert_eq!(gone, json!({"message": "Successfully deleted project: dogs"}));
    let listed = s.ok(json!({"operation": "get_custom_functions"})).await;
    assert_eq!(listed, json!({"dogs2": {"routes": [], "helpers": ["example"]}}));
    // Only super users.
    s.ok(json!({"operation": "add_role", "role": "plain", "permission": {}})).await;
    s.ok(json!({"operation": "add_user", "username": "p", "password": "pw", "role": "plain", "active": true})).await;
    let (status, answer) = s.op_as("p", "pw", &json!({"operation": "get_custom_functions"})).await;
    assert_eq!(status, 403, "{answer}");
}

/// A component whose scripts fail (on its first deploy, at start-up, or when
/// another component's load breaks them) still serves its tables, as Harper does,
/// and reports the scripts' error; its scripts' resources are gone.
#[tokio::test]
async fn a_component_whose_scripts_fail_serves_its_tables_and_reports_the_error() {
    let schema = ("schema.graphql", "type Perch @table @export { id: ID @primaryKey name: String }\n");
    let broken = ("resources.js", "import { nothing } from './nowhere.js';\nexport const y = nothing;\n");
    let status_of = |listed: &Value, name: &str| {
        listed["entries"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap()["status"].clone()
    };
    // At start-up.
    let s = TestServer::start_app(
        &[
            ("components/roost/config.yaml", APP_CONFIG),
            ("components/roost/schema.graphql", schema.1),
            ("components/roost/resources.js", broken.1),
        ],
        &[],
    )
    .await;
    let (status, _, body) = s.rest_send(Method::PUT, "/Perch/p1", Some(&json!({"name": "oak"})), &[]).await;
    assert_eq!(status, 204, "{body}");
    let (status, _, body) = s.rest_send(Method::GET, "/Perch/p1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "p1", "name": "oak"})));
    let state = status_of(&s.ok(json!({"operation": "get_components"})).await, "roost");
    assert_eq!(state["status"], "error", "{state}");
    assert!(state["message"].as_str().unwrap().contains("nowhere.js"), "{state}");

    // On a first deploy: the deploy reports the error; the tables are served.
    let egg = ("schema.graphql", "type Egg @table @export { id: ID @primaryKey }\n");
    let (status, answer) = deploy(&s, "nest", &[("config.yaml", APP_CONFIG), egg, broken]).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"].as_str().unwrap_or_default();
    assert!(message.contains("nowhere.js") && message.contains("tables are served"), "{message}");
    assert_eq!(s.rest_send(Method::PUT, "/Egg/e1", Some(&json!({})), &[]).await.0, 204);
    let (status, _, body) = s.rest_send(Method::GET, "/Egg/e1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "e1"})));

    // When another component's load breaks them: the script's resource goes, the
    // tables stay.
    let victim = "if (globalThis.breakVictim) throw new Error('broken by another component');\n\
                  export class Victim extends Resource { static loadAsInstance = false; get() { return 'alive'; } }\n\
                  export class Vault extends tables.Vault { static loadAsInstance = false; get() { return 'guarded'; } }\n";
    let victim_schema = (
        "schema.graphql",
        "type Hideout @table @export { id: ID @primaryKey }\ntype Vault @table @export { id: ID @primaryKey }\n",
    );
    assert_eq!(
        deploy(&s, "zzz-victim", &[("config.yaml", APP_CONFIG), victim_schema, ("resources.js", victim)]).await.0,
        200
    );
    let (status, _, body) = s.rest_send(Method::GET, "/Victim", None, &[]).await;
    assert_eq!((status, body), (200, json!("alive")));
    assert_eq!(s.rest_send(Method::PUT, "/Hideout/h1", Some(&json!({})), &[]).await.0, 204);
    s.ok(json!({"operation": "insert", "table": "Vault", "records": [{"id": "v1"}]})).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Vault/v1", None, &[]).await;
    assert_eq!((status, body), (200, json!("guarded")));
    // Loaded first in every new generation, this component breaks the other's load.
    let breaker = "globalThis.breakVictim = true;\nexport const nothing = null;\n";
    deploy_resources(&s, "aaa-breaker", breaker).await;
    let (status, _, _) = s.rest_send(Method::GET, "/Victim", None, &[]).await;
    assert_eq!(status, 404);
    let (status, _, body) = s.rest_send(Method::GET, "/Hideout/h1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "h1"})));
    // A table a script's class served (and may have guarded) fails closed.
    assert_eq!(s.rest_send(Method::GET, "/Vault/v1", None, &[]).await.0, 404);
    let state = status_of(&s.ok(json!({"operation": "get_components"})).await, "zzz-victim");
    assert_eq!(state["status"], "error", "{state}");
    assert!(state["message"].as_str().unwrap().contains("broken by another component"), "{state}");
}

#[tokio::test]
async fn at_start_up_scripts_load_once_every_components_tables_exist() {
    // `a-view` sorts before `b-data`, whose schema defines the table it extends.
    let view = "export class BirdView extends tables.Bird {\n\
                \tstatic loadAsInstance = false;\n\
                \tget(target) { const bird = super.get(target); return bird && { ...bird, seen: true }; }\n}\n";
    let config = APP_CONFIG;
    let s = TestServer::start_app(
        &[
            ("components/a-view/config.yaml", config),
            ("components/a-view/resources.js", view),
            ("components/b-data/config.yaml", config),
            ("components/b-data/schema.graphql", "type Bird @table @export { id: ID @primaryKey name: String }\n"),
        ],
        &[],
    )
    .await;
    s.rest_send(Method::PUT, "/Bird/b1", Some(&json!({"name": "robin"})), &[]).await;
    let (status, _, body) = s.rest_send(Method::GET, "/BirdView/b1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "b1", "name": "robin", "seen": true})));
}

/// Computed attributes: an expression and a script's function, indexed and queried.
const SHOP_SCHEMA: &str = r#"
type Product @table @export {
    id: ID @primaryKey
    price: Float
    taxRate: Float
    totalPrice: Float @computed(from: "price + price * taxRate") @indexed
    label: String @computed @indexed
    code: String @computed(from: "'expression'") @indexed
    tag: String @computed(from: "'#' + id") @enumerable
}
"#;
const SHOP_RESOURCES: &str = r#"
tables.Product.setComputedAttribute('label', (record) => {
	if (record.id === 'boom') throw new Error('no label for boom');
	return `${record.id}:${record.price >= 10 ? 'dear' : 'cheap'}`;
});
// A function replaces an expression, as in Harper.
tables.Product.setComputedAttribute('code', (record) => `c-${record.id}`);
export class ProductView extends tables.Product {
	static loadAsInstance = false;
	async get(target) {
		const product = await super.get(target);
		return product && { id: product.id, total: product.totalPrice, label: product.label, keys: Object.keys(product) };
	}
}
"#;

#[tokio::test]
async fn computed_attributes_are_computed_indexed_and_queried_but_never_written() {
    let mut s = scripted_app("shop", SHOP_SCHEMA, SHOP_RESOURCES, &[]).await;
    for (id, price, rate) in [("p1", 10.0, 0.5), ("p2", 4.0, 0.25)] {
        let (status, _, body) = s
            .rest_send(Method::PUT, &format!("/Product/{id}"), Some(&json!({"price": price, "taxRate": rate})), &[])
            .await;
        assert!(status < 300, "{status} {body}");
    }
    // A whole record carries only the @enumerable one; a projection names the others.
    let (_, _, whole) = s.rest_send(Method::GET, "/Product/p1", None, &[]).await;
    assert_eq!(whole, json!({"id": "p1", "price": 10, "taxRate": 0.5, "tag": "#p1"}));
    let (_, _, picked) = s.rest_send(Method::GET, "/Product/p1?select(id,totalPrice,label)", None, &[]).await;
    assert_eq!(picked, json!({"id": "p1", "totalPrice": 15, "label": "p1:dear"}));
    // Queried through their indexes (the writer keeps them), sorted by them.
    let (_, _, dear) = s.rest_send(Method::GET, "/Product/?totalPrice=gt=10&select(id)", None, &[]).await;
    assert_eq!(dear, json!(["p1"]));
    let (_, _, cheap) = s.rest_send(Method::GET, "/Product/?label=p2:cheap&select(id)", None, &[]).await;
    assert_eq!(cheap, json!(["p2"]));
    let (_, _, sorted) = s.rest_send(Method::GET, "/Product/?sort(-totalPrice)&select(id,totalPrice)", None, &[]).await;
    assert_eq!(sorted, json!([{"id": "p1", "totalPrice": 15}, {"id": "p2", "totalPrice": 5}]));
    let (_, _, coded) = s.rest_send(Method::GET, "/Product/?code=c-p2&select(id,code)", None, &[]).await;
    assert_eq!(coded, json!([{"id": "p2", "code": "c-p2"}]));
    // A change moves the record in both indexes.
    s.rest_send(Method::PATCH, "/Product/p2", Some(&json!({"price": 20.0})), &[]).await;
    let (_, _, dear) = s.rest_send(Method::GET, "/Product/?totalPrice=gt=10&select(id)", None, &[]).await;
    assert_eq!(dear, json!(["p1", "p2"]));
    let (_, _, gone) = s.rest_send(Method::GET, "/Product/?label=p2:cheap&select(id)", None, &[]).await;
    assert_eq!(gone, json!([]));
    // A write may not set one.
    let (status, _, refused) =
        s.rest_send(Method::PUT, "/Product/p3", Some(&json!({"price": 1.0, "totalPrice": 3.0})), &[]).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("Computed property totalPrice may not be directly assigned a value"));
    // The Operations API names them like any attribute.
    let (_, found) = s
        .op(json!({"operation": "search_by_value", "table": "Product", "search_attribute": "label",
                   "search_value": "p1:dear", "get_attributes": ["id", "totalPrice"]}))
        .await;
    assert_eq!(found, json!([{"id": "p1", "totalPrice": 15}]));
    // A role that may read the computed attribute but not what it is computed
    // from gets it computed from the whole record, as the index has it.
    let grant = json!({"data": {"tables": {"Product": {"read": true, "insert": false, "update": false, "delete": false,
        "attribute_permissions": [{"attribute_name": "totalPrice", "read": true, "insert": false, "update": false}]}}}});
    s.ok(json!({"operation": "add_role", "role": "totals", "permission": grant})).await;
    s.ok(json!({"operation": "add_user", "username": "tally", "password": "pw", "role": "totals", "active": true}))
        .await;
    let (status, total) = s.rest_as("tally", "pw", Method::GET, "/Product/p1?select(id,totalPrice)", None).await;
    assert_eq!((status, total), (200, json!({"id": "p1", "totalPrice": 15})));
    let (_, stripped) = s.rest_as("tally", "pw", Method::GET, "/Product/p1", None).await;
    assert_eq!(stripped, json!({"id": "p1"}));
    // A value the function cannot compute inside a write leaves the record out of
    // that index; the write goes on.
    let (status, _, _) = s.rest_send(Method::PUT, "/Product/boom", Some(&json!({"price": 1, "taxRate": 0})), &[]).await;
    assert_eq!(status, 204);
    let (_, _, cheap) = s.rest_send(Method::GET, "/Product/?totalPrice=lt=2&select(id)", None, &[]).await;
    assert_eq!(cheap, json!(["boom"]));
    // The indexes hold exactly what the records compute to.
    let report = s.ok(json!({"operation": "check_consistency", "database": "data", "table": "Product"})).await;
    assert_eq!(report["consistent"], true, "{report}");
    // Described only when asked for (Harper's `include_computed`).
    let names = |described: &Value| -> Vec<String> {
        described["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["attribute"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, plain) = s.op(json!({"operation": "describe_table", "table": "Product"})).await;
    assert_eq!(names(&plain), ["id", "price", "taxRate"]);
    let (_, all) = s.op(json!({"operation": "describe_table", "table": "Product", "include_computed": true})).await;
    assert_eq!(names(&all), ["id", "price", "taxRate", "totalPrice", "label", "code", "tag"]);
    assert_eq!(all["attributes"][3]["computed"], true, "{all}");
    // A script reads them as properties; only the enumerable one is listed.
    let (_, _, view) = s.rest_send(Method::GET, "/ProductView/p1", None, &[]).await;
    assert_eq!(view, json!({"id": "p1", "total": 15, "label": "p1:dear", "keys": ["id", "price", "taxRate", "tag"]}));
    // A new indexed attribute a new function computes: the schema's index is
    // built before the new scripts load, so it is built again once they have.
    let schema = SHOP_SCHEMA.replace("tag: String", "band: Int @computed @indexed\n    tag: String");
    let resources =
        format!("{SHOP_RESOURCES}\ntables.Product.setComputedAttribute('band', (r) => Math.floor(r.price / 10));\n");
    let (status, answer) =
        deploy(&s, "shop", &[("config.yaml", APP_CONFIG), ("schema.graphql", &schema), ("resources.js", &resources)])
            .await;
    assert_eq!(status, 200, "{answer}");
    let (_, _, band) = s.rest_send(Method::GET, "/Product/?band=2&select(id)", None, &[]).await;
    assert_eq!(band, json!(["p2"]));
    // Its index, and the expression's, outlive a restart.
    s.restart().await;
    let (_, _, band) = s.rest_send(Method::GET, "/Product/?band=1&select(id)", None, &[]).await;
    assert_eq!(band, json!(["p1"]));
    let (_, _, dear) = s.rest_send(Method::GET, "/Product/?totalPrice=gt=10&select(id)", None, &[]).await;
    assert_eq!(dear, json!(["p1", "p2"]));
}

/// HTTP middleware: one that runs first (around everything of Lyre's), one that
/// answers what nothing else did.
const GATE_RESOURCES: &str = r#"
server.http(async (request, next) => {
	if (request.pathname === '/ping') return new Response('pong', { headers: { 'content-type': 'text/plain' } });
	if (request.pathname === '/boom') throw new Error('the gate broke');
	const response = await next(request);
	response.headers.set('x-gate', `${request.method} ${response.status}`);
	return response;
}, { runFirst: true });
server.http((request, next) => {
	if (request.pathname !== '/hello') return next(request);
	return { status: 200, headers: { 'x-user': String(request.user?.username ?? 'anyone') }, data: { hello: request.url } };
});
"#;

#[tokio::test]
async fn middleware_runs_first_around_lyre_or_answers_what_nothing_else_did() {
    let s = scripted_app("gate", "type Bird @table @export { id: ID @primaryKey name: String }\n", GATE_RESOURCES, &[])
        .await;
    let client = reqwest::Client::new();
    // Answered by the middleware alone, without credentials.
    let ping = client.get(s.rest("/ping")).send().await.unwrap();
    assert_eq!(ping.status(), 200);
    assert_eq!(ping.headers()["content-type"], "text/plain");
    assert_eq!(ping.text().await.unwrap(), "pong");
    // Lyre's REST, body and all, through the middleware, which sees its answer.
    let (status, headers, _) = s.rest_send(Method::PUT, "/Bird/b1", Some(&json!({"name": "robin"})), &[]).await;
    assert_eq!((status, headers["x-gate"].to_str().unwrap()), (204, "PUT 204"));
    let (status, headers, body) = s.rest_send(Method::GET, "/Bird/b1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "b1", "name": "robin"})));
    assert_eq!(headers["x-gate"], "GET 200");
    let anonymous = client.get(s.rest("/Bird/b1")).send().await.unwrap();
    assert_eq!((anonymous.status().as_u16(), anonymous.headers()["x-gate"].to_str().unwrap()), (401, "GET 401"));
    // What no export serves reaches the last middleware, as the authenticated user.
    let (status, headers, body) = s.rest_send(Method::GET, "/hello?x=1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"hello": "/hello?x=1"})));
    assert_eq!((headers["x-user"].to_str().unwrap(), headers["x-gate"].to_str().unwrap()), (USER, "GET 200"));
    // …and what it passes on is Lyre's 404.
    let (status, headers, _) = s.rest_send(Method::GET, "/nothing/here", None, &[]).await;
    assert_eq!((status, headers["x-gate"].to_str().unwrap()), (404, "GET 404"));
    // A middleware that throws is a 500 in Harper's shape; the server serves on.
    let (status, _, body) = s.rest_send(Method::GET, "/boom", None, &[]).await;
    assert_eq!(status, 500, "{body}");
    let (status, _, _) = s.rest_send(Method::GET, "/Bird/b1", None, &[]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn middleware_alone_answers_paths_no_export_serves_with_or_without_credentials() {
    let config = "rest: true\njsResource:\n  files: 'resources.js'\n";
    let resources = "server.http((request, next) => request.pathname === '/hello' ? \
                     { status: 200, headers: {}, data: { user: request.user?.username ?? null } } : next(request));\n";
    let s = TestServer::start_app(
        &[("components/hello/config.yaml", config), ("components/hello/resources.js", resources)],
        &[],
    )
    .await;
    let (status, _, body) = s.rest_send(Method::GET, "/hello", None, &[]).await;
    assert_eq!((status, body), (200, json!({"user": USER})));
    let anonymous = reqwest::Client::new().get(s.rest("/hello")).send().await.unwrap();
    assert_eq!(anonymous.status(), 200);
    assert_eq!(anonymous.json::<Value>().await.unwrap(), json!({"user": null}));
    let (status, _, _) = s.rest_send(Method::GET, "/nothing", None, &[]).await;
    assert_eq!(status, 404);
}

/// `transaction()`: a transfer's writes to two tables commit together or not at all.
const BANK_SCHEMA: &str = "type Account @table @export { id: ID @primaryKey balance: Int }\n\
                           type Ledger @table @export { id: ID @primaryKey amount: Int }\n";
const BANK_RESOURCES: &str = r#"
import { transaction } from 'harperdb';
export class Transfer extends Resource {
	static loadAsInstance = false;
	async post(target, data) {
		return transaction(this.getContext(), async (txn) => {
			const from = await tables.Account.get(data.from);
			const to = await tables.Account.get(data.to);
			await tables.Account.put(data.from, { balance: from.balance - data.amount }, txn);
			await tables.Account.put(data.to, { balance: to.balance + data.amount }, txn);
			await tables.Ledger.create({ id: data.ref, amount: data.amount }, txn);
			// Nothing is written until the transaction commits.
			const unchanged = (await tables.Account.get(data.from)).balance === from.balance;
			if (data.fail) throw new ClientError('refused on purpose', 400);
			return { unchanged };
		});
	}
}
// Writes made with the request's context are checked as its user, each of them.
export class Deposit extends Resource {
	static loadAsInstance = false;
	async post(target, data) {
		const context = this.getContext();
		return transaction(context, async () => {
			await tables.Account.patch(data.to, { balance: data.balance }, context);
			await tables.Ledger.put(data.ref, { amount: data.balance }, context);
			return { ok: true };
		});
	}
}
"#;

#[tokio::test]
async fn a_transactions_writes_commit_together_or_not_at_all() {
    let s = scripted_app("bank", BANK_SCHEMA, BANK_RESOURCES, &[]).await;
    for (id, balance) in [("a", 100), ("b", 0)] {
        s.rest_send(Method::PUT, &format!("/Account/{id}"), Some(&json!({"balance": balance})), &[]).await;
    }
    let balances = async || {
        let (_, _, a) = s.rest_send(Method::GET, "/Account/a", None, &[]).await;
        let (_, _, b) = s.rest_send(Method::GET, "/Account/b", None, &[]).await;
        (a["balance"].clone(), b["balance"].clone())
    };
    let transfer =
        |reference: &str, fail: bool| json!({"from": "a", "to": "b", "amount": 30, "ref": reference, "fail": fail});
    let (status, _, body) = s.rest_send(Method::POST, "/Transfer", Some(&transfer("t1", false)), &[]).await;
    assert_eq!((status, body), (200, json!({"unchanged": true})));
    assert_eq!(balances().await, (json!(70), json!(30)));
    let (status, _, ledger) = s.rest_send(Method::GET, "/Ledger/t1", None, &[]).await;
    assert_eq!((status, ledger), (200, json!({"id": "t1", "amount": 30})));
    // The callback throws after queuing its writes: none is kept.
    let (status, _, body) = s.rest_send(Method::POST, "/Transfer", Some(&transfer("t2", true)), &[]).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(balances().await, (json!(70), json!(30)));
    let (status, _, _) = s.rest_send(Method::GET, "/Ledger/t2", None, &[]).await;
    assert_eq!(status, 404);
    // The ledger entry exists already: the commit is refused, and so are the transfers.
    let (status, _, body) = s.rest_send(Method::POST, "/Transfer", Some(&transfer("t1", false)), &[]).await;
    assert_eq!((status, body), (409, json!("ClientError: Record already exists")));
    assert_eq!(balances().await, (json!(70), json!(30)));
    // A teller may write accounts but not the ledger: its deposit writes neither.
    let grant = |table: &str, write: bool| json!({table: {"read": true, "insert": write, "update": write, "delete": false, "attribute_permissions": []}});
    let mut tables = grant("Account", true);
    tables.as_object_mut().unwrap().extend(grant("Ledger", false).as_object().unwrap().clone());
    s.ok(json!({"operation": "add_role", "role": "teller", "permission": {"data": {"tables": tables}}})).await;
    s.ok(json!({"operation": "add_user", "username": "tom", "password": "pw", "role": "teller", "active": true})).await;
    let deposit = json!({"to": "b", "balance": 1000, "ref": "d1"});
    let (status, body) = s.rest_as("tom", "pw", Method::POST, "/Deposit", Some(&deposit)).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(balances().await, (json!(70), json!(30)));
    let (status, body) = s.rest_as(USER, PASSWORD, Method::POST, "/Deposit", Some(&deposit)).await;
    assert_eq!((status, body), (200, json!({"ok": true})));
    assert_eq!(balances().await, (json!(70), json!(1000)));
    // …while writes made with the transaction itself are the script's own, unchecked
    // (as outside a transaction, and in Harper), whoever's request runs it.
    let (status, body) = s.rest_as("tom", "pw", Method::POST, "/Transfer", Some(&transfer("t3", false))).await;
    assert_eq!((status, body), (200, json!({"unchanged": true})));
    assert_eq!(balances().await, (json!(40), json!(1030)));
}

/// A content type a script registers: REST answers in it and reads bodies in it.
const LINES_RESOURCES: &str = r#"
// A runFirst middleware: its `next` reaches the content types too.
server.http((request, next) => next(request), { runFirst: true });
contentTypes.set('text/x-lines', {
	serialize(data) {
		const records = Array.isArray(data) ? data : [data];
		return records.map((r) => Object.entries(r).map(([k, v]) => `${k}=${v}`).join(';')).join('\n');
	},
	deserialize(bytes) {
		// Node code reads the Buffer Harper hands over as text.
		const text = bytes.toString();
		return Object.fromEntries(text.trim().split(';').map((pair) => {
			if (!pair.includes('=')) throw new Error(`'${pair}' is not name=value`);
			return pair.split('=');
		}));
	},
	q: 0.9,
});
"#;

#[tokio::test]
async fn content_types_a_script_registers_serialize_answers_and_deserialize_bodies() {
    let s =
        scripted_app("lines", "type Bird @table @export { id: ID @primaryKey name: String }\n", LINES_RESOURCES, &[])
            .await;
    let client = reqwest::Client::new();
    let put_lines = |path: &str, body: &'static str| {
        client
            .put(s.rest(path))
            .basic_auth(USER, Some(PASSWORD))
            .header("content-type", "text/x-lines")
            .body(body)
            .send()
    };
    let put = put_lines("/Bird/b1", "name=robin").await.unwrap();
    assert_eq!(put.status(), 204, "{:?}", put.text().await);
    let (_, _, stored) = s.rest_send(Method::GET, "/Bird/b1", None, &[]).await;
    assert_eq!(stored, json!({"id": "b1", "name": "robin"}));
    // A body the type cannot read is the client's error, and nothing is written.
    let bad = put_lines("/Bird/b2", "robin").await.unwrap();
    assert_eq!(bad.status(), 400);
    let message = bad.text().await.unwrap();
    assert!(message.contains("not valid text/x-lines") && message.contains("'robin' is not name=value"), "{message}");
    assert!(!message.contains(".js:"), "no script file or line reaches the client: {message}");
    let (status, _, _) = s.rest_send(Method::GET, "/Bird/b2", None, &[]).await;
    assert_eq!(status, 404);
    let got = client
        .get(s.rest("/Bird/b1"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept", "text/x-lines, application/json;q=0.5")
        .send()
        .await
        .unwrap();
    assert_eq!(got.headers()["content-type"], "text/x-lines");
    assert_eq!(got.text().await.unwrap(), "id=b1;name=robin");
    // Lyre's own formats stay Lyre's when the client prefers them.
    let (_, headers, _) =
        s.rest_send(Method::GET, "/Bird/b1", None, &[("accept", "application/json, text/x-lines")]).await;
    assert_eq!(headers["content-type"], "application/json");
    // Errors stay in JSON.
    let missing = client
        .get(s.rest("/Bird/none"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept", "text/x-lines")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_ne!(missing.headers().get("content-type").map(|v| v.to_str().unwrap()), Some("text/x-lines"));
}

#[tokio::test]
async fn a_runfirst_middleware_in_front_of_scripts_never_waits_on_its_own_worker() {
    // One worker: the middleware's `next` needs the export's class, the source and
    // the content type on the very worker that waits for it.
    let resources = format!(
        "{LINES_RESOURCES}\nexport class BirdView extends tables.Bird {{\n\
         \tstatic loadAsInstance = false;\n\
         \tasync get(target) {{ const bird = await super.get(target); return bird && {{ ...bird, seen: true }}; }}\n}}\n\
         class NestSource extends Resource {{ get() {{ return {{ v: `sourced ${{this.getId()}}` }}; }} }}\n\
         tables.Nest.sourcedFrom(NestSource);\n"
    );
    let schema = "type Bird @table @export { id: ID @primaryKey name: String }\n\
                  type Nest @table @export { id: ID @primaryKey v: String }\n";
    let env = [("JAVASCRIPT_THREADS", "1"), ("JAVASCRIPT_TIMEOUT", "5s")];
    let s = scripted_app("nest", schema, &resources, &env).await;
    s.rest_send(Method::PUT, "/Bird/b1", Some(&json!({"name": "robin"})), &[]).await;
    let requests = (0..4).map(|_| s.rest_send(Method::GET, "/BirdView/b1", None, &[("accept", "text/x-lines")]));
    for (status, headers, body) in futures_util::future::join_all(requests).await {
        assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "text/x-lines"), "{body}");
        assert_eq!(body, json!("id=b1;name=robin;seen=true"));
    }
    // A caching table's miss asks its script source from a task of its own.
    let (status, _, body) = s.rest_send(Method::GET, "/Nest/n1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "n1", "v": "sourced n1"})));
}

/// Records of every kind a table stores, a table with a computed attribute, and
/// classes answering with what their table's `get` gave them: as it is, changed, or
/// after reading another record.
const ANSWERED_AS_READ_SCHEMA: &str = r#"
type Thing @table @export { id: ID @primaryKey name: String }
type Priced @table @export { id: ID @primaryKey price: Float taxed: Float @computed(from: "price * 2") @enumerable }
"#;
const ANSWERED_AS_READ_RESOURCES: &str = r#"
export class AsRead extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		return super.get(target);
	}
}
export class Changed extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		const record = await super.get(target);
		return { ...record, extra: 1 };
	}
}
export class FirstOfTwo extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		const first = await super.get(target);
		await tables.Thing.get('other');
		return first;
	}
}
export class ChangedInside extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		const record = await super.get(target);
		record.list.push('pushed');
		return record;
	}
}
export class PricedAsRead extends tables.Priced {
	static loadAsInstance = false;
	get(target) {
		return super.get(target);
	}
}
"#;

/// A GET as raw bytes: status, content type and body.
async fn get_bytes(s: &TestServer, path: &str, accept: &str) -> (u16, String, Vec<u8>) {
    let response =
        s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD)).header("accept", accept).send().await.expect("get");
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (status, content_type, response.bytes().await.expect("body").to_vec())
}

#[tokio::test]
async fn a_handler_answering_with_the_record_it_read_answers_what_the_table_does() {
    let s = scripted_app("as-read", ANSWERED_AS_READ_SCHEMA, ANSWERED_AS_READ_RESOURCES, &[]).await;
    let flat = json!({"id": "flat", "name": "Zoë ✓ \"quoted\"\n", "count": 9007199254740991_i64, "ratio": 0.1, "none": null, "yes": true});
    let record = json!({
        "id": "x", "name": "Zoë ✓ \"quoted\"\n", "count": 9007199254740991_i64, "ratio": 0.1, "none": null,
        "yes": true, "list": [1, "two", {"three": [3.5]}], "nested": {"a": {"b": []}}
    });
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [record, {"id": "other", "name": "o"}]})).await;
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [flat.clone()]})).await;
    // Every format: the same bytes as the table's own GET (a flat record is served
    // from its stored bytes), and the same as a class answering through the general
    // path (which converts the record back from JavaScript; there integers past 2^53
    // would round, and keys that look like integers would come first).
    for accept in ["application/json", "application/cbor", "application/x-msgpack", "text/csv", "*/*"] {
        let plain = get_bytes(&s, "/Thing/flat", accept).await;
        assert_eq!(plain.0, 200, "{accept}");
        assert_eq!(get_bytes(&s, "/AsRead/flat", accept).await, plain, "{accept}");
        assert_eq!(get_bytes(&s, "/FirstOfTwo/flat", accept).await, plain, "{accept}");
    }
    // A handler answering with the flat record as read gets its stored bytes: an
    // integer past 2^53 stays exact, as in the table's own GET (JavaScript's number
    // would round it).
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [{"id": "big", "count": 9007199254740993_i64}]}))
        .await;
    let (status, _, body) = get_bytes(&s, "/AsRead/big", "application/json").await;
    assert_eq!((status, String::from_utf8_lossy(&body)), (200, r#"{"id":"big","count":9007199254740993}"#.into()));
    // A record with nested values answers through the general path, the same.
    for accept in ["application/json", "application/cbor", "application/x-msgpack", "text/csv", "*/*"] {
        let plain = get_bytes(&s, "/Thing/x", accept).await;
        assert_eq!(plain.0, 200, "{accept}");
        assert_eq!(get_bytes(&s, "/AsRead/x", accept).await, plain, "{accept}");
        assert_eq!(get_bytes(&s, "/FirstOfTwo/x", accept).await, plain, "{accept}");
    }
    let (status, _, body) = s.rest_send(Method::GET, "/AsRead/x", None, &[]).await;
    assert_eq!((status, body), (200, record.clone()));
    // A copy with a change is answered as the copy, not as what was read.
    let (status, _, body) = s.rest_send(Method::GET, "/Changed/x", None, &[]).await;
    let mut changed = record.clone();
    changed["extra"] = json!(1);
    assert_eq!((status, body), (200, changed));
    // A record changed inside (frozen is only its top level) is answered changed.
    let (status, _, body) = s.rest_send(Method::GET, "/ChangedInside/x", None, &[]).await;
    let mut pushed = record.clone();
    pushed["list"].as_array_mut().expect("list").push(json!("pushed"));
    assert_eq!((status, body), (200, pushed));
    // A record returned after another was read is still the first.
    let (status, _, body) = s.rest_send(Method::GET, "/FirstOfTwo/x", None, &[]).await;
    assert_eq!((status, body), (200, record));
    // A missing record is 404, as before.
    let (status, _, _) = s.rest_send(Method::GET, "/AsRead/missing", None, &[]).await;
    assert_eq!(status, 404);
    // A table with a computed attribute a whole record carries answers with it (its
    // stored bytes lack it).
    s.ok(json!({"operation": "insert", "table": "Priced", "records": [{"id": "p", "price": 2.5}]})).await;
    let (status, _, body) = s.rest_send(Method::GET, "/PricedAsRead/p", None, &[]).await;
    assert_eq!((status, body), (200, json!({"id": "p", "price": 2.5, "taxed": 5})));
}

const SEEN_SCHEMA: &str = r#"
type Thing @table @export { id: ID @primaryKey name: String list: [Int] }
"#;
/// `Seen` answers whether the record it read is the very object the request before
/// read (one worker: `JAVASCRIPT_THREADS=1`), and what it read.
const SEEN_RESOURCES: &str = r#"
let last;
export class Seen extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		const record = await super.get(target);
		const same = record === last;
		last = record;
		return { same, frozen: Object.isFrozen(record), name: record.name, list: record.list ?? null };
	}
}
export class Pushed extends tables.Thing {
	static loadAsInstance = false;
	async get(target) {
		const record = await super.get(target);
		record.list.push(record.list.length);
		return record;
	}
}
"#;

#[tokio::test]
async fn a_record_read_again_unchanged_is_the_same_frozen_object_and_a_change_is_read_at_once() {
    let s = scripted_app("seen", SEEN_SCHEMA, SEEN_RESOURCES, &[("JAVASCRIPT_THREADS", "1")]).await;
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [{"id": "a", "name": "one"}]})).await;
    let seen = |same: bool, name: &str| json!({"same": same, "frozen": true, "name": name, "list": null});
    let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
    assert_eq!((status, body), (200, seen(false, "one")));
    // Read again unchanged: the worker gives the object it built (storage.caching).
    let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
    assert_eq!((status, body), (200, seen(true, "one")));
    // Changed: the new record at once, never the kept one.
    s.ok(json!({"operation": "update", "table": "Thing", "records": [{"id": "a", "name": "two"}]})).await;
    let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
    assert_eq!((status, body), (200, seen(false, "two")));
    let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
    assert_eq!((status, body), (200, seen(true, "two")));
    // A role that may read only some attributes gets its own object, without the
    // others, never the one kept for a user who reads them all.
    add_reader_of_one_attribute(&s, "id_reader", "i", "Thing", "id").await;
    let (status, body) = s.rest_as("i", "pw", Method::GET, "/Seen/a", None).await;
    assert_eq!((status, body), (200, json!({"same": false, "frozen": true, "list": null})));
    let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
    assert_eq!((status, body), (200, seen(false, "two")));
    // A record holding an array (changeable inside a frozen record) is built afresh
    // for each read: what one request changed inside it no other request sees.
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [{"id": "n", "name": "nested", "list": [7]}]}))
        .await;
    for _ in 0..2 {
        let (status, _, body) = s.rest_send(Method::GET, "/Pushed/n", None, &[]).await;
        assert_eq!((status, body), (200, json!({"id": "n", "name": "nested", "list": [7, 1]})));
        let (status, _, body) = s.rest_send(Method::GET, "/Seen/n", None, &[]).await;
        assert_eq!((status, body["same"].clone(), body["list"].clone()), (200, json!(false), json!([7])));
    }
    drop(s);
    // `storage.caching: false` (Harper's key) keeps nothing: each read builds anew.
    let s =
        scripted_app("seen", SEEN_SCHEMA, SEEN_RESOURCES, &[("JAVASCRIPT_THREADS", "1"), ("STORAGE_CACHING", "false")])
            .await;
    s.ok(json!({"operation": "insert", "table": "Thing", "records": [{"id": "a", "name": "one"}]})).await;
    for _ in 0..2 {
        let (status, _, body) = s.rest_send(Method::GET, "/Seen/a", None, &[]).await;
        assert_eq!((status, body), (200, seen(false, "one")));
    }
}

/// Harper's table API beyond reads and writes: `update` answers an Updatable whose
/// changes are written (`addTo` as a CRDT increment, so concurrent ones all
/// count; inside a transaction they commit with it), `create` answers the record
/// with its new id, `getRecordCount` counts, and `get({id, select})` picks.
#[tokio::test]
async fn updatable_records_create_count_and_select_work_as_harpers() {
    let schema = "type Counter @table @export { id: ID @primaryKey name: String hits: Int }\n";
    let resources = r#"
export class Hit extends Resource {
	static loadAsInstance = false;
	async post(target, data) {
		const counter = await tables.Counter.update(data.id);
		// Not awaited: the answer waits for the writes, as Harper's transaction does.
		counter.addTo(data.field ?? 'hits', data.by ?? 1);
		// A write that fails is seen by code that awaits it.
		if (data.field) await counter.save();
		if (data.label) counter.name = data.label;
		if (data.down) counter.subtractFrom('hits', data.down);
		return { seen: counter.hits, id: counter.getId(), name: counter.getProperty('name') };
	}
}
export class Batch extends Resource {
	static loadAsInstance = false;
	post(target, data) {
		return transaction(this.getContext(), async (txn) => {
			const counter = await tables.Counter.update(data.id, { name: 'batched' }, txn);
			counter.addTo('hits', 5);
			counter.addTo('hits', 2);
			counter.set('hits', 100);
			counter.addTo('hits', 1);
			return 'queued';
		});
	}
}
export class Renamed extends Resource {
	static loadAsInstance = false;
	async post(target, data) {
		// The updates are written before the updatable is answered.
		await tables.Counter.update(data.id, { name: data.name });
		// No change in a transaction writes nothing (no record is made).
		await transaction(this.getContext(), (txn) => tables.Counter.update('ghost', undefined, txn));
		return { now: (await tables.Counter.get(data.id)).name, ghost: (await tables.Counter.get('ghost')) ?? null };
	}
}
export class Made extends Resource {
	static loadAsInstance = false;
	async post(target, data) {
		const created = await tables.Counter.create({ name: data.name, hits: 0 });
		const { recordCount } = await tables.Counter.getRecordCount();
		return { created, recordCount, idIsText: typeof created.id === 'string' };
	}
}
class CounterView extends tables.Counter {
	static loadAsInstance = false;
}
export class Pick extends Resource {
	static loadAsInstance = false;
	async get(target) {
		return {
			some: await tables.Counter.get({ id: target.id, select: ['name'] }),
			one: await tables.Counter.get({ id: target.id, select: 'hits' }),
			newer: await CounterView.get({ id: target.id, select: ['hits'] }),
		};
	}
}
"#;
    let s = scripted_app("counters", schema, resources, &[]).await;
    let post = |path: &'static str, body: Value| {
        let s = &s;
        async move { s.rest_send(Method::POST, path, Some(&body), &[]).await }
    };
    s.rest_send(Method::PUT, "/Counter/c1", Some(&json!({"name": "first", "hits": 1})), &[]).await;
    let (status, _, body) = post("/Hit", json!({"id": "c1", "by": 2, "label": "renamed", "down": 1})).await;
    assert_eq!((status, body), (200, json!({"seen": 2, "id": "c1", "name": "renamed"})));
    let (_, _, stored) = s.rest_send(Method::GET, "/Counter/c1", None, &[]).await;
    assert_eq!(stored, json!({"id": "c1", "name": "renamed", "hits": 2}));
    // Concurrent increments all count.
    let all = futures_util::future::join_all((0..20).map(|_| post("/Hit", json!({"id": "c1"})))).await;
    assert!(all.iter().all(|(status, _, _)| *status == 200), "{all:?}");
    let (_, _, stored) = s.rest_send(Method::GET, "/Counter/c1", None, &[]).await;
    assert_eq!(stored["hits"], 22);
    // A failed write fails the answer: a name is no number to add to.
    let (status, _, body) = post("/Hit", json!({"id": "c1", "field": "name"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.as_str().unwrap_or_default().contains("name"), "{body}");
    // In a transaction: one patch at commit, the changes in order.
    let (status, _, body) = post("/Batch", json!({"id": "c1"})).await;
    assert_eq!((status, body), (200, json!("queued")));
    let (_, _, stored) = s.rest_send(Method::GET, "/Counter/c1", None, &[]).await;
    assert_eq!(stored, json!({"id": "c1", "name": "batched", "hits": 101}));
    let (status, _, body) = post("/Renamed", json!({"id": "c1", "name": "again"})).await;
    assert_eq!((status, body), (200, json!({"now": "again", "ghost": null})));
    // create answers the record with its new id; the count counts it.
    let (status, _, body) = post("/Made", json!({"name": "fresh"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["created"]["name"].clone(), body["idIsText"].clone()), (json!("fresh"), json!(true)));
    assert_eq!(body["recordCount"], 2);
    let id = body["created"]["id"].as_str().unwrap();
    let (status, _, stored) = s.rest_send(Method::GET, &format!("/Counter/{id}"), None, &[]).await;
    assert_eq!((status, stored["name"].clone()), (200, json!("fresh")));
    let (status, _, body) = s.rest_send(Method::GET, "/Pick/c1", None, &[]).await;
    assert_eq!((status, body), (200, json!({"some": {"name": "again"}, "one": 101, "newer": {"hits": 101}})));
}

/// A request's context tells the client's address, the protocol and the host it
/// asked for, as Harper's request does.
#[tokio::test]
async fn a_requests_context_tells_its_client_protocol_and_host() {
    let who = "export class Who extends Resource {\n\
               \tstatic loadAsInstance = false;\n\
               \tget() { const c = this.getContext(); return { ip: c.ip, protocol: c.protocol, host: c.host, url: c.absoluteURL }; }\n}\n";
    let secure_port = crate::support::free_port();
    let secure_text = secure_port.to_string();
    let s = TestServer::start_app(
        &[("components/who/config.yaml", APP_CONFIG), ("components/who/resources.js", who)],
        &[("HTTP_SECUREPORT", secure_text.as_str())],
    )
    .await;
    let (status, _, body) = s.rest_send(Method::GET, "/Who", None, &[]).await;
    let host = s.rest("").trim_start_matches("http://").trim_end_matches('/').to_string();
    assert_eq!(
        (status, body),
        (200, json!({"ip": "127.0.0.1", "protocol": "http", "host": host, "url": format!("http://{host}/Who")}))
    );
    let pem = std::fs::read(s.root().join("keys/certificate.pem")).expect("the generated certificate");
    let https =
        reqwest::Client::builder().tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]).build().unwrap();
    let response = https
        .get(format!("https://localhost:{secure_port}/Who"))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (body["protocol"].clone(), body["host"].clone()),
        (json!("https"), json!(format!("localhost:{secure_port}")))
    );
}
