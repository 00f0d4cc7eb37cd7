//! The output contract through the public API: parsing the five sections in the
//! forms models write them, the repair prompt, checking EVIDENCE citations against a
//! workspace, and the capped rendering handed back to the parent.

use brood::subagent::contract::{self, parse, render_for_parent, repair_prompt, verify_evidence};
use brood::subagent::{ParsedResult, Section};
use std::path::Path;

const PLAIN: &str = "\
I looked around first.

SUMMARY: Found the config loader and its two callers.
CHANGES: None.
EVIDENCE:
- `src/config.rs:10-24` — parses the TOML file
- src/main.rs:3 calls it on startup
RISKS:
- The loader ignores env overrides;
  callers may rely on them.
BLOCKERS: None.
";

#[test]
fn plain_headings_with_inline_content() {
    let r = parse(PLAIN);
    assert!(r.is_complete(), "{:?}", r.missing);
    assert_eq!(r.summary, "Found the config loader and its two callers.");
    assert!(r.changes.is_empty(), "None. is an empty list");
    assert!(r.blockers.is_empty());
    assert_eq!(
        r.risks,
        ["The loader ignores env overrides; callers may rely on them."]
    );
    assert_eq!(r.preamble, "I looked around first.");
    assert_eq!(r.evidence.len(), 2);
    let e = &r.evidence[0];
    assert_eq!(
        (e.path.as_deref(), e.start, e.end),
        (Some("src/config.rs"), Some(10), Some(24))
    );
    assert_eq!(e.note, "parses the TOML file");
    assert_eq!(e.verified, None, "not checked yet");
    let e = &r.evidence[1];
    assert_eq!(
        (e.path.as_deref(), e.start, e.end),
        (Some("src/main.rs"), Some(3), Some(3))
    );
    assert_eq!(e.note, "calls it on startup");
}

#[test]
fn markdown_heading_and_bold_forms() {
    let forms = [
        "## SUMMARY\nDid it.\n## CHANGES\n- a.rs: added x\n## EVIDENCE\n- a.rs:1-2 x\n## RISKS\nNone\n## BLOCKERS\nNone",
        "**SUMMARY:** Did it.\n**CHANGES:**\n- a.rs: added x\n**EVIDENCE:**\n- a.rs:1-2 x\n**RISKS:** None.\n**BLOCKERS:** None.",
        "**Summary**: Did it.\n**Changes**:\n1. a.rs: added x\n**Evidence**:\n* a.rs:1-2 x\n**Risks**: N/A\n**Blockers**: nothing",
        "# Summary\n\nDid it.\n\n# Changes\n\n- a.rs: added x\n\n# Evidence\n\n- a.rs:1-2 x\n\n# Risks\n\n- None.\n\n# Blockers\n\n(none)\n",
    ];
    for text in forms {
        let r = parse(text);
        assert!(r.is_complete(), "{text}\n{:?}", r.missing);
        assert_eq!(r.summary, "Did it.", "{text}");
        assert_eq!(r.changes, ["a.rs: added x"], "{text}");
        assert_eq!(r.evidence.len(), 1, "{text}");
        assert_eq!(r.evidence[0].path.as_deref(), Some("a.rs"));
        assert!(r.risks.is_empty() && r.blockers.is_empty(), "{text}: {r:?}");
    }
}

#[test]
fn missing_sections_are_listed_and_present_none_is_not_missing() {
    let r = parse("SUMMARY: half done\nRISKS: None.\n");
    assert_eq!(
        r.missing,
        [Section::Changes, Section::Evidence, Section::Blockers]
    );
    assert!(!r.is_complete());
    let r = parse("I did some things but forgot the format.");
    assert_eq!(r.missing, Section::ALL);
    assert_eq!(r.summary, "");
    assert_eq!(r.preamble, "I did some things but forgot the format.");
}

#[test]
fn last_summary_starts_the_report_and_fences_are_skipped() {
    let text = "\
SUMMARY: draft that I abandoned
EVIDENCE: a.rs:1 draft
Now the real report.
```
SUMMARY: inside a code block
```
SUMMARY: final
CHANGES: None.
EVIDENCE: None.
RISKS:
```text
BLOCKERS: this is log output, not a heading
```
BLOCKERS: None.";
    let r = parse(text);
    assert!(r.is_complete(), "{:?}", r.missing);
    assert_eq!(r.summary, "final");
    assert!(
        r.evidence.is_empty(),
        "the draft's evidence is not part of the report"
    );
    assert!(r.blockers.is_empty());
    assert!(
        r.risks.iter().any(|x| x.contains("this is log output")),
        "{:?}",
        r.risks
    );
    assert!(r.preamble.contains("Now the real report."));
}

