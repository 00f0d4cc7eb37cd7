//! Permission rules: `allow`, `ask` and `deny` lists of tool-call patterns in the
//! form Claude Code users know, matched against every tool call of every agent.
//!
//! # Syntax
//!
//! | rule | matches |
//! |---|---|
//! | `bash` | every call of the tool (any tool name; `*` is a wildcard: `mcp__github__*`) |
//! | `bash(npm test)` | a shell command that is exactly `npm test` |
//! | `bash(git push:*)` | a shell command starting with the words `git push` |
//! | `bash(git * --force)` | a shell command matching the wildcard (`*` = any text) |
//! | `write_file(src/**)` | a path matching the glob, relative to the workspace (`read_file`, `write_file`, `edit_file`, `list_dir`, `find_files`, `grep`); a glob without `/` (`*.lock`) matches the file name at any depth |
//! | `read_file(secret/**)` | also `list_dir`, `find_files` and `grep` on those paths (a read rule governs every reading tool, as Claude Code's `Read(...)`) |
//! | `task(implementer)` | a child of that agent type opened with `task` or `agent_open` (a glob too) |
//!
//! # Decisions
//!
//! `deny` beats `ask` beats `allow` ([`RuleSet::decide`]). Rules only narrow what
//! an agent's grant already allows: a call refused by the grant is refused whatever
//! the rules say. A shell command is read into its simple commands
//! ([`super::command_line`]): a `deny`/`ask` rule holds when any of them matches,
//! or when the line cannot be read with confidence (fail closed); an `allow` rule
//! holds only when every one of them matches.

use super::command_line;
use globset::{GlobBuilder, GlobMatcher};
use std::path::{Component, Path, PathBuf};

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    /// Run without asking (answers the calls an embedder marked `ask_before`).
    Allow,
    /// Ask the session's approver first.
    Ask,
    /// Refuse.
    Deny,
}

impl RuleKind {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Allow => "allow",
            RuleKind::Ask => "ask",
            RuleKind::Deny => "deny",
        }
    }

    /// From `allow`, `ask` or `deny`.
    pub fn parse(s: &str) -> Option<RuleKind> {
        match s {
            "allow" => Some(RuleKind::Allow),
            "ask" => Some(RuleKind::Ask),
            "deny" => Some(RuleKind::Deny),
            _ => None,
        }
    }
}

/// A rule that could not be read: the rule as written and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("permission rule {rule:?}: {detail}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong and what is accepted.
    pub detail: String,
}

/// Tools whose rules take a path glob.
pub(crate) const PATH_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "find_files",
    "grep",
];
/// Tools that search below a directory: a path rule holds for them when the
/// search would reach a matching path.
const SEARCH_TOOLS: &[&str] = &["list_dir", "find_files", "grep"];
/// Tools whose rules take an agent type.
pub(crate) const AGENT_TOOLS: &[&str] = &["task", "agent_open"];

/// Claude Code's tool names, refused in brood rules with brood's name suggested
/// (a `Bash(...)` deny that silently matched nothing would protect nothing).
const FOREIGN_NAMES: &[(&str, &str)] = &[
    ("Bash", "bash"),
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Glob", "find_files"),
    ("Grep", "grep"),
    ("LS", "list_dir"),
    ("Task", "task"),
    ("Agent", "task"),
    ("TodoWrite", "todo_write"),
];

/// One parsed rule.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    tool: NamePattern,
    spec: Option<Spec>,
}

#[derive(Debug, Clone)]
enum NamePattern {
    Exact(String),
    Glob(GlobMatcher),
}

#[derive(Debug, Clone)]
enum Spec {
    Command(CommandPattern),
    Path(PathPattern),
    Agent(GlobMatcher),
}

#[derive(Debug, Clone)]
enum CommandPattern {
    /// `git push:*`
    Prefix(Vec<String>),
    /// `npm test`
    Exact(Vec<String>),
    /// `git * --force`
    Wild(String),
}

