//! A run's result refers to text its transcript already spilled, so a big answer is
//! stored once (issue 21.3).
//!
//! A run's final answer is also its last assistant message. Past the transcript cap
//! that message's full text goes to a spill file ([`super::spill`]); a result holding
//! the answer again (`final_text`, and report fields cut from it) were a second and a
//! third copy. When a result is stored, every string of it at least the cap long that
//! appears in the run's last spill file — JSON-escaped, as it is there (the file is the
//! message's compact JSON) — is stored as a reference to that byte range instead. The
//! range decodes to exactly the string whatever surrounds it, so a report section cut
//! from the answer is found inside it as well. Reading the result puts the text
//! back, so `brood agents show`, export and MCP resources return what was stored.
//!
//! Stored form, used only when something is referred to (or when a result could be
//! mistaken for it, so that reading it back is never ambiguous):
//!
//! ```json
//! {"$brood_stored": 1, "value": <the result, each referred string "">,
//!  "refs": [{"ptr": "/final_text", "spill": ".brood/state/spill/…", "at": 123, "len": 456}]}
//! ```
//!
//! On a PostgreSQL ledger the spilled text is in the database (`spill.rs`) and a
//! reference names it there (`"spill": "ledger:spills/<run>/<seq>"`), so it resolves
//! on any machine.
//!
//! The database is untrusted input: a file reference is resolved under the spill directory
//! only ([`LedgerPaths::resolve_relative`]), read within the file's bounds, and one that
//! cannot be read leaves a note on the run and a bracketed placeholder in the field —
//! never a failed read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::db::{args, query_row, Db, RowExt};
use super::error::{LedgerError, SqlContext};
use super::paths::LedgerPaths;
use super::spill;

/// The key that marks a stored result holding references.
const MARK: &str = "$brood_stored";

/// Where a run's spilled text is, and from what size a string is worth referring to
/// (the transcript cap: shorter contents are never spilled).
pub(crate) struct SpillDir<'a> {
    pub paths: &'a LedgerPaths,
    pub cap_bytes: usize,
}

/// One string of a result stored as a byte range of a spill file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ref {
    /// JSON pointer of the string in the result.
    ptr: String,
    /// Workspace-relative spill file.
    spill: String,
    /// Byte offset of the string, JSON-escaped (no quotes), in the file.
    at: usize,
    /// Its length in bytes.
    len: usize,
}

#[derive(Serialize)]
struct Stored<'a> {
    #[serde(rename = "$brood_stored")]
    version: u32,
    value: &'a Value,
    refs: &'a [Ref],
}

/// The text to store for `result` of `run`: its JSON, or the stored form when some
/// of its strings are already in the run's last spill file.
pub(crate) fn store(
    db: &dyn Db,
    dir: Option<&SpillDir<'_>>,
    run: &str,
    result: &Value,
) -> Result<String, LedgerError> {
    let ambiguous = result.get(MARK).is_some();
    let mut refs = Vec::new();
    let mut kept = None;
    if let Some(dir) = dir {
        if has_long_string(result, dir.cap_bytes) {
            if let Some((rel, file)) = last_spill(db, dir.paths, run)? {
                let mut ptr = String::new();
                let mut found = Found {
                    cap: dir.cap_bytes,
                    file: &file,
                    rel: &rel,
                    refs: &mut refs,
                };
                kept = Some(found.strip(result, &mut ptr)?);
            }
        }
    }
    let text = if refs.is_empty() && !ambiguous {
        serde_json::to_string(result)
    } else {
        serde_json::to_string(&Stored {
            version: 1,
            value: kept.as_ref().unwrap_or(result),
            refs: &refs,
        })
    };
    text.map_err(|e| LedgerError::json("encoding a run result", e))
}

