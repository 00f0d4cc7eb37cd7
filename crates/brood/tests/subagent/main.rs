//! The sub-agent layer through its public API: one test binary (link time dominates a
//! test build), one module per subject — the output contract, agent types and
//! definition files, grants, configuration and routing, what goes on the wire, and the
//! runtime end to end (`runtime_*`: budgets, context, delivery, the ledger's lock,
//! limits, records, roles, the spawn gate).
//!
//! `cargo test -p brood --test subagent` runs them all; a module alone:
//! `cargo test -p brood --test subagent runtime_roles::`.

#[path = "../common/mod.rs"]
mod common;

mod contract;
mod definitions;
mod fleet_repo;
mod logic;
mod routing;
mod runtime_budgets;
mod runtime_context;
mod runtime_delivery;
mod runtime_ledger_lock;
mod runtime_limits;
mod runtime_records;
mod runtime_roles;
mod runtime_spawn_gate;
mod wire;
mod worktrees;
