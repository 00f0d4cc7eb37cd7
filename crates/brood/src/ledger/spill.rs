//! Capping oversized transcript contents. A content over the cap is stored capped
//! (same JSON shape: long strings are cut, with a note saying where the rest is) and
//! its full text is spilled: the raw text when the content is a JSON string,
//! otherwise the content's compact JSON.
//!
//! **Where spilled text goes** depends on the backend. An SQLite ledger writes a file
//! under the workspace's `.brood/state/spill/` (the row's `spill_path` is its
//! workspace-relative path). A PostgreSQL ledger is shared by machines that do not
//! share that directory (the fleet: a run resumed on another worker, a parent reading
//! a worker's run), so it keeps the text in the database — the `spills` table,
//! written in the same transaction as the transcript row — and the row's
//! `spill_path` names it `ledger:spills/<run id>/<seq>`. Reading follows the name
//! ([`read`]), so a PostgreSQL ledger's rows from before (files) still read where
//! their files are.

use std::borrow::Cow;
use std::path::Path;

use serde_json::Value;

use super::db::{args, query_row, Db, Dialect, RowExt};
use super::error::{LedgerError, SqlContext};
use super::paths::LedgerPaths;

/// The prefix of a `spill_path` naming text kept in the ledger's `spills` table.
const IN_LEDGER: &str = "ledger:spills/";

/// Whether `db` keeps spilled text in the database (PostgreSQL) rather than in files.
pub(crate) fn keeps_in_ledger(db: &dyn Db) -> bool {
    db.dialect() == Dialect::Postgres
}

/// The `spill_path` of message `seq` of `run` kept in the ledger.
pub(crate) fn ledger_name(run: &str, seq: u64) -> String {
    format!("{IN_LEDGER}{run}/{seq}")
}

/// The run and seq a `spill_path` names in the ledger, when it names one there.
pub(crate) fn in_ledger(path: &str) -> Option<(&str, i64)> {
    let (run, seq) = path.strip_prefix(IN_LEDGER)?.split_once('/')?;
    Some((run, seq.parse().ok()?))
}

/// Keep the full text of message `seq` of `run` in the ledger (inside the caller's
/// transaction, before its transcript row).
pub(crate) fn insert(db: &dyn Db, run: &str, seq: u64, text: &str) -> Result<(), LedgerError> {
    db.execute(
        "INSERT INTO spills (run_id, seq, text) VALUES (?1, ?2, ?3)",
        args![run, seq, text],
    )
    .ctx("keeping a spilled message in the ledger")
    .map(|_| ())
}

/// Why [`read`] found no text.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// The path is not one brood writes (the database is untrusted input): not
    /// followed.
    Untrusted(String),
    /// The file or the row is not there (deleted, or written on another machine):
    /// the named text, its path or name.
    Missing(String),
    /// The file or the row cannot be read.
    Unreadable(LedgerError),
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Untrusted(why) => f.write_str(why),
            ReadFailure::Missing(what) => write!(f, "{what}: not found"),
            ReadFailure::Unreadable(e) => write!(f, "{e}"),
        }
    }
}

/// The full text a `spill_path` names: its row in the ledger's `spills` table, or
/// its file under the spill directory (and nowhere else: not a symlink there).
pub(crate) fn read(db: &dyn Db, paths: &LedgerPaths, path: &str) -> Result<String, ReadFailure> {
    if let Some((run, seq)) = in_ledger(path) {
        let text = query_row(
            db,
            "SELECT text FROM spills WHERE run_id = ?1 AND seq = ?2",
            args![run, seq],
            |r| r.string(0),
        )
        .ctx("reading a spilled message from the ledger")
        .map_err(ReadFailure::Unreadable)?;
        return text.ok_or_else(|| ReadFailure::Missing(path.to_string()));
    }
    let file = paths
        .resolve_relative(path)
        .map_err(ReadFailure::Untrusted)?;
    read_file(&file).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return ReadFailure::Untrusted(format!(
                "spill path {path:?} is a symbolic link (a shipped or planted one points \
                 anywhere); not followed"
            ));
        }
        if e.kind() == std::io::ErrorKind::NotFound {
            return ReadFailure::Missing(file.display().to_string());
        }
        ReadFailure::Unreadable(LedgerError::io(&file, e))
    })
}