#[derive(Debug, Clone)]
struct PathPattern {
    glob: GlobMatcher,
    /// No `/` in the pattern: matched against the file name.
    name_only: bool,
    /// The literal directory the pattern starts with (`src` for `src/**/*.rs`).
    base: PathBuf,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    /// Read one rule (see the module's doc for the syntax).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let err = |detail: String| RuleError {
            rule: text.to_string(),
            detail,
        };
        let t = text.trim();
        if t.is_empty() {
            return Err(err(
                "empty rule; write a tool name, e.g. `bash(git push:*)`".into(),
            ));
        }
        let (name, spec) = match t.split_once('(') {
            Some((name, rest)) => {
                let Some(inner) = rest.strip_suffix(')') else {
                    return Err(err(
                        "unbalanced parentheses; write `tool(pattern)` with the pattern inside one pair".into(),
                    ));
                };
                let inner = inner.trim();
                if inner.is_empty() {
                    return Err(err(
                        "empty pattern inside (); write the bare tool name to match every call"
                            .into(),
                    ));
                }
                (name.trim(), Some(inner))
            }
            None => {
                if t.contains(')') {
                    return Err(err("unbalanced parentheses".into()));
                }
                (t, None)
            }
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '.'))
        {
            return Err(err(format!(
                "{name:?} is not a tool name (letters, digits, `_`, `-`, `.`, and `*` as a wildcard)"
            )));
        }
        if let Some((_, ours)) = FOREIGN_NAMES.iter().find(|(theirs, _)| *theirs == name) {
            return Err(err(format!(
                "{name} is Claude Code's name for the tool; brood's is {ours} (write `{ours}{}`)",
                spec.map(|s| format!("({s})")).unwrap_or_default()
            )));
        }
        let tool = if name.contains('*') {
            let g = GlobBuilder::new(name)
                .build()
                .map_err(|e| err(format!("bad wildcard in the tool name: {e}")))?;
            NamePattern::Glob(g.compile_matcher())
        } else {
            NamePattern::Exact(name.to_string())
        };
        let spec = match spec {
            None => None,
            Some(s) => {
                let NamePattern::Exact(n) = &tool else {
                    return Err(err(
                        "a tool-name wildcard cannot take a (pattern); write one rule per tool"
                            .into(),
                    ));
                };
                Some(parse_spec(n, s).map_err(err)?)
            }
        };
        Ok(Rule {
            text: t.to_string(),
            tool,
            spec,
        })
    }

    /// The rule as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the rule's tool part names `tool`.
    pub(crate) fn names_tool(&self, tool: &str) -> bool {
        match &self.tool {
            NamePattern::Exact(n) => {
                n == tool
                    || (self.spec.is_some() && n == "task" && AGENT_TOOLS.contains(&tool))
                    // A read rule governs every tool that reads the same paths (as
                    // Claude Code's `Read(...)` does).
                    || (n == "read_file" && SEARCH_TOOLS.contains(&tool))
            }
            NamePattern::Glob(g) => g.is_match(tool),
        }
    }

    /// Whether the call `tool(args)` matches. `every`: the whole call must match
    /// (an `allow`); otherwise any part of it (an `ask` or `deny`, failing closed
    /// where the arguments cannot be read). `root` is the workspace root (for
    /// absolute paths).
    pub fn matches(&self, tool: &str, args: &serde_json::Value, root: &Path, every: bool) -> bool {
        if !self.names_tool(tool) {
            return false;
        }
        let Some(spec) = &self.spec else {
            return true;
        };
        match spec {
            Spec::Command(p) => {
                let Some(line) = args.get("command").and_then(|v| v.as_str()) else {
                    return !every;
                };
                let split = command_line::split(line);
                if !split.sure {
                    return !every;
                }
                if every {
                    !split.commands.is_empty() && split.commands.iter().all(|c| p.matches(c))
                } else {
                    split.commands.iter().any(|c| p.matches(c))
                }
            }
            Spec::Path(p) => {
                let raw = match args.get("path") {
                    Some(serde_json::Value::String(s)) => s.as_str(),
                    None | Some(serde_json::Value::Null) => ".",
                    Some(_) => return !every,
                };
                let Some(rel) = relative(raw, root) else {
                    return !every;
                };
                if p.matches(&rel) {
                    return true;
                }
                // A search from above the pattern's place reaches it.
                !every && SEARCH_TOOLS.contains(&tool) && (p.name_only || p.base.starts_with(&rel))
            }
            Spec::Agent(g) => {
                let agent = match args.get("agent_type").or_else(|| args.get("type")) {
                    Some(serde_json::Value::String(s)) => s.as_str(),
                    None | Some(serde_json::Value::Null) => "general",
                    Some(_) => return !every,
                };
                g.is_match(agent)
            }
        }
    }
}

