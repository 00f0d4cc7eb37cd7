//! Where the session's permission rules come from: `[permissions]` in the user's
//! and the workspace's `config.toml`, and Claude Code's `permissions` in
//! `~/.claude/settings.json` and the workspace's `.claude/settings.json` (and
//! `.claude/settings.local.json`), translated to brood's rules.
//!
//! A workspace file is written by whoever wrote the repository: it may add `ask`
//! and `deny` rules, never `allow` (ignored, with a note). A malformed rule in a
//! brood config file is a config error naming the file and the rule; a Claude Code
//! rule brood cannot translate is listed as ignored, with why (`brood config show`).
//! The matcher itself is [`crate::tool::rules`].

use crate::tool::{RuleKind, RuleSet};
use std::collections::BTreeMap;
use std::path::Path;

/// The `[permissions]` table of a config file.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PermissionsTable {
    /// Calls that run without asking.
    pub allow: Option<Vec<String>>,
    /// Calls the session's approver decides.
    pub ask: Option<Vec<String>>,
    /// Calls refused.
    pub deny: Option<Vec<String>>,
}

/// Add the `[permissions]` of `file` (already removed from its table) to `rules`.
/// `workspace`: the file is a workspace's, so its `allow` is ignored (noted).
/// `Err` is what is wrong, for a config error naming the file.
pub(crate) fn add_table(
    value: toml::Value,
    file: &Path,
    workspace: bool,
    rules: &mut RuleSet,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let invalid = |detail: String| detail;
    let table: PermissionsTable = value
        .try_into()
        .map_err(|e: toml::de::Error| invalid(format!("[permissions] {e}")))?;
    let source = file.display().to_string();
    for (kind, list) in [
        (RuleKind::Allow, table.allow),
        (RuleKind::Ask, table.ask),
        (RuleKind::Deny, table.deny),
    ] {
        let list = list.unwrap_or_default();
        if workspace && kind == RuleKind::Allow {
            if !list.is_empty() {
                notes.push(format!(
                    "{source}: permissions.allow ignored ({}): a workspace may only add ask and deny rules; put allow rules in your user config",
                    list.join(", ")
                ));
            }
            continue;
        }
        for text in list {
            rules
                .add(kind, &text, &source)
                .map_err(|e| invalid(format!("[permissions] {}: {e}", kind.as_str())))?;
        }
    }
    Ok(())
}

/// Add the `permissions` of Claude Code's settings files: the user's
/// (`$HOME/.claude/settings.json`) and the workspace's.
pub(crate) fn add_claude_settings(
    env: &BTreeMap<String, String>,
    workspace_root: &Path,
    rules: &mut RuleSet,
    notes: &mut Vec<String>,
) {
    if let Some(home) = env.get("HOME").filter(|h| !h.is_empty()) {
        let file = Path::new(home).join(".claude").join("settings.json");
        add_claude_file(&file, false, rules, notes);
    }
    for name in ["settings.json", "settings.local.json"] {
        let file = workspace_root.join(".claude").join(name);
        add_claude_file(&file, true, rules, notes);
    }
}

fn add_claude_file(file: &Path, workspace: bool, rules: &mut RuleSet, notes: &mut Vec<String>) {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            notes.push(format!("{}: not read: {e}", file.display()));
            return;
        }
    };
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!(
                "{}: not read as Claude Code settings: {e}",
                file.display()
            ));
            return;
        }
    };
    let Some(perms) = json.get("permissions") else {
        return;
    };
    let source = format!("{} (Claude Code)", file.display());
    for kind in [RuleKind::Allow, RuleKind::Ask, RuleKind::Deny] {
        let Some(list) = perms.get(kind.as_str()).and_then(|v| v.as_array()) else {
            continue;
        };
        for item in list {
            let Some(rule) = item.as_str() else {
                notes.push(format!(
                    "{source}: permissions.{} entry {item} ignored: not a string",
                    kind.as_str()
                ));
                continue;
            };
            if workspace && kind == RuleKind::Allow {
                notes.push(format!(
                    "{source}: allow {rule:?} ignored: a workspace may only add ask and deny rules"
                ));
                continue;
            }
            match translate(rule) {
                Ok(ours) => {
                    for r in ours {
                        if let Err(e) = rules.add(kind, &r, &source) {
                            notes.push(format!(
                                "{source}: {} {rule:?} ignored: {}",
                                kind.as_str(),
                                e.detail
                            ));
                        }
                    }
                }
                Err(why) => notes.push(format!(
                    "{source}: {} {rule:?} ignored: {why}",
                    kind.as_str()
                )),
            }
        }
    }
}