/// A spill file's text, its last component not followed when it is a symlink
/// (`O_NOFOLLOW`: the open fails with `ELOOP`); brood writes plain files only.
fn read_file(file: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    let mut text = String::new();
    opts.open(file)?.read_to_string(&mut text)?;
    Ok(text)
}

/// A content ready to store (borrowed when it was within the cap).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Capped<'a> {
    pub content: Cow<'a, Value>,
    pub truncated: bool,
    /// Size of the full text (the string's bytes, or the compact JSON's bytes).
    pub full_bytes: u64,
    /// The full text to spill, when `truncated`.
    pub spill_text: Option<String>,
    /// The content's compact JSON, when it was encoded to be measured and kept
    /// whole: what is stored, so it is not encoded a second time.
    pub encoded: Option<String>,
}

/// The full text of a content: a string as itself, anything else as compact JSON.
fn full_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Cap `content` to about `cap` bytes. `spill_rel` is where the full text will be,
/// quoted in the truncation note (asked only for a content that is cut).
pub(crate) fn cap<'a, R: AsRef<str>>(
    content: &'a Value,
    cap: usize,
    spill_rel: impl FnOnce() -> R,
) -> Capped<'a> {
    // A string's size is its length: no copy unless it is cut.
    let (len, json) = match content {
        Value::String(s) => (s.len(), None),
        other => {
            let t = other.to_string();
            (t.len(), Some(t))
        }
    };
    let full_bytes = len as u64;
    if len <= cap {
        return Capped {
            content: Cow::Borrowed(content),
            truncated: false,
            full_bytes,
            spill_text: None,
            encoded: json,
        };
    }
    let text = json.unwrap_or_else(|| full_text(content));
    let note = format!(
        "\n[… truncated by brood: {full_bytes} bytes in all; full text in {}]",
        spill_rel().as_ref()
    );
    let capped = match content {
        Value::String(s) => Value::String(format!("{}{note}", prefix(s, cap))),
        other => {
            let mut other = other.clone();
            let mut lens = Vec::new();
            string_lengths(&other, &mut lens);
            let limit = leaf_limit(lens, cap);
            let cut = cut_strings(&mut other, limit, &note);
            // Structure alone (keys, numbers, huge arrays) may still be far over the
            // cap; then keep a plain-text preview instead of the shape.
            let allowed = cap
                .saturating_mul(2)
                .saturating_add(cut.saturating_mul(note.len()));
            if other.to_string().len() > allowed {
                Value::String(format!("{}{note}", prefix(&text, cap)))
            } else {
                other
            }
        }
    };
    Capped {
        content: Cow::Owned(capped),
        truncated: true,
        full_bytes,
        spill_text: Some(text),
        encoded: None,
    }
}