fn has_long_string(v: &Value, cap: usize) -> bool {
    match v {
        Value::String(s) => s.len() >= cap,
        Value::Array(items) => items.iter().any(|v| has_long_string(v, cap)),
        Value::Object(map) => map.values().any(|v| has_long_string(v, cap)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The run's last spilled message: (its `spill_path`, its text). None when it has
/// none or it cannot be read (the result is then stored whole).
fn last_spill(
    db: &dyn Db,
    paths: &LedgerPaths,
    run: &str,
) -> Result<Option<(String, String)>, LedgerError> {
    let rel: Option<String> = query_row(
        db,
        "SELECT spill_path FROM transcripts
         WHERE run_id = ?1 AND spill_path IS NOT NULL ORDER BY seq DESC LIMIT 1",
        args![run],
        |r| r.string(0),
    )
    .ctx("finding a run's last spill file")?;
    let Some(rel) = rel else {
        return Ok(None);
    };
    Ok(spill::read(db, paths, &rel).ok().map(|text| (rel, text)))
}

/// Copies a result, replacing each long string found in `file` by `""` and a [`Ref`].
struct Found<'f> {
    cap: usize,
    file: &'f str,
    rel: &'f str,
    refs: &'f mut Vec<Ref>,
}

impl Found<'_> {
    fn strip(&mut self, v: &Value, ptr: &mut String) -> Result<Value, LedgerError> {
        Ok(match v {
            Value::String(s) if s.len() >= self.cap => {
                let lit = serde_json::to_string(s)
                    .map_err(|e| LedgerError::json("encoding a run result", e))?;
                // The escaped text without its quotes: a substring of a longer string
                // is found inside it.
                let body = lit
                    .strip_prefix('"')
                    .and_then(|l| l.strip_suffix('"'))
                    .unwrap_or(&lit);
                match self.file.find(body) {
                    Some(at) => {
                        self.refs.push(Ref {
                            ptr: ptr.clone(),
                            spill: self.rel.to_string(),
                            at,
                            len: body.len(),
                        });
                        Value::String(String::new())
                    }
                    None => v.clone(),
                }
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = ptr.len();
                    ptr.push('/');
                    ptr.push_str(&i.to_string());
                    out.push(self.strip(item, ptr)?);
                    ptr.truncate(len);
                }
                Value::Array(out)
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, item) in map {
                    let len = ptr.len();
                    ptr.push('/');
                    ptr.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    out.insert(k.clone(), self.strip(item, ptr)?);
                    ptr.truncate(len);
                }
                Value::Object(out)
            }
            Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => v.clone(),
        })
    }
}

/// A stored result as it was given: references read back from their spill files.
/// What cannot be read is named in `notes` and shown as a bracketed placeholder.
pub(crate) fn load(
    db: &dyn Db,
    paths: &LedgerPaths,
    stored: Value,
    notes: &mut Vec<String>,
) -> Value {
    let Value::Object(mut map) = stored else {
        return stored;
    };
    if !map.contains_key(MARK) {
        return Value::Object(map);
    }
    let mut value = map.remove("value").unwrap_or(Value::Null);
    let refs: Vec<Ref> = match map.remove("refs").map(serde_json::from_value) {
        Some(Ok(refs)) => refs,
        None => Vec::new(),
        Some(Err(e)) => {
            notes.push(format!("result: its references are unreadable ({e})"));
            Vec::new()
        }
    };
    let mut files: HashMap<String, Result<String, String>> = HashMap::new();
    for r in refs {
        let text = files
            .entry(r.spill.clone())
            .or_insert_with(|| spill::read(db, paths, &r.spill).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(String::clone)
            .and_then(|file| literal(file, r.at, r.len));
        let text = text.unwrap_or_else(|why| {
            notes.push(format!(
                "result{}: its text in {} is unreadable ({why})",
                r.ptr, r.spill
            ));
            format!("[brood: text not readable from {}: {why}]", r.spill)
        });
        match value.pointer_mut(&r.ptr) {
            Some(slot) => *slot = Value::String(text),
            None => notes.push(format!(
                "result: a reference names {:?}, which the result does not have",
                r.ptr
            )),
        }
    }
    value
}

/// The JSON-escaped string at `at..at + len` of `file`, decoded.
fn literal(file: &str, at: usize, len: usize) -> Result<String, String> {
    let range = at
        .checked_add(len)
        .and_then(|end| file.get(at..end))
        .ok_or_else(|| {
            format!(
                "bytes {at}..+{len} are not within the file's {} bytes",
                file.len()
            )
        })?;
    serde_json::from_str(&format!("\"{range}\""))
        .map_err(|e| format!("not an escaped JSON string there: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_literal_outside_the_file_is_refused() {
        let file = r#"{"content":"a \"b\"\nc"}"#;
        assert_eq!(literal(file, 12, 10).as_deref(), Ok("a \"b\"\nc"));
        assert_eq!(literal(file, 16, 1).as_deref(), Ok("b"));
        assert!(literal(file, 20, 20).is_err());
        assert!(literal(file, usize::MAX, 5).is_err());
        // Half an escape, or a quote that would end the string, is refused.
        assert!(literal(file, 12, 3).is_err());
        assert!(literal(file, 10, 3).is_err());
    }

    #[test]
    fn a_result_that_is_not_stored_form_reads_as_itself() {
        let paths = LedgerPaths::new(std::path::Path::new("/nonexistent"));
        let db = crate::ledger::sqlite::SqliteDb::new(
            rusqlite::Connection::open_in_memory().unwrap(),
            paths.clone(),
        );
        let v = json!({"final_text": "x", "report": null});
        let mut notes = Vec::new();
        assert_eq!(load(&db, &paths, v.clone(), &mut notes), v);
        assert!(notes.is_empty());
    }
}
