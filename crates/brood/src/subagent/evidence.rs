//! EVIDENCE citations: finding `path:start-end` references in a child's EVIDENCE
//! bullets and checking them against the workspace (the file exists inside the
//! workspace root, and the lines are within the file).
//!
//! Accepted citation forms: `path:12`, `path:12-40` (also with `–`), `path:L12-L40`,
//! `path:12:5` (the column is ignored), `path#L12-L40`, each optionally in backticks,
//! quotes or brackets. A path must contain `/` or `.` (or be a well-known
//! extension-less file such as `Makefile`), so `Step:1` is not taken for a citation.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// One EVIDENCE item: an optional `path:start-end` citation and what it shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The cited path as written (workspace-relative, or absolute inside it).
    pub path: Option<String>,
    /// First cited line (1-based).
    pub start: Option<u64>,
    /// Last cited line (inclusive; equals `start` for a single line).
    pub end: Option<u64>,
    /// The finding.
    pub note: String,
    /// `None` until checked (and for items without a citation).
    pub verified: Option<bool>,
    /// Why the check failed (or why it was not done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Evidence {
    /// One line: `path:start-end [verified] note`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Some(p) = &self.path {
            s.push_str(p);
            match (self.start, self.end) {
                (Some(a), Some(b)) if a != b => s.push_str(&format!(":{a}-{b}")),
                (Some(a), _) => s.push_str(&format!(":{a}")),
                _ => {}
            }
            match (self.verified, &self.reason) {
                (Some(true), _) => s.push_str(" [verified]"),
                (Some(false), Some(r)) => s.push_str(&format!(" [NOT verified: {r}]")),
                (Some(false), None) => s.push_str(" [NOT verified]"),
                (None, _) => {}
            }
            if !self.note.is_empty() {
                s.push(' ');
            }
        }
        s.push_str(&self.note);
        s
    }
}

/// Counts from [`verify_all`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceCheck {
    /// Items with a citation.
    pub checked: usize,
    /// Citations that matched the workspace.
    pub verified: usize,
    /// Citations that did not (missing file, lines out of range, outside the workspace).
    pub failed: usize,
}

const BARE_FILES: [&str; 8] = [
    "Makefile",
    "Dockerfile",
    "Justfile",
    "Rakefile",
    "Gemfile",
    "Procfile",
    "LICENSE",
    "Containerfile",
];

/// Parse one EVIDENCE item into evidence entries: one per citation (sharing the
/// note), or one without a citation.
pub fn parse_item(item: &str) -> Vec<Evidence> {
    let mut cites: Vec<(String, u64, u64)> = Vec::new();
    let mut leading_end = 0usize; // byte end of the citations that open the item
    let mut leading = true;
    let mut offset = 0usize;
    for token in item.split_inclusive(char::is_whitespace) {
        let tok_start = offset;
        offset += token.len();
        let word = token.trim();
        if word.is_empty() {
            continue;
        }
        match citation(word) {
            Some(c) => {
                cites.push(c);
                if leading {
                    leading_end = offset;
                }
            }
            None => {
                let sep = word
                    .trim_matches(|c: char| matches!(c, '-' | '–' | '—' | ':' | ',' | ';' | '|'));
                if !(sep.is_empty() || (leading && sep.eq_ignore_ascii_case("and"))) {
                    leading = false;
                }
                if leading && tok_start == leading_end {
                    leading_end = offset;
                }
            }
        }
    }
    // When the item opens with its citations, the note is what follows them;
    // otherwise the citation is part of a sentence and the whole item is the note.
    let note = if leading_end > 0 && !cites.is_empty() {
        // `leading_end` is a token's end offset in `item`: a char boundary.
        item.get(leading_end..)
            .unwrap_or_default()
            .trim()
            .trim_start_matches(|c: char| {
                matches!(c, '-' | '–' | '—' | ':' | ',' | ';' | '|') || c.is_whitespace()
            })
            .to_string()
    } else {
        item.trim().to_string()
    };
    if cites.is_empty() {
        return vec![Evidence {
            note,
            ..Default::default()
        }];
    }
    cites
        .into_iter()
        .map(|(path, start, end)| Evidence {
            path: Some(path),
            start: Some(start),
            end: Some(end),
            note: note.clone(),
            verified: None,
            reason: None,
        })
        .collect()
}

/// A citation in one whitespace-free word, if it is one.
fn citation(word: &str) -> Option<(String, u64, u64)> {
    let w = word.trim_matches(|c: char| {
        matches!(
            c,
            '`' | '"' | '\'' | '(' | ')' | '[' | ']' | '<' | '>' | '*' | '_' | ',' | ';'
        )
    });
    let w = w.trim_end_matches(['.', ':', ',', ';', ')', '`']);
    let (path, spec) = if let Some((p, s)) = w.split_once("#L") {
        (p, s)
    } else {
        // The first ':' followed by a line spec.
        let mut found = None;
        for (i, _) in w.match_indices(':') {
            let (path, colon_spec) = w.split_at_checked(i).unwrap_or((w, ""));
            let spec = colon_spec.strip_prefix(':').unwrap_or(colon_spec);
            if line_spec(spec).is_some() {
                found = Some((path, spec));
                break;
            }
        }
        found?
    };
    let (start, end) = line_spec(spec)?;
    if !path_like(path) {
        return None;
    }
    Some((path.to_string(), start, end))
}

