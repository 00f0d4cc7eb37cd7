//! The documentation stays true: every `brood …` command shown in README.md and
//! docs/*.md parses with the real binary (`BROOD_PARSE_ONLY=1`: parse, do nothing),
//! every flag they name exists, every config key and `BROOD_*` variable they mention
//! is accepted, and every key, variable and command brood accepts is documented.
//! Each failure names the file and line, or the undocumented name, and what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and docs/*.md: (name, text).
fn docs() -> Vec<(String, String)> {
    let mut out = vec![(
        "README.md".to_string(),
        std::fs::read_to_string(root().join("README.md")).unwrap(),
    )];
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    entries.sort();
    for p in entries {
        let name = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
        out.push((name, std::fs::read_to_string(&p).unwrap()));
    }
    out
}

/// The binary in an empty HOME and workspace, with `env`.
fn brood(args: &[String], env: &[(&str, &str)], home: &Path) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_brood"));
    cmd.args(args)
        .current_dir(home)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run brood");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A subcommand's children and flags, from its `--help`.
#[derive(Debug, Default)]
struct HelpNode {
    commands: BTreeMap<String, HelpNode>,
    flags: BTreeSet<String>,
}

fn help_tree(path: &[String], home: &Path) -> HelpNode {
    let mut args = path.to_vec();
    args.push("--help".into());
    let (code, stdout, stderr) = brood(&args, &[], home);
    assert_eq!(code, Some(0), "brood {args:?}: {stderr}");
    let mut node = HelpNode::default();
    let mut in_commands = false;
    for line in stdout.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_commands = false;
        }
        if in_commands {
            if let Some(name) = line.split_whitespace().next() {
                if name != "help" {
                    let mut sub = path.to_vec();
                    sub.push(name.to_string());
                    node.commands
                        .insert(name.to_string(), help_tree(&sub, home));
                }
            }
        }
        for word in line.split(|c: char| c.is_whitespace() || c == ',') {
            if let Some(flag) = word.strip_prefix("--") {
                let flag: String = flag
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !flag.is_empty() {
                    node.flags.insert(format!("--{flag}"));
                }
            }
        }
    }
    node
}

/// Shell-like words: (raw, unquoted).
fn words(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (mut raw, mut val, mut quote, mut any) = (String::new(), String::new(), None, false);
    for c in s.chars() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push((std::mem::take(&mut raw), std::mem::take(&mut val)));
                    any = false;
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                raw.push(c);
                any = true;
            }
            (Some(q), c) if c == q => {
                quote = None;
                raw.push(c);
            }
            (_, c) => {
                raw.push(c);
                val.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push((raw, val));
    }
    out
}

/// Prose phrases that look like commands but are not (with why).
const NOT_COMMANDS: &[(&str, &str)] =
    &[("brood received", "the reason a signal leaves in the ledger")];

/// One `brood …` command found in the docs.
struct Shown {
    at: String,
    text: String,
    /// From a code block (must parse whole) or inline / a synopsis (a mention).
    mention: bool,
}

/// The `brood …` part of a line, if it invokes brood.
fn invocation(line: &str) -> Option<String> {
    let line = line.trim().trim_start_matches("$ ");
    if let Some(i) = line.find("brood-cli -- ") {
        return Some(format!("brood {}", &line[i + "brood-cli -- ".len()..]));
    }
    // Skip `VAR=value` assignments before the command.
    let mut rest = line;
    loop {
        let first = rest.split_whitespace().next()?;
        if first.contains('=') && !first.starts_with('-') {
            rest = rest[first.len()..].trim_start();
        } else {
            break;
        }
    }
    rest.starts_with("brood ").then(|| rest.to_string())
}

/// `brood a ; brood b` and `brood a && brood b`: each command that is brood's.
fn split_list(cmd: &str) -> Vec<String> {
    cmd.split(" ; ")
        .flat_map(|p| p.split(" && "))
        .map(str::trim)
        .filter(|p| p.starts_with("brood "))
        .map(str::to_string)
        .collect()
}