fn string_lengths(value: &Value, out: &mut Vec<usize>) {
    match value {
        Value::String(s) => out.push(s.len()),
        Value::Array(items) => items.iter().for_each(|v| string_lengths(v, out)),
        Value::Object(map) => map.values().for_each(|v| string_lengths(v, out)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The largest per-string length `L` such that the strings, each cut to at most `L`
/// bytes, total at most `budget` ("water filling": short strings stay whole, the long
/// ones share what is left equally).
fn leaf_limit(mut lens: Vec<usize>, budget: usize) -> usize {
    if lens.iter().sum::<usize>() <= budget {
        return usize::MAX;
    }
    lens.sort_unstable();
    let mut remaining = budget;
    let n = lens.len();
    for (i, len) in lens.into_iter().enumerate() {
        let share = remaining / (n - i);
        if len > share {
            return share;
        }
        remaining -= len;
    }
    usize::MAX
}

/// Cut every string leaf longer than `limit` to `limit` bytes plus `note`. Returns how
/// many were cut.
fn cut_strings(value: &mut Value, limit: usize, note: &str) -> usize {
    match value {
        Value::String(s) if s.len() > limit => {
            *s = format!("{}{note}", prefix(s, limit));
            1
        }
        Value::Array(items) => items.iter_mut().map(|v| cut_strings(v, limit, note)).sum(),
        Value::Object(map) => map.values_mut().map(|v| cut_strings(v, limit, note)).sum(),
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    // Index 0 is a boundary, so the walk ends there at the latest.
    (0..=max)
        .rev()
        .find_map(|end| s.get(..end))
        .unwrap_or_default()
}

/// Write a spill file (the spill directory exists once the ledger is open).
pub(crate) fn write(path: &Path, text: &str) -> Result<(), LedgerError> {
    std::fs::write(path, text).map_err(|e| LedgerError::io(path, e))
}

/// Remove a spill file; a file already gone is not an error. Returns whether it existed.
pub(crate) fn remove(path: &Path) -> Result<bool, LedgerError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(LedgerError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_content_is_kept_as_is() {
        let msg = json!({"role": "tool", "content": "ok"});
        let c = cap(&msg, 100, || "x");
        assert!(!c.truncated);
        assert!(matches!(c.content, Cow::Borrowed(_)));
        assert_eq!(*c.content, msg);
        assert_eq!(c.spill_text, None);
        // Encoded once, to be measured; stored as it is.
        assert_eq!(
            c.encoded.as_deref(),
            Some(r#"{"role":"tool","content":"ok"}"#)
        );
    }

    #[test]
    fn long_string_is_cut_on_a_char_boundary_and_spilled_whole() {
        let text = "é".repeat(100); // 200 bytes
        let content = Value::String(text.clone());
        let c = cap(&content, 51, || "spill/r-0.txt");
        assert!(c.truncated);
        assert_eq!(c.full_bytes, 200);
        assert_eq!(c.spill_text.as_deref(), Some(text.as_str()));
        let s = c.content.as_str().unwrap();
        assert!(s.starts_with(&"é".repeat(25)));
        assert!(!s.starts_with(&"é".repeat(26)));
        assert!(s.contains("200 bytes in all; full text in spill/r-0.txt"));
    }

    #[test]
    fn object_keeps_its_shape_with_long_leaves_cut() {
        let big = "x".repeat(1000);
        let msg = json!({"role": "tool", "tool_call_id": "c1", "content": big});
        let c = cap(&msg, 100, || "s.txt");
        assert!(c.truncated);
        assert_eq!(c.content["role"], "tool");
        assert_eq!(c.content["tool_call_id"], "c1");
        let cut = c.content["content"].as_str().unwrap();
        assert!(cut.len() < 200, "{}", cut.len());
        assert!(cut.contains("full text in s.txt"));
        let spilled: Value = serde_json::from_str(c.spill_text.as_deref().unwrap()).unwrap();
        assert_eq!(spilled, msg);
    }

    #[test]
    fn several_long_leaves_share_the_budget_and_short_ones_stay_whole() {
        let msg = json!({"a": "y".repeat(500), "b": "short", "c": "z".repeat(900)});
        let c = cap(&msg, 105, || "s.txt");
        assert_eq!(c.content["b"], "short");
        let a = c.content["a"].as_str().unwrap();
        let z = c.content["c"].as_str().unwrap();
        assert!(a.starts_with(&"y".repeat(50)) && !a.starts_with(&"y".repeat(51)));
        assert!(z.starts_with(&"z".repeat(50)) && !z.starts_with(&"z".repeat(51)));
    }

    #[test]
    fn structure_over_the_cap_becomes_a_text_preview() {
        let nums: Vec<u64> = (0..10_000).collect();
        let content = json!(nums);
        let c = cap(&content, 100, || "s.txt");
        assert!(c.truncated);
        let s = c.content.as_str().unwrap();
        assert!(s.starts_with("[0,1,2,3"));
        assert!(s.len() < 300);
    }
}