#[test]
fn prose_starting_with_a_section_word_is_not_a_heading() {
    let r = parse("SUMMARY: ok\nEvidence suggests the cache is cold.\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.");
    assert_eq!(r.summary, "ok\nEvidence suggests the cache is cold.");
}

#[test]
fn result_round_trips_through_json() {
    let r = parse(PLAIN);
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"missing\":[]"), "{json}");
    let back: ParsedResult = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
    let missing = serde_json::to_value(parse("SUMMARY: x").missing).unwrap();
    assert_eq!(
        missing,
        serde_json::json!(["changes", "evidence", "risks", "blockers"])
    );
}

#[test]
fn instructions_and_repair_prompt_name_the_sections() {
    let ins = contract::instructions();
    let mut at = 0;
    for s in Section::ALL {
        let pos = ins[at..]
            .find(&format!("{s}:"))
            .unwrap_or_else(|| panic!("{s} missing or out of order"));
        at += pos;
    }
    let p = repair_prompt(&[Section::Evidence, Section::Blockers]);
    assert!(p.contains("EVIDENCE, BLOCKERS are missing"), "{p}");
    let p = repair_prompt(&[Section::Risks]);
    assert!(p.contains("RISKS is missing"), "{p}");
    assert!(p.contains("Do not call tools"), "{p}");
}

// ---------------------------------------------------------------- evidence check

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    let ten: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("src/lib.rs"), ten).unwrap();
    std::fs::write(dir.path().join("src/short.rs"), "a\nb").unwrap();
    dir
}

fn check(root: &Path, item: &str) -> (Option<bool>, Option<String>) {
    let mut r = parse(&format!("SUMMARY: s\nEVIDENCE:\n- {item}"));
    verify_evidence(&mut r, root);
    assert_eq!(r.evidence.len(), 1);
    (r.evidence[0].verified, r.evidence[0].reason.clone())
}

#[test]
fn evidence_in_range_is_verified_and_out_of_range_is_not() {
    let ws = workspace();
    let root = ws.path();
    assert_eq!(
        check(root, "src/lib.rs:1-10 whole file"),
        (Some(true), None)
    );
    assert_eq!(check(root, "./src/lib.rs:4 one line").0, Some(true));
    assert_eq!(
        check(root, "src/short.rs:2 last line without newline").0,
        Some(true)
    );
    let abs = format!("{}:2-3 absolute inside", root.join("src/lib.rs").display());
    assert_eq!(check(root, &abs).0, Some(true));

    let (v, why) = check(root, "src/lib.rs:8-11 one too far");
    assert_eq!(v, Some(false));
    assert!(why.unwrap().contains("10 lines"));
    assert_eq!(check(root, "src/short.rs:3 past the end").0, Some(false));
    let (v, why) = check(root, "src/lib.rs:0-2 zero");
    assert_eq!(v, Some(false));
    assert!(why.unwrap().contains("count from 1"));
    assert_eq!(check(root, "src/lib.rs:5-2 backwards").0, Some(false));
}

