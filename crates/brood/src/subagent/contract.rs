//! The output contract: every child ends its work with five sections — SUMMARY,
//! CHANGES, EVIDENCE, RISKS, BLOCKERS. This module holds the instruction text given
//! to children, the tolerant parser that turns a final answer into a
//! [`ParsedResult`], the one-shot repair prompt for answers missing sections, and the
//! capped rendering that goes back into the parent's context.
//!
//! Parsing accepts the usual ways models write headings: `SUMMARY:`, `## Summary`,
//! `**SUMMARY:**`, `**Summary**:`, with the content inline or on the following lines.
//! Headings inside fenced code blocks are ignored. If SUMMARY appears more than once,
//! the report starts at the last one (earlier text is drafts or narration). A section
//! whose content is just "None." (or "N/A", "nothing", …) is present and empty.
//! Checking EVIDENCE citations against the workspace lives in [`super::evidence`].

use super::evidence::EvidenceCheck;
use super::evidence::{self, Evidence};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// One section of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// What the child did, in a few sentences.
    Summary,
    /// The changes it made, one per item.
    Changes,
    /// `path:line-range` citations backing its claims.
    Evidence,
    /// What could be wrong or was not checked.
    Risks,
    /// What stopped it.
    Blockers,
}

impl Section {
    /// The five sections, in the order the contract lists them.
    pub const ALL: [Section; 5] = [
        Section::Summary,
        Section::Changes,
        Section::Evidence,
        Section::Risks,
        Section::Blockers,
    ];

    /// The heading, uppercase.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Summary => "SUMMARY",
            Section::Changes => "CHANGES",
            Section::Evidence => "EVIDENCE",
            Section::Risks => "RISKS",
            Section::Blockers => "BLOCKERS",
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child's final answer, split into the contract's fields. Serializable: it is
/// stored in the ledger as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedResult {
    /// The SUMMARY text.
    pub summary: String,
    /// The CHANGES items.
    pub changes: Vec<String>,
    /// The EVIDENCE items, with their citations.
    pub evidence: Vec<Evidence>,
    /// The RISKS items.
    pub risks: Vec<String>,
    /// The BLOCKERS items.
    pub blockers: Vec<String>,
    /// Sections that did not appear at all (a section saying "None." is not missing).
    pub missing: Vec<Section>,
    /// Text before the first heading, kept so nothing the child said is lost.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub preamble: String,
}

impl ParsedResult {
    /// All five sections were present.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }
}

const INSTRUCTIONS: &str = "\
## Reporting back
The parent and a parser read your final message. End it with these five sections, in \
order, each heading at the start of a line:

SUMMARY: a short paragraph: what you did and what came of it.
CHANGES: a bullet per file created, edited or deleted, and how; \"None.\" if none.
EVIDENCE: a bullet per finding: `path:start-end` (relative path, line range) of lines \
you read (citations are checked), then what they show.
RISKS: what may be wrong or fragile, to double-check; \"None.\" if nothing.
BLOCKERS: what kept you from finishing; \"None.\" if nothing.

Write nothing after BLOCKERS.";

/// The instructions that ask a child to end with the five sections.
pub fn instructions() -> &'static str {
    INSTRUCTIONS
}

/// The message for the single format-repair turn, naming the missing sections.
pub fn repair_prompt(missing: &[Section]) -> String {
    let names: Vec<&str> = if missing.is_empty() {
        Section::ALL.iter().map(|s| s.as_str()).collect()
    } else {
        missing.iter().map(|s| s.as_str()).collect()
    };
    format!(
        "Your last message is not in the required report format: {} {} missing. \
         Send the complete report once more, based only on the work you have already \
         done: all five sections SUMMARY, CHANGES, EVIDENCE, RISKS and BLOCKERS, in that \
         order, each heading at the start of its own line. Write \"None.\" under a \
         section with nothing to report. Do not call tools or start new work.",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" }
    )
}

