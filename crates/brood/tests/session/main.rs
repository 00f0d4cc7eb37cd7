//! A session through the library's public API: the agent loop, configuration
//! loading, the front door (`Session::builder`, custom tools and models), permission
//! rules and the approver, cancellation, and the shipped examples run against
//! brood-mock. One test binary (link time dominates a test build), one module per
//! subject.
//!
//! `cargo test -p brood --test session` runs them all; a module alone:
//! `cargo test -p brood --test session permissions::`.

#[path = "../common/mod.rs"]
mod common;

mod agent_loop;
mod cancel;
mod config;
mod examples;
mod library;
mod permissions;
