//! Black-box tests: each starts the real `lyre` binary and talks to it over HTTP.

mod admin;
mod bench_smoke;
mod bulk;
mod cli;
mod components;
mod connections;
mod drop_restore;
mod envelope;
mod expiry;
mod export;
mod harper5;
mod jobs;
mod lifecycle;
mod memory;
mod metrics;
mod ops_crud;
mod ops_schema;
mod ops_search;
mod rest;
mod s3;
mod sessions;
mod sql;
mod support;
mod tls;
mod users;
mod versions;