/// Split a final answer into the contract's fields. Never fails: what is not found
/// is listed in `missing`.
pub fn parse(text: &str) -> ParsedResult {
    let lines: Vec<&str> = text.lines().collect();
    let mut headers: Vec<(usize, Section, String)> = Vec::new();
    let mut in_fence = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            if let Some((s, rest)) = heading(line) {
                headers.push((i, s, rest.to_string()));
            }
        }
    }
    let start = headers
        .iter()
        .rposition(|(_, s, _)| *s == Section::Summary)
        .unwrap_or(0);
    let headers = headers.get(start..).unwrap_or_default();

    let mut content: [Option<Vec<String>>; 5] = Default::default();
    let first_line = headers.first().map_or(lines.len(), |(i, _, _)| *i);
    let preamble = lines
        .get(..first_line)
        .unwrap_or_default()
        .join("\n")
        .trim()
        .to_string();
    // `content` has a slot per section, indexed by its discriminant.
    for (n, (i, s, rest)) in headers.iter().enumerate() {
        let end = headers.get(n + 1).map_or(lines.len(), |(j, _, _)| *j);
        let Some(slot) = content.get_mut(*s as usize) else {
            continue;
        };
        let slot = slot.get_or_insert_with(Vec::new);
        if !rest.trim().is_empty() {
            slot.push(rest.trim().to_string());
        }
        let body = lines.get(i + 1..end).unwrap_or_default();
        slot.extend(body.iter().map(|l| l.to_string()));
    }

    let missing = Section::ALL
        .into_iter()
        .filter(|s| content.get(*s as usize).is_none_or(Option::is_none))
        .collect();
    let take = |s: Section| {
        content
            .get(s as usize)
            .cloned()
            .flatten()
            .unwrap_or_default()
    };
    let summary = {
        let text = take(Section::Summary).join("\n").trim().to_string();
        if is_none_text(&text) {
            String::new()
        } else {
            text
        }
    };
    ParsedResult {
        summary,
        changes: items(&take(Section::Changes)),
        evidence: items(&take(Section::Evidence))
            .iter()
            .flat_map(|item| evidence::parse_item(item))
            .collect(),
        risks: items(&take(Section::Risks)),
        blockers: items(&take(Section::Blockers)),
        missing,
        preamble,
    }
}

/// Recognise a section heading; returns the section and any inline content.
fn heading(line: &str) -> Option<(Section, &str)> {
    let mut t = line.trim();
    t = t.trim_start_matches('#').trim_start();
    let mut bold = false;
    for marker in ["**", "__"] {
        if let Some(rest) = t.strip_prefix(marker) {
            t = rest;
            bold = true;
            break;
        }
    }
    let word_len = t
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(t.len());
    let (word, mut rest) = t.split_at_checked(word_len)?;
    let section = Section::ALL
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(word))?;
    let mut colon = false;
    if let Some(r) = rest.strip_prefix(':') {
        rest = r;
        colon = true;
    }
    if bold {
        rest = rest
            .strip_prefix("**")
            .or_else(|| rest.strip_prefix("__"))
            .unwrap_or(rest);
    }
    if let Some(r) = rest.strip_prefix(':') {
        rest = r;
        colon = true;
    }
    let rest = rest.trim();
    // Inline content needs a colon (`Risks: flaky`), so prose such as
    // "Evidence suggests …" is not taken for a heading.
    let accepted = rest.is_empty() || colon;
    accepted.then_some((section, rest))
}

/// Whether a section's text means "nothing".
fn is_none_text(text: &str) -> bool {
    let t = text
        .trim()
        .trim_end_matches(['.', '!'])
        .trim()
        .to_ascii_lowercase();
    let t = t.trim_matches(|c| c == '*' || c == '_');
    if matches!(
        t,
        "none"
            | "(none)"
            | "n/a"
            | "na"
            | "nothing"
            | "-"
            | "—"
            | "no"
            | "none so far"
            | "none found"
    ) || t.starts_with("no changes")
        || t.starts_with("no blockers")
        || t.starts_with("no risks")
    {
        return t.len() < 40;
    }
    // "None (read-only task)"
    t.strip_prefix("none (")
        .is_some_and(|r| r.ends_with(')') && r.len() < 60)
}

/// Split section lines into items: bullets start items; other lines continue the
/// current item; blank lines end it. A single "None." item means no items.
fn items(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in lines {
        let t = line.trim();
        if t.is_empty() {
            out.extend(current.take());
            continue;
        }
        if let Some(body) = strip_bullet(t) {
            out.extend(current.take());
            current = Some(body.trim().to_string());
        } else if let Some(c) = current.as_mut() {
            c.push(' ');
            c.push_str(t);
        } else {
            current = Some(t.to_string());
        }
    }
    out.extend(current);
    out.retain(|i| !i.is_empty());
    if matches!(out.as_slice(), [only] if is_none_text(only)) {
        out.clear();
    }
    out
}

fn strip_bullet(t: &str) -> Option<&str> {
    for b in ["- ", "* ", "+ ", "• "] {
        if let Some(r) = t.strip_prefix(b) {
            return Some(r);
        }
    }
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && digits <= 3 {
        let r = t.get(digits..).unwrap_or_default();
        if let Some(r) = r.strip_prefix(". ").or_else(|| r.strip_prefix(") ")) {
            return Some(r);
        }
    }
    None
}