#[test]
fn missing_files_directories_and_escapes_are_not_verified() {
    let ws = workspace();
    let root = ws.path();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "1\n2\n3\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("src/link.txt"))
        .unwrap();

    let (v, why) = check(root, "src/nope.rs:1 gone");
    assert_eq!(v, Some(false));
    assert!(why.unwrap().contains("no such file"));
    assert_eq!(check(root, "src/:1 a directory").0, Some(false));
    let esc = format!(
        "../{}/secret.txt:1-2 climbing out",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    let (v, why) = check(root, &esc);
    assert_eq!(v, Some(false));
    assert!(why.unwrap().contains("outside the workspace"));
    let abs = format!(
        "{}:1 absolute outside",
        outside.path().join("secret.txt").display()
    );
    let (v, why) = check(root, &abs);
    assert_eq!(v, Some(false));
    assert!(why.unwrap().contains("outside the workspace"));
    #[cfg(unix)]
    {
        let (v, why) = check(root, "src/link.txt:1 through a symlink");
        assert_eq!(v, Some(false));
        assert!(why.unwrap().contains("symlink"));
    }
}

#[cfg(unix)]
#[test]
fn absolute_path_through_another_spelling_of_the_root_is_verified() {
    let ws = workspace();
    let elsewhere = tempfile::tempdir().unwrap();
    let alias = elsewhere.path().join("ws-alias");
    std::os::unix::fs::symlink(ws.path(), &alias).unwrap();
    let item = format!(
        "{}:2 via a symlinked root",
        alias.join("src/lib.rs").display()
    );
    assert_eq!(check(ws.path(), &item), (Some(true), None));
}

#[test]
fn verify_counts_and_uncited_items() {
    let ws = workspace();
    let mut r =
        parse("SUMMARY: s\nEVIDENCE:\n- src/lib.rs:1 ok\n- src/lib.rs:99 bad\n- a general remark");
    let c = verify_evidence(&mut r, ws.path());
    assert_eq!((c.checked, c.verified, c.failed), (2, 1, 1));
    assert_eq!(r.evidence[2].verified, None);
    let out = render_for_parent(&r, 4096, "h");
    assert!(out.contains("src/lib.rs:1 [verified] ok"), "{out}");
    assert!(
        out.contains("src/lib.rs:99 [NOT verified: lines 99-99 are out of range"),
        "{out}"
    );
}

// ---------------------------------------------------------------- rendering

#[test]
fn small_results_render_whole_without_a_handle() {
    let out = render_for_parent(&parse(PLAIN), 4096, "transcript://run-1");
    assert!(out.starts_with("SUMMARY: Found the config loader"));
    for s in Section::ALL {
        assert!(out.contains(&format!("{s}:")), "{out}");
    }
    assert!(!out.contains("transcript://run-1"));
}

#[test]
fn large_results_are_capped_on_a_char_boundary_with_the_handle() {
    // Multi-byte characters everywhere so a byte cut would land inside one.
    let long: String = "é漢🦀".repeat(2000);
    let text = format!(
        "SUMMARY: {long}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: stuck on {long}"
    );
    let r = parse(&text);
    for cap in [4096usize, 1000, 301, 300, 299] {
        let out = render_for_parent(&r, cap, "transcript://run-7");
        assert!(out.len() <= cap, "cap {cap}: {} bytes", out.len());
        assert!(out.starts_with("SUMMARY: é漢🦀"));
        assert!(
            out.contains("handle_read") && out.contains("transcript://run-7"),
            "{out}"
        );
        let full_len = render_for_parent(&r, usize::MAX, "x").len();
        assert!(out.contains(&format!("of {full_len} bytes shown")), "{out}");
    }
}

#[test]
fn missing_summary_falls_back_to_the_preamble_and_says_what_was_missing() {
    let out = render_for_parent(&parse("Just prose, no format."), 4096, "h");
    assert!(out.starts_with("SUMMARY: Just prose, no format."), "{out}");
    assert!(
        out.contains("lacked: SUMMARY, CHANGES, EVIDENCE, RISKS, BLOCKERS"),
        "{out}"
    );
}

/// A report is model output: checking it is bounded. Past the first
/// `MAX_CITATIONS` citations nothing is checked, and a file larger than the byte
/// cap is not read (each says why, neither counts as verified).
#[test]
fn evidence_checking_is_capped_in_citations_and_bytes() {
    use brood::subagent::evidence::{MAX_BYTES_READ, MAX_CITATIONS};
    let ws = workspace();
    let items: String = (0..MAX_CITATIONS + 36)
        .map(|i| format!("- src/lib.rs:{} line\n", i % 10 + 1))
        .collect();
    let mut r = parse(&format!("SUMMARY: s\nEVIDENCE:\n{items}"));
    let counts = verify_evidence(&mut r, ws.path());
    assert_eq!(r.evidence.len(), MAX_CITATIONS + 36);
    assert_eq!(
        (counts.checked, counts.verified),
        (MAX_CITATIONS, MAX_CITATIONS)
    );
    for e in &r.evidence[MAX_CITATIONS..] {
        assert_eq!(e.verified, None);
        assert!(
            e.reason.as_deref().unwrap_or("").contains("not checked"),
            "{e:?}"
        );
    }

    // A sparse file past the byte cap: refused by its size, never read.
    let big = std::fs::File::create(ws.path().join("big.log")).unwrap();
    big.set_len(MAX_BYTES_READ + 1).unwrap();
    let (verified, reason) = check(ws.path(), "big.log:1 the start");
    assert_eq!(verified, Some(false));
    assert!(
        reason.as_deref().unwrap_or("").contains("cap"),
        "{reason:?}"
    );
}
