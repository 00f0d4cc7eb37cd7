//! The workspace's runs as MCP resources: `brood://runs/<id>` lists this
//! session's runs (status, role, parent) and reads one as JSON: its record,
//! result, events and the first messages of its transcript.

use brood::ledger::{LedgerError, ListFilter};
use rmcp::model::{ReadResourceResult, Resource, ResourceContents};
use rmcp::ErrorData;
use std::path::Path;

/// The URI prefix of a run.
pub const PREFIX: &str = "brood://runs/";

/// How many transcript messages a read returns (the rest: `handle_read`).
const TRANSCRIPT_LIMIT: usize = 200;

/// The current session's runs, newest last.
pub async fn list(ws: &Path) -> Result<Vec<Resource>, ErrorData> {
    let ws = ws.to_path_buf();
    blocking(move || {
        let reader = match crate::ledger_at::reader(&ws) {
            Ok(r) => r,
            Err(LedgerError::Missing { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let runs = reader.list_runs(ListFilter {
            include_archived: false,
        })?;
        Ok(runs
            .into_iter()
            .map(|l| {
                let r = l.run;
                let name = r.name.clone().unwrap_or_else(|| r.id.as_str().to_string());
                let role = r.role.clone().unwrap_or_default();
                let mut res = Resource::new(format!("{PREFIX}{}", r.id.as_str()), name)
                    .with_description(format!(
                        "{role} run, {}{}: {}",
                        r.status.as_str(),
                        r.parent_id
                            .as_ref()
                            .map(|p| format!(", child of {}", p.as_str()))
                            .unwrap_or_default(),
                        clip(&r.objective, 120)
                    ));
                res.mime_type = Some("application/json".into());
                res
            })
            .collect())
    })
    .await
}

/// One run: record, result, events, transcript.
pub async fn read(ws: &Path, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let Some(key) = uri.strip_prefix(PREFIX) else {
        return Err(ErrorData::resource_not_found(
            format!("'{uri}' is not a brood run; runs are {PREFIX}<id> (resources/list)"),
            None,
        ));
    };
    let (ws, key, uri) = (ws.to_path_buf(), key.to_string(), uri.to_string());
    let text = blocking(move || {
        let reader = crate::ledger_at::reader(&ws)?;
        let id = reader.resolve_id(&key)?;
        let detail = reader.get_run(&id)?;
        let transcript = reader.transcript(&id, 0, TRANSCRIPT_LIMIT)?;
        let v = serde_json::json!({ "run": detail, "transcript": transcript });
        Ok(v.to_string())
    })
    .await?;
    let mut contents = ResourceContents::text(text, uri);
    if let ResourceContents::TextResourceContents { mime_type, .. } = &mut contents {
        *mime_type = Some("application/json".into());
    }
    Ok(ReadResourceResult::new(vec![contents]))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, ErrorData> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(
            e @ (LedgerError::UnknownRun { .. }
            | LedgerError::AmbiguousId { .. }
            | LedgerError::InvalidId { .. }
            | LedgerError::Missing { .. }),
        )) => Err(ErrorData::resource_not_found(e.to_string(), None)),
        Ok(Err(e)) => Err(ErrorData::internal_error(e.to_string(), None)),
        Err(e) => Err(ErrorData::internal_error(
            format!("reading the ledger: {e}"),
            None,
        )),
    }
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
