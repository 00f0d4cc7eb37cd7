//! The ledger through its public API: one test binary (link time dominates a test
//! build), one module per subject. Tests written against [`common::Store`] run on
//! both backends, SQLite and PostgreSQL (`both!`).
//!
//! `cargo test -p brood --test ledger` runs them all; a module alone:
//! `cargo test -p brood --test ledger crash::`.

mod common;

mod crash;
mod fleet;
mod queue;
mod reconnect;
mod reopen;
mod runs;
mod sessions;
mod silent;
mod store;
mod summaries;
mod tls;
mod unreachable;