/// Check each EVIDENCE citation of `result` against the workspace at `root` and
/// mark it verified or not (see [`super::evidence::verify_all`]).
pub fn verify_evidence(result: &mut ParsedResult, root: &Path) -> EvidenceCheck {
    evidence::verify_all(&mut result.evidence, root)
}

/// What goes back into the parent's context: the parsed sections, at most
/// `cap_bytes` bytes (cut on a character boundary), ending with a pointer to
/// `transcript_handle` when anything was cut. The pointer itself is always kept, so
/// a cap smaller than it (under ~120 bytes) yields just the pointer.
pub fn render_for_parent(
    result: &ParsedResult,
    cap_bytes: usize,
    transcript_handle: &str,
) -> String {
    let full = render(result);
    if full.len() <= cap_bytes {
        return full;
    }
    let total = full.len();
    let footer = |shown: usize| {
        format!(
            "\n[… cut: {shown} of {total} bytes shown; read the rest with handle_read on handle \"{transcript_handle}\"]"
        )
    };
    // `shown` never has more digits than `total`, so this reserves enough room.
    let budget = cap_bytes.saturating_sub(footer(total).len());
    let head = full
        .get(..floor_char_boundary(&full, budget))
        .unwrap_or_default()
        .trim_end();
    format!("{head}{}", footer(head.len()))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn render(r: &ParsedResult) -> String {
    let mut out = String::new();
    let summary = if r.summary.is_empty() && r.missing.contains(&Section::Summary) {
        r.preamble.as_str()
    } else {
        r.summary.as_str()
    };
    out.push_str("SUMMARY: ");
    out.push_str(if summary.is_empty() { "None." } else { summary });
    out.push('\n');
    list(&mut out, Section::Changes, &r.changes);
    out.push_str("EVIDENCE:");
    if r.evidence.is_empty() {
        out.push_str(" None.\n");
    } else {
        out.push('\n');
        for e in &r.evidence {
            out.push_str("- ");
            out.push_str(&e.render());
            out.push('\n');
        }
    }
    list(&mut out, Section::Risks, &r.risks);
    list(&mut out, Section::Blockers, &r.blockers);
    if !r.missing.is_empty() {
        let names: Vec<&str> = r.missing.iter().map(|s| s.as_str()).collect();
        out.push_str(&format!(
            "(the child's report lacked: {})\n",
            names.join(", ")
        ));
    }
    out.trim_end().to_string()
}

fn list(out: &mut String, s: Section, items: &[String]) {
    out.push_str(s.as_str());
    out.push(':');
    if items.is_empty() {
        out.push_str(" None.\n");
        return;
    }
    out.push('\n');
    for i in items {
        out.push_str("- ");
        out.push_str(i);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_forms() {
        assert_eq!(heading("SUMMARY:"), Some((Section::Summary, "")));
        assert_eq!(heading("## Summary"), Some((Section::Summary, "")));
        assert_eq!(
            heading("**SUMMARY:** did it"),
            Some((Section::Summary, "did it"))
        );
        assert_eq!(heading("**Risks**: flaky"), Some((Section::Risks, "flaky")));
        assert_eq!(heading("### EVIDENCE"), Some((Section::Evidence, "")));
        assert_eq!(heading("Evidence suggests the cache is cold"), None);
        assert_eq!(heading("Summaries are nice"), None);
        assert_eq!(heading("- SUMMARY: a bullet"), None);
    }

    #[test]
    fn none_texts() {
        for t in [
            "None.",
            "none",
            "N/A",
            "Nothing.",
            "*None*",
            "None (read-only task)",
            "No changes.",
        ] {
            assert!(is_none_text(t), "{t}");
        }
        for t in [
            "None of the tests failed, but the fixture is stale and will break soon",
            "nonexistent",
        ] {
            assert!(!is_none_text(t), "{t}");
        }
    }

    #[test]
    fn items_split_on_bullets_and_blank_lines() {
        let lines: Vec<String> = [
            "- one",
            "  continued",
            "2. two",
            "",
            "three",
            "still three",
            "",
            "* four",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            items(&lines),
            vec!["one continued", "two", "three still three", "four"]
        );
    }

    #[test]
    fn char_boundary_floor() {
        let s = "aé";
        assert_eq!(floor_char_boundary(s, 2), 1);
        assert_eq!(floor_char_boundary(s, 9), 3);
    }
}