/// `12`, `12-40`, `L12-L40`, `12–40`, `12:5` (column ignored).
fn line_spec(spec: &str) -> Option<(u64, u64)> {
    let num = |s: &str| -> Option<u64> {
        let s = s.trim_start_matches('L');
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let spec = spec.trim();
    for dash in ['-', '–', '—'] {
        if let Some((a, b)) = spec.split_once(dash) {
            return Some((num(a)?, num(b)?));
        }
    }
    if let Some((line, col)) = spec.split_once(':') {
        num(col)?;
        let l = num(line)?;
        return Some((l, l));
    }
    let l = num(spec)?;
    Some((l, l))
}

fn path_like(p: &str) -> bool {
    if p.is_empty() || p.contains("://") || p.chars().any(char::is_whitespace) {
        return false;
    }
    let name = p.rsplit('/').next().unwrap_or(p);
    p.contains('/') || (p.contains('.') && name.len() > 1) || BARE_FILES.contains(&name)
}

/// Check every cited evidence item against the workspace at `root`: the path must
/// stay inside the root (symlinks are followed and re-checked), be a file, and the
/// line range must lie within its line count. Marks each item verified or not, with
/// a reason for failures.
///
/// A report is model output, so the work is bounded: at most [`MAX_CITATIONS`]
/// citations are checked and at most [`MAX_BYTES_READ`] bytes read in all (the rest
/// stay unchecked, saying why), and each file's lines are counted once. Blocking
/// file I/O: call it off the async threads (`spawn_blocking`).
pub fn verify_all(items: &mut [Evidence], root: &Path) -> EvidenceCheck {
    verify_with(items, &|| crate::tool::Workspace::open(root))
}

/// [`verify_all`] in a workspace already open: the session's, whose tree its
/// children's tools read (opening it again resolved its root once more per child).
pub(crate) fn verify_in(
    items: &mut [Evidence],
    workspace: &crate::tool::Workspace,
) -> EvidenceCheck {
    verify_with(items, &|| Ok(workspace.clone()))
}

/// [`verify_all`] with the workspace from `open`, called for the first citation
/// only (a report citing nothing needs none).
fn verify_with(
    items: &mut [Evidence],
    open: &dyn Fn() -> std::io::Result<crate::tool::Workspace>,
) -> EvidenceCheck {
    let mut check = EvidenceCheck::default();
    // The same jail the tools use decides what is inside the workspace.
    let mut workspace = None;
    let mut budget = ReadBudget {
        left: MAX_BYTES_READ,
        lines: HashMap::new(),
    };
    for e in items.iter_mut() {
        let Some(path) = e.path.clone() else {
            e.verified = None;
            e.reason = Some("no path:line-range citation".into());
            continue;
        };
        if check.checked >= MAX_CITATIONS {
            e.verified = None;
            e.reason = Some(format!(
                "not checked: only the first {MAX_CITATIONS} citations are checked"
            ));
            continue;
        }
        check.checked += 1;
        let outcome = match workspace.get_or_insert_with(open) {
            Ok(root) => verify_one(root, &path, e.start, e.end, &mut budget),
            Err(err) => Err(format!("the workspace root cannot be opened: {err}")),
        };
        match outcome {
            Ok(()) => {
                check.verified += 1;
                e.verified = Some(true);
                e.reason = None;
            }
            Err(reason) => {
                check.failed += 1;
                e.verified = Some(false);
                e.reason = Some(reason);
            }
        }
    }
    check
}

fn verify_one(
    ws: &crate::tool::Workspace,
    path: &str,
    start: Option<u64>,
    end: Option<u64>,
    budget: &mut ReadBudget,
) -> Result<(), String> {
    let real = match ws.resolve(path) {
        Ok(p) => p,
        Err(crate::tool::ToolError::OutsideWorkspace { reason, .. }) => {
            return Err(format!("the path is outside the workspace ({reason})"))
        }
        Err(e) => return Err(e.to_string()),
    };
    if !real.exists() {
        return Err("no such file in the workspace".into());
    }
    if !real.is_file() {
        return Err("not a file".into());
    }
    let Some(start) = start else {
        return Ok(());
    };
    let end = end.unwrap_or(start);
    if start == 0 || end < start {
        return Err(format!(
            "{start}-{end} is not a line range (lines count from 1, start ≤ end)"
        ));
    }
    let lines = budget.lines_of(&real)?;
    if end > lines {
        return Err(format!(
            "lines {start}-{end} are out of range: the file has {lines} lines"
        ));
    }
    Ok(())
}

/// Citations checked per report; later ones stay unchecked.
pub const MAX_CITATIONS: usize = 64;

/// Bytes read in all to count lines for one report's citations.
pub const MAX_BYTES_READ: u64 = 64 * 1024 * 1024;

/// What is left to read for one report, and the line counts already known.
struct ReadBudget {
    left: u64,
    lines: HashMap<PathBuf, u64>,
}

impl ReadBudget {
    /// The file's line count: from the cache, else counted if the file fits in
    /// what is left to read.
    fn lines_of(&mut self, real: &Path) -> Result<u64, String> {
        if let Some(n) = self.lines.get(real) {
            return Ok(*n);
        }
        let size = std::fs::metadata(real)
            .map_err(|e| format!("cannot read: {e}"))?
            .len();
        if size > self.left {
            return Err(format!(
                "not checked: counting its lines would read past the {MAX_BYTES_READ}-byte \
                 cap on evidence checking"
            ));
        }
        let (lines, read) =
            count_lines(real, self.left).map_err(|e| format!("cannot read: {e}"))?;
        self.left = self.left.saturating_sub(read);
        self.lines.insert(real.to_path_buf(), lines);
        Ok(lines)
    }
}

/// Lines in a file: newline count, plus one for a last line without a newline.
/// Reads at most `cap` bytes (a file that grew past it is an error); returns the
/// count and the bytes read.
///
/// Through a `BufReader`, whose buffer is not zeroed: a `[0u8; 64 KiB]` on the
/// stack was cleared for every cited file, ~65 000 instructions a child report on
/// the fan-out benchmark (5 % of all the process's instructions at N = 100).
fn count_lines(path: &Path, cap: u64) -> std::io::Result<(u64, u64)> {
    let mut f = std::io::BufReader::with_capacity(64 * 1024, std::fs::File::open(path)?);
    let mut lines = 0u64;
    let mut read = 0u64;
    let mut last = b'\n';
    loop {
        let got = f.fill_buf()?;
        let n = got.len();
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > cap {
            return Err(std::io::Error::other(
                "the file grew past the evidence-checking cap while being read",
            ));
        }
        lines += got.iter().filter(|b| **b == b'\n').count() as u64;
        last = got.last().copied().unwrap_or(last);
        f.consume(n);
    }
    if last != b'\n' {
        lines += 1;
    }
    Ok((lines, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(item: &str) -> Evidence {
        let mut v = parse_item(item);
        assert_eq!(v.len(), 1, "{item}: {v:?}");
        v.remove(0)
    }

    #[test]
    fn citation_forms() {
        let cases = [
            (
                "`src/a.rs:10-20` — parses config",
                "src/a.rs",
                10,
                20,
                "parses config",
            ),
            (
                "src/a.rs:7: the entry point",
                "src/a.rs",
                7,
                7,
                "the entry point",
            ),
            (
                "crates/x/lib.rs:L3-L9 - module root",
                "crates/x/lib.rs",
                3,
                9,
                "module root",
            ),
            ("README.md#L1-L4 intro", "README.md", 1, 4, "intro"),
            ("src/a.rs:12:5 the call", "src/a.rs", 12, 12, "the call"),
            ("Makefile:3–5 targets", "Makefile", 3, 5, "targets"),
        ];
        for (item, path, s, e, note) in cases {
            let ev = one(item);
            assert_eq!(ev.path.as_deref(), Some(path), "{item}");
            assert_eq!((ev.start, ev.end), (Some(s), Some(e)), "{item}");
            assert_eq!(ev.note, note, "{item}");
        }
    }

    #[test]
    fn not_citations() {
        for item in [
            "Step:1 was to read",
            "see https://x.io:443/a for more",
            "time 10:30 today",
        ] {
            let ev = one(item);
            assert_eq!(ev.path, None, "{item}");
            assert_eq!(ev.note, item);
        }
    }

    #[test]
    fn mid_sentence_citation_keeps_whole_text_and_several_citations_split() {
        let ev = one("Parsing happens in src/cfg.rs:4-9 via serde");
        assert_eq!(ev.path.as_deref(), Some("src/cfg.rs"));
        assert_eq!(ev.note, "Parsing happens in src/cfg.rs:4-9 via serde");
        let v = parse_item("`a.rs:1-2`, `b/c.rs:5` and d.rs:9 — all load the file");
        let paths: Vec<_> = v.iter().map(|e| e.path.clone().unwrap()).collect();
        assert_eq!(paths, ["a.rs", "b/c.rs", "d.rs"]);
        assert!(v.iter().all(|e| e.note == "all load the file"), "{v:?}");
    }

    #[test]
    fn line_counting() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for (text, n) in [("", 0), ("a", 1), ("a\n", 1), ("a\nb", 2), ("a\nb\n\n", 3)] {
            std::fs::write(&p, text).unwrap();
            assert_eq!(count_lines(&p, u64::MAX).unwrap().0, n, "{text:?}");
        }
    }
}
