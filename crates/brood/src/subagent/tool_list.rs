//! Tool lists in agent files: `tools` and `disallowedTools` read as a
//! comma-separated string or a YAML list, and Claude Code's tool names mapped to
//! brood's. What brood cannot enforce exactly is resolved towards less access.

/// The delegation tools a Claude Code `Task`/`Agent` entry maps to.
pub const DELEGATION_TOOLS: [&str; 6] = [
    "task",
    "agent_open",
    "agent_eval",
    "agent_close",
    "agent_list",
    "handle_read",
];

/// What kind of YAML value `v` is, for error messages.
pub(super) fn kind_of(v: &serde_yaml::Value) -> &'static str {
    match v {
        serde_yaml::Value::Null => "nothing",
        serde_yaml::Value::Bool(_) => "true/false",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "text",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

/// A tool list as a comma-separated string or a YAML list of strings.
pub(super) fn tool_list(v: &serde_yaml::Value) -> Result<Vec<String>, String> {
    let items: Vec<String> = match v {
        serde_yaml::Value::String(s) => s.split(',').map(|t| t.trim().to_string()).collect(),
        serde_yaml::Value::Sequence(seq) => seq
            .iter()
            .map(|item| match item {
                serde_yaml::Value::String(s) => Ok(s.trim().to_string()),
                other => Err(format!(
                    "list items must be tool names, found {}",
                    kind_of(other)
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "expected a comma-separated string or a list, found {}",
                kind_of(other)
            ))
        }
    };
    let items: Vec<String> = items.into_iter().filter(|t| !t.is_empty()).collect();
    if let Some(t) = items
        .iter()
        .find(|t| t.contains(char::is_whitespace) && !t.contains('('))
    {
        return Err(format!(
            "'{t}' is not a tool name; separate names with commas"
        ));
    }
    Ok(items)
}

/// Whether a tool list grants (`tools`) or denies (`disallowedTools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListKind {
    Allow,
    Deny,
}

/// Map Claude Code tool names to brood's. What brood cannot enforce exactly is
/// resolved towards less access: an allowed `Bash(git:*)` is dropped, a denied one
/// denies all of `bash`.
pub(super) fn map_tools(
    items: &[String],
    list: ListKind,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |t: &str| {
        if !out.iter().any(|x| x == t) {
            out.push(t.to_string());
        }
    };
    for item in items {
        let item = match (item.split_once('('), list) {
            (None, _) => item.as_str(),
            (Some(_), ListKind::Allow) => {
                warnings.push(format!(
                    "tool '{item}' dropped: brood cannot enforce the part in parentheses, so it grants nothing rather than everything"
                ));
                continue;
            }
            (Some((whole, _)), ListKind::Deny) => {
                warnings.push(format!(
                    "disallowedTools '{item}' denies all of {whole}: brood cannot deny only part of a tool"
                ));
                whole.trim()
            }
        };
        match item {
            "Read" => push("read_file"),
            "Write" => push("write_file"),
            "Edit" | "MultiEdit" => push("edit_file"),
            "Glob" => push("find_files"),
            "Grep" => push("grep"),
            "LS" => push("list_dir"),
            "Bash" => push("bash"),
            // Claude's TodoWrite also shows the list; denying it denies only writes.
            "TodoWrite" => {
                push("todo_write");
                if list == ListKind::Allow {
                    push("todo_read");
                }
            }
            "TodoRead" => push("todo_read"),
            "Task" | "Agent" => DELEGATION_TOOLS.iter().for_each(|t| push(t)),
            "WebFetch" | "WebSearch" | "NotebookEdit" | "NotebookRead" | "BashOutput"
            | "KillShell" | "KillBash" | "ExitPlanMode" | "SlashCommand" | "Skill" => {
                // Denying a tool brood does not have changes nothing.
                if list == ListKind::Allow {
                    warnings.push(format!("tool '{item}' dropped: brood has no equivalent"))
                }
            }
            other => push(other),
        }
    }
    out
}
