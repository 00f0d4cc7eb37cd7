//! Which ledger the commands that are not sessions read (`brood agents`, the MCP
//! server's run resources): the database `ledger_url` names (the user's config, or
//! `BROOD_LEDGER_URL`), else the workspace's SQLite file — the same one a `brood run`
//! in that workspace writes to.

use std::collections::BTreeMap;
use std::path::Path;

use brood::ledger::{Ledger, LedgerError, LedgerMaintenance, LedgerReader};
use brood::runtime::config::{Config, ConfigPaths, Overrides};

/// The configured ledger URL of `ws`, `None` for its SQLite file. A config that does
/// not load is reported by every command that runs a session; here it means the
/// default.
pub fn url(ws: &Path) -> Option<String> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    Config::load(&ConfigPaths::from_env(ws), &env, &Overrides::default())
        .ok()
        .and_then(|c| c.ledger_url)
}

/// `Ledger::open_reader` of the configured ledger.
pub fn reader(ws: &Path) -> Result<LedgerReader, LedgerError> {
    Ledger::open_reader_at(ws, url(ws).as_deref())
}

/// `Ledger::open_maintenance` of the configured ledger.
pub fn maintenance(ws: &Path) -> Result<LedgerMaintenance, LedgerError> {
    Ledger::open_maintenance_at(ws, url(ws).as_deref())
}