fn shown_commands() -> Vec<Shown> {
    let mut out = Vec::new();
    for (name, text) in docs() {
        let mut fence = false;
        // Inside a paragraph that calls something planned, commands need not exist.
        let mut planned = false;
        let mut prompted = false;
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let at = format!("{name}:{}", i + 1);
            i += 1;
            // A ````markdown quote of another doc is read as prose with its fences.
            let t = line.trim_start();
            if t.starts_with("```") && !t.starts_with("````") {
                fence = !fence;
                // A block that shows a session (`$ brood …` then its output): only
                // the `$` lines are commands.
                prompted = fence
                    && lines[i..]
                        .iter()
                        .take_while(|l| !l.trim_start().starts_with("```"))
                        .any(|l| l.trim_start().starts_with("$ "));
                continue;
            }
            if t.is_empty() {
                planned = false;
            }
            planned |= line.to_ascii_lowercase().contains("planned");
            if fence && prompted && !t.starts_with("$ ") {
                continue;
            }
            if fence {
                // Columns after a command (a description) are two or more spaces away.
                let line = match t.find("  ") {
                    Some(i) => &t[..i],
                    None => t,
                };
                if let Some(mut cmd) = invocation(line) {
                    // A synopsis continued on indented lines.
                    while i < lines.len() && lines[i].trim_start().starts_with("[-") {
                        cmd.push(' ');
                        cmd.push_str(lines[i].trim());
                        i += 1;
                    }
                    let mention = cmd.contains('[');
                    for piece in split_list(&cmd) {
                        out.push(Shown {
                            at: at.clone(),
                            text: piece,
                            mention,
                        });
                    }
                }
                continue;
            }
            for (k, span) in line.split('`').enumerate() {
                if k % 2 == 1 && !planned {
                    if let Some(cmd) = invocation(span) {
                        for piece in split_list(&cmd) {
                            out.push(Shown {
                                at: at.clone(),
                                text: piece,
                                mention: true,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Check one shown command; `Err` says what is wrong.
fn check_command(shown: &Shown, tree: &HelpNode, home: &Path) -> Result<(), String> {
    if NOT_COMMANDS.iter().any(|(p, _)| shown.text.starts_with(p)) {
        return Ok(());
    }
    // Optional groups: their flags must exist; the rest must parse.
    let mut flags = Vec::new();
    let mut plain = String::new();
    let mut depth = 0;
    let mut group = String::new();
    for c in shown.text.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    flags.extend(
                        group
                            .split_whitespace()
                            .filter(|w| w.starts_with("--"))
                            .map(str::to_string),
                    );
                    group.clear();
                }
            }
            c if depth > 0 => group.push(c),
            c => plain.push(c),
        }
    }
    // Cut at a pipe, redirection, list or comment.
    let mut ws: Vec<(String, String)> = Vec::new();
    for (raw, val) in words(&plain) {
        if ["|", ">", ">>", "#", "2>&1"].contains(&raw.as_str()) || raw.starts_with('…') {
            break;
        }
        ws.push((raw, val));
    }
    let args: Vec<String> = ws.iter().skip(1).map(|(_, v)| v.clone()).collect();
    flags.extend(
        args.iter()
            .filter(|a| a.starts_with("--"))
            .map(|a| a.split('=').next().unwrap_or(a).to_string()),
    );
    // `list/show`: each alternative.
    let alt = |a: &String| {
        !a.starts_with('-')
            && !a.contains('.')
            && !a.contains(' ')
            && (a.contains('/') || a.contains('|'))
    };
    let alternatives: Vec<Vec<String>> = match args.iter().position(alt) {
        Some(i) => args[i]
            .split(['/', '|'])
            .map(|alt| {
                let mut v = args.clone();
                v[i] = alt.to_string();
                v
            })
            .collect(),
        None => vec![args],
    };
    for args in alternatives {
        let mut node = tree;
        for a in &args {
            match node.commands.get(a) {
                Some(n) => node = n,
                None => break,
            }
        }
        for f in &flags {
            if !node.flags.contains(f) {
                return Err(format!("`{}`: no flag {f} (not in its --help)", shown.text));
            }
        }
        let (code, _, stderr) = brood(&args, &[("BROOD_PARSE_ONLY", "1")], home);
        if code != Some(0) {
            // A mention may leave out what is required (`brood run`, `brood agents`).
            let missing = stderr.contains("required arguments were not provided")
                || !stderr.contains("error:");
            // An upper-case placeholder where a value is chosen from a list (SHELL).
            let placeholder = stderr.contains("invalid value '")
                && stderr.split('\'').nth(1).is_some_and(|v| {
                    v.len() > 1 && v.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                });
            if !((shown.mention && missing) || placeholder) {
                let first = stderr.lines().next().unwrap_or_default();
                return Err(format!("`{}` does not parse: {first}", shown.text));
            }
        }
    }
    Ok(())
}

#[test]
fn every_command_in_the_docs_parses_and_every_command_is_documented() {
    let home = tempfile::tempdir().unwrap();
    let tree = help_tree(&[], home.path());
    let shown = shown_commands();
    assert!(
        shown.len() > 20,
        "the extraction found too little: {}",
        shown.len()
    );
    let mut problems = Vec::new();
    for s in &shown {
        if let Err(e) = check_command(s, &tree, home.path()) {
            problems.push(format!("{}: {e}; fix the doc or the CLI", s.at));
        }
    }
    // Every command and subcommand is shown somewhere as `brood <path>`.
    let texts: Vec<String> = shown.iter().map(|s| s.text.clone()).collect();
    let mut stack: Vec<(String, &HelpNode)> = vec![("brood".into(), &tree)];
    while let Some((path, node)) = stack.pop() {
        for (name, child) in &node.commands {
            let full = format!("{path} {name}");
            let documented = texts.iter().any(|t| {
                t == &full || t.starts_with(&format!("{full} ")) || {
                    // `brood agents list/show …`
                    let (head, last) = full.rsplit_once(' ').unwrap();
                    t.split_whitespace()
                        .any(|w| w.split('/').any(|a| a == last))
                        && t.starts_with(head)
                }
            });
            if !documented {
                problems.push(format!(
                    "command `{full}` is not documented: show it in README.md (or docs/*.md) as `{full} …`"
                ));
            }
            stack.push((full, child));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every `BROOD_*` name in `text`.
fn brood_vars(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(off) = text[i..].find("BROOD_") {
        let start = i + off;
        let mut end = start + "BROOD_".len();
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        if before_ok && end > start + "BROOD_".len() {
            out.insert(text[start..end].trim_end_matches('_').to_string());
        }
        i = end;
    }
    out
}

fn files_under(dir: &Path, ext: Option<&str>, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if ext.is_none_or(|x| p.extension().is_some_and(|e| e == x)) {
            out.push(p);
        }
    }
}

#[test]
fn every_brood_variable_is_documented_and_every_documented_one_exists() {
    let documented: BTreeMap<String, String> = docs()
        .iter()
        .flat_map(|(name, text)| brood_vars(text).into_iter().map(move |v| (v, name.clone())))
        .collect();
    // What brood reads or sets: the config's variables, string literals in the
    // crates' sources, and what the scripts read.
    let mut accepted: BTreeMap<String, String> = brood::runtime::config::ENV_KEYS
        .iter()
        .map(|(v, k)| (v.to_string(), format!("sets config key {k}")))
        .collect();
    let mut files = Vec::new();
    for c in ["brood", "brood-cli", "brood-mock", "brood-bench"] {
        files_under(
            &root().join("crates").join(c).join("src"),
            Some("rs"),
            &mut files,
        );
    }
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for v in brood_vars(&text) {
            if text.contains(&format!("\"{v}\"")) {
                accepted
                    .entry(v)
                    .or_insert_with(|| format!("used in {}", f.display()));
            }
        }
    }
    let mut scripts = Vec::new();
    files_under(&root().join("scripts"), None, &mut scripts);
    files_under(&root().join(".ci"), None, &mut scripts);
    for f in &scripts {
        if let Ok(text) = std::fs::read_to_string(f) {
            for v in brood_vars(&text) {
                accepted
                    .entry(v)
                    .or_insert_with(|| format!("read by {}", f.display()));
            }
        }
    }
    let mut problems = Vec::new();
    for (v, why) in &accepted {
        if !documented.contains_key(v) {
            problems.push(format!(
                "variable {v} ({why}) is not documented: add it to README.md's variable table (or docs/*.md)"
            ));
        }
    }
    for (v, file) in &documented {
        if !accepted.contains_key(v) {
            problems.push(format!(
                "{file} mentions {v}, which nothing reads or sets: remove it or implement it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Probe the real loader with an unknown key in the user config; the error lists
/// the keys it accepts there.
fn accepted_at(prefix: &str, home: &Path) -> Option<Vec<String>> {
    let dir = home.join(".config/brood");
    std::fs::create_dir_all(&dir).unwrap();
    let body = if prefix.is_empty() {
        "zzz_probe = 1\n".to_string()
    } else {
        format!("[{prefix}]\nzzz_probe = 1\n")
    };
    std::fs::write(dir.join("config.toml"), body).unwrap();
    let (_, _, stderr) = brood(&["config".into(), "show".into()], &[], home);
    let line = stderr
        .lines()
        .find(|l| l.contains("zzz_probe`: unknown key"))?;
    let after = &line[line.find("; accepted:")?..];
    Some(
        after
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Every accepted key, dotted (`subagents.max_depth`, `providers.*.base_url`).
fn accepted_keys(home: &Path) -> BTreeSet<String> {
    let top = accepted_at("", home).expect("the loader lists its top-level keys");
    let mut out = BTreeSet::new();
    for k in top {
        if let Some(fields) = accepted_at(&k, home) {
            out.extend(fields.into_iter().map(|f| format!("{k}.{f}")));
        } else if let Some(fields) = accepted_at(&format!("{k}.x"), home) {
            out.extend(fields.into_iter().map(|f| format!("{k}.*.{f}")));
        } else {
            out.insert(k);
        }
    }
    out
}

/// Keys the README's configuration table documents, dotted like [`accepted_keys`].
fn documented_keys(readme: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let Some(start) = readme.find("| key | default | meaning |") else {
        return out;
    };
    let offset = readme[..start].lines().count();
    for (n, line) in readme[start..].lines().enumerate().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cell = line.split('|').nth(1).unwrap_or_default();
        let mut section: Option<String> = None;
        for (k, span) in cell.split('`').enumerate() {
            if k % 2 == 0 {
                continue;
            }
            let mut rest = span.trim();
            if let Some(inner) = rest.strip_prefix('[') {
                let (head, tail) = inner.split_once(']').unwrap_or((inner, ""));
                let mut parts = head.splitn(2, '.');
                let name = parts.next().unwrap_or_default().to_string();
                match parts.next() {
                    // `[subagents.models]`: a table inside a section.
                    Some(sub) if !sub.starts_with('<') && !sub.starts_with('"') => {
                        out.push((offset + n + 1, format!("{name}.{sub}")));
                        section = Some(name);
                        continue;
                    }
                    Some(_) => section = Some(format!("{name}.*")),
                    None => section = Some(name),
                }
                rest = tail;
            }
            for key in rest.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                out.push((
                    offset + n + 1,
                    match &section {
                        Some(s) => format!("{s}.{key}"),
                        None => key.to_string(),
                    },
                ));
            }
        }
    }
    out
}

#[test]
fn every_config_key_is_documented_and_every_documented_one_is_accepted() {
    let home = tempfile::tempdir().unwrap();
    let accepted = accepted_keys(home.path());
    assert!(
        accepted.contains("subagents.max_concurrent"),
        "{accepted:?}"
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let documented = documented_keys(&readme);
    let names: BTreeSet<&str> = documented.iter().map(|(_, k)| k.as_str()).collect();
    let mut problems = Vec::new();
    for k in &accepted {
        if !names.contains(k.as_str()) {
            problems.push(format!(
                "config key `{k}` is accepted but not in README.md's configuration table: add a row"
            ));
        }
    }
    for (line, k) in &documented {
        if !accepted.contains(k) {
            problems.push(format!(
                "README.md:{line}: the configuration table names `{k}`, which the config does not accept"
            ));
        }
    }
    // `[section] key` mentioned anywhere in the docs exists too.
    for (name, text) in docs() {
        for (n, line) in text.lines().enumerate() {
            for (k, span) in line.split('`').enumerate() {
                let Some(inner) = span.strip_prefix('[').filter(|_| k % 2 == 1) else {
                    continue;
                };
                let Some((section, keys)) = inner.split_once("] ") else {
                    continue;
                };
                if section.contains('.')
                    || !section.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                {
                    continue;
                }
                for key in keys.split(',').map(str::trim) {
                    if key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        && !accepted.contains(&format!("{section}.{key}"))
                    {
                        problems.push(format!(
                            "{name}:{}: `[{section}] {key}` is not a config key",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    // Every TOML example loads with the real loader.
    for (name, text) in docs() {
        let mut block: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            let t = line.trim_start();
            match &mut block {
                None if t.starts_with("```toml") => block = Some((n + 1, String::new())),
                Some((start, body)) if t.starts_with("```") => {
                    let dir = home.path().join(".config/brood");
                    std::fs::write(dir.join("config.toml"), &*body).unwrap();
                    let (code, _, stderr) =
                        brood(&["config".into(), "show".into()], &[], home.path());
                    if code != Some(0) {
                        problems.push(format!(
                            "{name}:{start}: this TOML example does not load: {}",
                            stderr.lines().collect::<Vec<_>>().join(" ")
                        ));
                    }
                    block = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
                None => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