fn parse_spec(tool: &str, s: &str) -> Result<Spec, String> {
    if tool == "bash" {
        if s == "*" {
            return Ok(Spec::Command(CommandPattern::Wild("*".into())));
        }
        let words = |t: &str| -> Vec<String> { t.split_whitespace().map(String::from).collect() };
        if let Some(prefix) = s.strip_suffix(":*") {
            let w = words(prefix);
            if w.is_empty() {
                return Err("empty command prefix before `:*`".into());
            }
            return Ok(Spec::Command(CommandPattern::Prefix(w)));
        }
        if s.contains('*') {
            return Ok(Spec::Command(CommandPattern::Wild(words(s).join(" "))));
        }
        return Ok(Spec::Command(CommandPattern::Exact(words(s))));
    }
    if PATH_TOOLS.contains(&tool) {
        let pat = s.strip_prefix("./").unwrap_or(s);
        let pat = pat.trim_start_matches('/');
        if pat.is_empty() || pat.split('/').any(|c| c == "..") {
            return Err(
                "a path glob relative to the workspace is expected (no `..`), e.g. `src/**`".into(),
            );
        }
        let name_only = !pat.contains('/');
        let glob = GlobBuilder::new(pat)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("bad glob: {e}"))?
            .compile_matcher();
        let base: PathBuf = pat
            .split('/')
            .take_while(|c| !c.contains(['*', '?', '[', '{']))
            .collect();
        return Ok(Spec::Path(PathPattern {
            glob,
            name_only,
            base,
        }));
    }
    if AGENT_TOOLS.contains(&tool) {
        let g = GlobBuilder::new(s)
            .build()
            .map_err(|e| format!("bad agent-type pattern: {e}"))?;
        return Ok(Spec::Agent(g.compile_matcher()));
    }
    Err(format!(
        "{tool} takes no (pattern): patterns exist for bash (a command), {} (a path glob) and {} (an agent type); write the bare name to match every call",
        PATH_TOOLS.join(", "),
        AGENT_TOOLS.join(", ")
    ))
}

impl CommandPattern {
    fn matches(&self, cmd: &[String]) -> bool {
        match self {
            CommandPattern::Prefix(p) => cmd.get(..p.len()) == Some(p.as_slice()),
            CommandPattern::Exact(p) => cmd == p.as_slice(),
            CommandPattern::Wild(p) => wildcard(p, &cmd.join(" ")),
        }
    }
}

impl PathPattern {
    fn matches(&self, rel: &Path) -> bool {
        if self.name_only {
            rel.file_name().is_some_and(|n| self.glob.is_match(n))
        } else {
            self.glob.is_match(rel)
        }
    }
}

