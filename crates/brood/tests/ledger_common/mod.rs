//! Helpers shared by the ledger test files: a ledger on a workspace (optionally
//! with a named session), a run with a name, a run's event kinds.
#![allow(dead_code)]

use brood::ledger::{EventKind, Ledger, LedgerOptions, NewRun, RunId};
use tempfile::TempDir;

pub fn open(ws: &TempDir) -> Ledger {
    Ledger::open(ws.path(), LedgerOptions::default()).unwrap()
}

pub fn open_session(ws: &TempDir, session: &str) -> Ledger {
    let opts = LedgerOptions {
        session_id: Some(session.to_string()),
        ..LedgerOptions::default()
    };
    Ledger::open(ws.path(), opts).unwrap()
}

pub fn named(name: &str) -> NewRun {
    NewRun {
        name: Some(name.to_string()),
        role: Some("explore".to_string()),
        ..NewRun::new(format!("objective of {name}"))
    }
}

pub fn kinds(ledger: &Ledger, id: &RunId) -> Vec<EventKind> {
    let reader = ledger.reader().unwrap();
    reader
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}
