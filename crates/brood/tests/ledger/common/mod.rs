//! Helpers shared by the ledger tests: a ledger on a workspace (optionally
//! with a named session), a run with a name, a run's event kinds, and [`Store`]: a
//! workspace whose ledger is SQLite or PostgreSQL, so one test body runs against
//! both backends ([`both!`]).
#![allow(dead_code)]

pub mod pg;
pub mod proxy;

use std::path::Path;

use brood::ledger::{
    EventKind, Ledger, LedgerMaintenance, LedgerOptions, LedgerReader, NewRun, RunId,
};
use tempfile::TempDir;

/// Where a test's ledger lives: a workspace directory, and the ledger's URL
/// (`None`: the workspace's SQLite file).
pub trait Place {
    fn path(&self) -> &Path;
    fn url(&self) -> Option<&str>;
}

impl Place for TempDir {
    fn path(&self) -> &Path {
        TempDir::path(self)
    }
    fn url(&self) -> Option<&str> {
        None
    }
}

/// A test's workspace and the backend its ledger is on.
pub struct Store {
    ws: TempDir,
    url: Option<String>,
}

impl Place for Store {
    fn path(&self) -> &Path {
        self.ws.path()
    }
    fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }
}

impl Store {
    pub fn sqlite() -> Store {
        Store {
            ws: TempDir::new().unwrap(),
            url: None,
        }
    }

    /// A workspace whose ledger is a fresh PostgreSQL database; `None` when the
    /// test is skipped (see [`pg`]).
    pub fn postgres(test: &str) -> Option<Store> {
        Some(Store {
            ws: TempDir::new().unwrap(),
            url: Some(pg::fresh_database(test)?),
        })
    }

    pub fn path(&self) -> &Path {
        self.ws.path()
    }

    pub fn is_postgres(&self) -> bool {
        self.url.is_some()
    }

    /// Options for a ledger on this store.
    pub fn options(&self) -> LedgerOptions {
        LedgerOptions {
            url: self.url.clone(),
            ..LedgerOptions::default()
        }
    }

    /// `Ledger::open` with `opts` (its `url` set to this store's).
    pub fn open_with(&self, opts: LedgerOptions) -> Ledger {
        self.try_open_with(opts).unwrap()
    }

    pub fn try_open_with(&self, opts: LedgerOptions) -> Result<Ledger, brood::ledger::LedgerError> {
        Ledger::open(
            self.path(),
            LedgerOptions {
                url: self.url.clone(),
                ..opts
            },
        )
    }

    /// `Ledger::open_reader` of this store.
    pub fn reader(&self) -> LedgerReader {
        Ledger::open_reader_at(self.path(), self.url()).unwrap()
    }

    /// `Ledger::open_maintenance` of this store.
    pub fn maintenance(&self) -> LedgerMaintenance {
        Ledger::open_maintenance_at(self.path(), self.url()).unwrap()
    }
}

/// Run each named `async fn NAME(ws: Store)` of the file as two tests,
/// `sqlite::NAME` and `postgres::NAME` (skipped, loudly, without a PostgreSQL).
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::common::Store::sqlite()).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(store) =
                        $crate::common::Store::postgres(stringify!($name))
                    {
                        super::$name(store).await
                    }
                }
            )*
        }
    };
}

/// [`both!`] for blocking tests (`#[test] fn NAME(ws: Store)`).
#[macro_export]
macro_rules! both_blocking {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::common::Store::sqlite())
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(store) =
                        $crate::common::Store::postgres(stringify!($name))
                    {
                        super::$name(store)
                    }
                }
            )*
        }
    };
}

pub fn open(ws: &impl Place) -> Ledger {
    Ledger::open(
        ws.path(),
        LedgerOptions {
            url: ws.url().map(str::to_string),
            ..LedgerOptions::default()
        },
    )
    .unwrap()
}

pub fn open_session(ws: &impl Place, session: &str) -> Ledger {
    let opts = LedgerOptions {
        session_id: Some(session.to_string()),
        url: ws.url().map(str::to_string),
        ..LedgerOptions::default()
    };
    Ledger::open(ws.path(), opts).unwrap()
}

/// The `i` of every `warning` event of `run` (a test's progress records), in order.
pub fn progress(ws: &Store, run: &brood::ledger::RunId) -> Vec<i64> {
    ws.reader()
        .events(run)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == brood::ledger::EventKind::Warning)
        .map(|e| e.payload["i"].as_i64().unwrap())
        .collect()
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