/// `*` matches any text (spaces included); everything else is literal.
fn wildcard(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        // No `*`: the whole text.
        return rest.is_empty();
    };
    for mid in parts {
        match rest.find(mid) {
            Some(i) => rest = rest.get(i + mid.len()..).unwrap_or_default(),
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// `raw` as a path relative to the workspace root, normalized (`.` and `..`
/// resolved lexically); `None` when it leaves the workspace or cannot be read.
fn relative(raw: &str, root: &Path) -> Option<PathBuf> {
    let p = Path::new(raw);
    let p = if p.is_absolute() {
        p.strip_prefix(root).ok()?
    } else {
        p
    };
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// A rule in a list, and where it was written (a file, a flag, the session).
#[derive(Debug, Clone)]
pub struct SourcedRule {
    /// Which list.
    pub kind: RuleKind,
    /// The rule.
    pub rule: Rule,
    /// Where it came from, for messages and `/permissions`.
    pub source: String,
}

/// The rules that apply to a run: the session's, and those of the agent
/// definitions it (and its ancestors) were opened from.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<SourcedRule>,
}

/// What the rules say about one call.
#[derive(Debug, Clone, Copy)]
pub enum Verdict<'a> {
    /// A `deny` rule matches.
    Deny(&'a SourcedRule),
    /// An `ask` rule matches (and no `deny`).
    Ask(&'a SourcedRule),
    /// An `allow` rule matches the whole call (and no `deny` or `ask`).
    Allow(&'a SourcedRule),
    /// No rule matches.
    None,
}

impl RuleSet {
    /// No rules.
    pub fn new() -> Self {
        RuleSet::default()
    }

    /// Add `text` to the `kind` list, from `source`.
    pub fn add(&mut self, kind: RuleKind, text: &str, source: &str) -> Result<(), RuleError> {
        let rule = Rule::parse(text)?;
        self.rules.push(SourcedRule {
            kind,
            rule,
            source: source.to_string(),
        });
        Ok(())
    }

    /// Add every rule of `other`.
    pub fn extend(&mut self, other: &RuleSet) {
        self.rules.extend(other.rules.iter().cloned());
    }

    /// Remove every rule written `text` (any list); how many were removed.
    pub fn remove(&mut self, text: &str) -> usize {
        let before = self.rules.len();
        self.rules.retain(|r| r.rule.text() != text.trim());
        before - self.rules.len()
    }

    /// Every rule, in the order added.
    pub fn rules(&self) -> &[SourcedRule] {
        &self.rules
    }

    /// No rules at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// What the rules say about `tool(args)`: deny beats ask beats allow.
    pub fn decide(&self, tool: &str, args: &serde_json::Value, root: &Path) -> Verdict<'_> {
        let find = |kind: RuleKind, every: bool| {
            self.rules
                .iter()
                .find(|r| r.kind == kind && r.rule.matches(tool, args, root, every))
        };
        if let Some(r) = find(RuleKind::Deny, false) {
            return Verdict::Deny(r);
        }
        if let Some(r) = find(RuleKind::Ask, false) {
            return Verdict::Ask(r);
        }
        if let Some(r) = find(RuleKind::Allow, true) {
            return Verdict::Allow(r);
        }
        Verdict::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn root() -> PathBuf {
        PathBuf::from("/ws")
    }

    fn hit(rule: &str, tool: &str, args: serde_json::Value) -> bool {
        Rule::parse(rule)
            .unwrap()
            .matches(tool, &args, &root(), false)
    }

    #[test]
    fn shell_rules_hold_through_other_spellings() {
        let r = "bash(git push:*)";
        for cmd in [
            "git push",
            "  git push origin main",
            "env X=1 git push",
            "bash -c 'git push'",
            "sh -c \"git push --force\"",
            "ls && git push",
            "echo $(git push)",
            "eval 'git push'",
            "echo 'unbalanced",
        ] {
            assert!(hit(r, "bash", json!({ "command": cmd })), "{cmd}");
        }
        for cmd in ["git pushy", "git status", "echo git push", "gitpush"] {
            assert!(!hit(r, "bash", json!({ "command": cmd })), "{cmd}");
        }
        assert!(hit(
            "bash(npm test)",
            "bash",
            json!({"command": "npm  test"})
        ));
        assert!(!hit(
            "bash(npm test)",
            "bash",
            json!({"command": "npm test -- x"})
        ));
        assert!(hit(
            "bash(git * --force)",
            "bash",
            json!({"command": "git push --force"})
        ));
    }

    #[test]
    fn an_allow_needs_every_command_and_a_sure_reading() {
        let r = Rule::parse("bash(npm test)").unwrap();
        let m = |c: &str| r.matches("bash", &json!({ "command": c }), &root(), true);
        assert!(m("npm test"));
        assert!(!m("npm test && rm -rf x"));
        assert!(!m("eval 'npm test'"));
    }

    #[test]
    fn path_rules_are_workspace_globs() {
        assert!(hit(
            "write_file(src/**)",
            "write_file",
            json!({"path": "src/a/b.rs"})
        ));
        assert!(hit(
            "write_file(src/**)",
            "write_file",
            json!({"path": "./x/../src/b.rs"})
        ));
        assert!(hit(
            "write_file(src/**)",
            "write_file",
            json!({"path": "/ws/src/b.rs"})
        ));
        assert!(!hit(
            "write_file(src/**)",
            "write_file",
            json!({"path": "tests/b.rs"})
        ));
        assert!(hit(
            "edit_file(*.lock)",
            "edit_file",
            json!({"path": "a/b/Cargo.lock"})
        ));
        assert!(!hit(
            "edit_file(*.lock)",
            "edit_file",
            json!({"path": "a/lock.rs"})
        ));
        // A path that cannot be placed fails closed for ask/deny.
        assert!(hit(
            "read_file(secrets/**)",
            "read_file",
            json!({"path": "../../etc/x"})
        ));
        // A search from above reaches the denied place.
        assert!(hit("grep(secrets/**)", "grep", json!({"pattern": "k"})));
        assert!(!hit(
            "grep(secrets/**)",
            "grep",
            json!({"pattern": "k", "path": "src"})
        ));
    }

    #[test]
    fn names_types_and_wildcards() {
        assert!(hit(
            "task(implementer)",
            "task",
            json!({"agent_type": "implementer"})
        ));
        assert!(hit(
            "task(implementer)",
            "agent_open",
            json!({"type": "implementer"})
        ));
        assert!(!hit("task(implementer)", "task", json!({})));
        assert!(hit("task(general)", "task", json!({})));
        assert!(hit(
            "mcp__github__*",
            "mcp__github__create_issue",
            json!({})
        ));
        assert!(!hit("mcp__github__*", "mcp__gitlab__x", json!({})));
        assert!(hit("read_file", "read_file", json!({"path": "x"})));
    }

    #[test]
    fn malformed_rules_say_what_is_wrong() {
        for bad in [
            "",
            "bash(",
            "bash()",
            "Bash(git:*)",
            "todo_read(x)",
            "b ash",
            "mcp__*(x)",
            "read_file(../x)",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad:?} parsed");
        }
        let e = Rule::parse("Bash(git push:*)").unwrap_err();
        assert!(e.to_string().contains("bash(git push:*)"), "{e}");
    }

    #[test]
    fn deny_beats_ask_beats_allow() {
        let mut s = RuleSet::new();
        s.add(RuleKind::Allow, "bash", "t").unwrap();
        s.add(RuleKind::Ask, "bash(git:*)", "t").unwrap();
        s.add(RuleKind::Deny, "bash(git push:*)", "t").unwrap();
        let d = |c: &str| match s.decide("bash", &json!({ "command": c }), &root()) {
            Verdict::Deny(_) => "deny",
            Verdict::Ask(_) => "ask",
            Verdict::Allow(_) => "allow",
            Verdict::None => "none",
        };
        assert_eq!(d("git push"), "deny");
        assert_eq!(d("git status"), "ask");
        assert_eq!(d("ls"), "allow");
    }
}