/// A Claude Code rule as brood rules (one Claude tool may be several of brood's),
/// or why it cannot be.
pub(crate) fn translate(rule: &str) -> Result<Vec<String>, String> {
    let rule = rule.trim();
    let (name, spec) = match rule.split_once('(') {
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(inner) => (name, Some(inner.trim())),
            None => return Err("unbalanced parentheses".into()),
        },
        None => (rule, None),
    };
    let with = |tools: &[&str], spec: Option<String>| -> Vec<String> {
        tools
            .iter()
            .map(|t| match &spec {
                Some(s) => format!("{t}({s})"),
                None => t.to_string(),
            })
            .collect()
    };
    let path = |s: Option<&str>| -> Result<Option<String>, String> {
        let Some(s) = s else { return Ok(None) };
        if s.starts_with("//") || s.starts_with('~') {
            return Err(
                "a path outside the workspace: brood's file tools cannot reach it anyway".into(),
            );
        }
        // `./x`, `x` and `/x` (relative to the project) are workspace paths.
        let s = s.strip_prefix("./").unwrap_or(s).trim_start_matches('/');
        Ok(Some(s.to_string()))
    };
    match name {
        "Bash" => Ok(with(&["bash"], spec.map(String::from))),
        "Read" => Ok(with(&["read_file", "list_dir", "find_files", "grep"], path(spec)?)),
        "Edit" => Ok(with(&["edit_file", "write_file"], path(spec)?)),
        "MultiEdit" => Ok(with(&["edit_file"], path(spec)?)),
        "Write" => Ok(with(&["write_file"], path(spec)?)),
        "Glob" => Ok(with(&["find_files"], path(spec)?)),
        "Grep" => Ok(with(&["grep"], path(spec)?)),
        "LS" => Ok(with(&["list_dir"], path(spec)?)),
        "Task" | "Agent" => Ok(with(&["task"], spec.map(String::from))),
        "TodoWrite" => Ok(vec!["todo_write".into()]),
        "WebFetch" | "WebSearch" => Err(format!(
            "brood has no {name} tool (shells' network is set by [sandbox] network in your user config)"
        )),
        n if n.starts_with("mcp__") && spec.is_none() => Ok(vec![n.to_string()]),
        n => Err(format!("brood has no tool matching Claude Code's {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn claude_code_rules_become_brood_rules() {
        assert_eq!(translate("Bash(git push:*)").unwrap(), ["bash(git push:*)"]);
        assert_eq!(
            translate("Read(./secrets/**)").unwrap(),
            [
                "read_file(secrets/**)",
                "list_dir(secrets/**)",
                "find_files(secrets/**)",
                "grep(secrets/**)"
            ]
        );
        assert_eq!(
            translate("Edit(*.lock)").unwrap(),
            ["edit_file(*.lock)", "write_file(*.lock)"]
        );
        assert_eq!(translate("mcp__github__*").unwrap(), ["mcp__github__*"]);
        assert!(translate("WebFetch(domain:example.com)").is_err());
        assert!(translate("Read(~/.ssh/**)").is_err());
        assert!(translate("NotebookEdit").is_err());
    }
}
