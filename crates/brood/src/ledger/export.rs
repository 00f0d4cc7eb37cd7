//! The versioned export format `brood.runs.v1`: every run with its events, as one
//! JSON document (documented in `docs/LEDGER.md`). Transcripts are not included.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error::LedgerError;
use super::reader::LedgerReader;
use super::types::{EventRecord, RunRecord};

/// The value of the export's `schema` field.
pub const EXPORT_SCHEMA: &str = "brood.runs.v1";

/// `{"schema": "brood.runs.v1", "exported_at": …, "runs": [{…run fields…, "events": […]}]}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Export {
    /// Always [`EXPORT_SCHEMA`].
    pub schema: String,
    /// When the export was made.
    pub exported_at: DateTime<Utc>,
    /// Every exported run, parents before their children.
    pub runs: Vec<ExportedRun>,
}

/// One run of an export: every stored field of the run, plus its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedRun {
    #[serde(flatten)]
    /// The run's stored fields.
    pub run: RunRecord,
    /// Its events, in order.
    pub events: Vec<EventRecord>,
}

impl LedgerReader {
    /// Every run (all sessions), oldest first, each with its events.
    pub fn export(&self) -> Result<Export, LedgerError> {
        let runs = self.all_runs()?;
        // Events come sorted by (run_id, seq); each run gets its group in order.
        let mut by_run = std::collections::HashMap::<String, Vec<EventRecord>>::new();
        for ev in self.all_events()? {
            by_run
                .entry(ev.run_id.as_str().to_string())
                .or_default()
                .push(ev);
        }
        let runs = runs
            .into_iter()
            .map(|run| ExportedRun {
                events: by_run.remove(run.id.as_str()).unwrap_or_default(),
                run,
            })
            .collect();
        Ok(Export {
            schema: EXPORT_SCHEMA.to_string(),
            exported_at: Utc::now(),
            runs,
        })
    }
}
