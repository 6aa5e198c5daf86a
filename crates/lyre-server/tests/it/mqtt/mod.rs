//! The MQTT broker with real clients: a raw client built on the `mqtt5-protocol`
//! codec for the specifications' broker-side statements (each test names the
//! statements it checks), `rumqttc` as a library client of both versions, and
//! Debian's `mosquitto_pub`/`mosquitto_sub`.

mod client;
mod records;
mod sessions;
mod spec;
mod v5;

use crate::support::TestServer;

pub(crate) const SCHEMA: &str =
    r#"type Dog @table(database: "dev") @export { id: ID @primaryKey name: String age: Int }"#;
pub(crate) const CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";

/// A server exporting `Dog` (ids are strings).
pub(crate) async fn dogs() -> TestServer {
    dogs_with(&[]).await
}

/// A server exporting `Dog`, with extra environment.
pub(crate) async fn dogs_with(env: &[(&str, &str)]) -> TestServer {
    TestServer::start_app(&[("components/dev/config.yaml", CONFIG), ("components/dev/schema.graphql", SCHEMA)], env)
        .await
}
