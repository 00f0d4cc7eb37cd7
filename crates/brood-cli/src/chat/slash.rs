//! Slash commands of `brood chat`: parsing a line into a [`Slash`], or a one-line
//! error naming what is accepted.

/// Every command with its arguments, as `/help` lists them.
pub const HELP: &[(&str, &str)] = &[
    ("/help", "this list"),
    (
        "/agents",
        "the agent tree of this chat: every run, its role, model and state",
    ),
    (
        "/model [NAME]",
        "show the parent's model, or switch it for the next prompts",
    ),
    (
        "/model-subagent ROLE MODEL",
        "the next children of ROLE (a role, alias or definition name) run on MODEL",
    ),
    (
        "/models-subagent",
        "each role's model and where it comes from",
    ),
    (
        "/permissions [allow|ask|deny|remove RULE]",
        "the permission rules and where each comes from; add or remove one for this session",
    ),
    (
        "/status",
        "provider, model, limits, budgets, running/queued children, tokens and cost, ledger",
    ),
    (
        "/resume [RUN]",
        "continue an interrupted, cancelled or failed run under its id; alone: list them",
    ),
    (
        "/clear",
        "start a new conversation (the ledger keeps the old one)",
    ),
    ("/quit", "cancel what still runs, record it, and leave"),
];

/// A parsed command.
#[derive(Debug, PartialEq, Eq)]
pub enum Slash {
    Help,
    Agents,
    Model(Option<String>),
    ModelSubagent {
        role: String,
        model: String,
    },
    ModelsSubagent,
    /// `/permissions` (list), or an action (`allow`, `ask`, `deny`, `remove`) and a rule.
    Permissions(Option<(String, String)>),
    Status,
    Resume(Option<String>),
    Clear,
    Quit,
}

/// The command names (`/help`, `/model`, …), for completion.
pub fn names() -> Vec<&'static str> {
    HELP.iter()
        .filter_map(|(c, _)| c.split_whitespace().next())
        .collect()
}

/// Whether the command `name` takes arguments (its `/help` line names some).
pub fn takes_arguments(name: &str) -> bool {
    HELP.iter()
        .any(|(c, _)| c.split_whitespace().next() == Some(name) && c.contains(' '))
}

/// The command names, for an error line.
fn accepted() -> String {
    HELP.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
}

/// Parse a line that starts with `/`. `Err` is the one line to print.
pub fn parse(line: &str) -> Result<Slash, String> {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or("/");
    let args: Vec<&str> = words.collect();
    let none = |cmd: Slash| {
        if args.is_empty() {
            Ok(cmd)
        } else {
            Err(format!(
                "{name} takes no arguments (accepted: {})",
                accepted()
            ))
        }
    };
    match name {
        "/help" | "/?" => none(Slash::Help),
        "/agents" => none(Slash::Agents),
        "/models-subagent" => none(Slash::ModelsSubagent),
        "/status" => none(Slash::Status),
        "/clear" => none(Slash::Clear),
        "/quit" | "/exit" => none(Slash::Quit),
        "/permissions" => match args.split_first() {
            None => Ok(Slash::Permissions(None)),
            Some((action, rule))
                if matches!(*action, "allow" | "ask" | "deny" | "remove") && !rule.is_empty() =>
            {
                Ok(Slash::Permissions(Some((action.to_string(), rule.join(" ")))))
            }
            _ => Err(
                "usage: /permissions [allow|ask|deny|remove RULE] (e.g. /permissions deny bash(git push:*))"
                    .into(),
            ),
        },
        "/model" => match args.as_slice() {
            [] => Ok(Slash::Model(None)),
            [m] => Ok(Slash::Model(Some((*m).to_string()))),
            _ => Err("usage: /model [NAME] (one model name)".into()),
        },
        "/resume" => match args.as_slice() {
            [] => Ok(Slash::Resume(None)),
            [id] => Ok(Slash::Resume(Some((*id).to_string()))),
            _ => Err("usage: /resume [RUN] (one run id or unique prefix)".into()),
        },
        "/model-subagent" => match args.as_slice() {
            [role, model] => Ok(Slash::ModelSubagent {
                role: role.to_ascii_lowercase(),
                model: (*model).to_string(),
            }),
            _ => Err(
                "usage: /model-subagent ROLE MODEL (ROLE: general, explore, plan, implementer, verifier, review, custom, an alias or a definition name)"
                    .into(),
            ),
        },
        other => Err(format!("unknown command {other} (accepted: {})", accepted())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_their_errors() {
        assert_eq!(parse("/help"), Ok(Slash::Help));
        assert_eq!(parse("/resume"), Ok(Slash::Resume(None)));
        assert_eq!(
            parse("/resume 0194ab"),
            Ok(Slash::Resume(Some("0194ab".into())))
        );
        assert!(parse("/resume a b").unwrap_err().starts_with("usage:"));
        assert_eq!(parse("/model  x "), Ok(Slash::Model(Some("x".into()))));
        assert_eq!(
            parse("/model-subagent Explore m1"),
            Ok(Slash::ModelSubagent {
                role: "explore".into(),
                model: "m1".into()
            })
        );
        let e = parse("/nope").unwrap_err();
        assert!(
            e.contains("unknown command /nope") && e.contains("/models-subagent"),
            "{e}"
        );
        assert!(parse("/model-subagent explore")
            .unwrap_err()
            .starts_with("usage:"));
        assert_eq!(
            parse("/permissions deny bash(git push:*)"),
            Ok(Slash::Permissions(Some((
                "deny".into(),
                "bash(git push:*)".into()
            ))))
        );
        assert!(parse("/permissions grant x")
            .unwrap_err()
            .starts_with("usage:"));
        assert!(parse("/quit now")
            .unwrap_err()
            .contains("takes no arguments"));
    }
}
