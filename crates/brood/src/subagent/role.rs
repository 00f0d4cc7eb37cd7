//! Roles: the built-in postures a child can take (general, explore, plan, review,
//! implementer, verifier, custom), their accepted spellings, the tool posture each
//! one is granted and the stance prompt that tells the child how to behave.
//!
//! A role is two things: a [`Permissions`] posture (which tools, which shell policy)
//! that is intersected with the parent's grant, and a stance prompt. The posture is
//! the enforced part; the prompt only explains it.
//!
//! | role        | tools                                                              | shell |
//! |-------------|--------------------------------------------------------------------|-------|
//! | general     | whatever the parent has                                            | the parent's |
//! | explore     | read_file, list_dir, find_files, grep, todo_*, memory_read/search  | read-only |
//! | plan        | explore's + write_file, edit_file (writes only under `.brood/plans/`) | read-only |
//! | review      | read_file, list_dir, find_files, grep, todo_*, memory_read/search  | none |
//! | implementer | read tools, todo_*, memory_*, remember, write_file, edit_file, bash | full |
//! | verifier    | read tools, todo_*, memory_*, remember, bash (no write/edit)        | full |
//! | custom      | exactly the spawn's `allowed_tools` (see [`crate::subagent::grant`]) | only if `bash` is listed |
//!
//! "Read-only shell" needs a sandbox (landlock). When the caller says it is not
//! available, read-only roles get [`ShellPolicy::None`]: no shell at all, never an
//! unsandboxed one.
//!
//! Decisions: only `general` (and `custom`, when it lists them) can delegate further;
//! the specialised roles are leaves, so their postures carry no delegation tools.
//! Read-only roles get `memory_read`/`memory_search` but not `remember`; the
//! todo tools are assumed to be of the Read capability class (they touch only the
//! run's own list, not the workspace).

use crate::tool::{Capability, Permissions, ShellPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use thiserror::Error;

/// Tools that only read the workspace.
pub const READ_TOOLS: [&str; 4] = ["read_file", "list_dir", "find_files", "grep"];
/// The run's own todo list.
pub const TODO_TOOLS: [&str; 2] = ["todo_read", "todo_write"];
/// Reading and searching the memory files.
pub const MEMORY_READ_TOOLS: [&str; 2] = ["memory_read", "memory_search"];
/// Appending a note to memory.
pub const REMEMBER_TOOL: &str = "remember";
/// Tools that change files.
pub const WRITE_TOOLS: [&str; 2] = ["write_file", "edit_file"];
/// The shell tool.
pub const SHELL_TOOL: &str = "bash";
/// Where the plan role may write, relative to the workspace root.
pub const PLAN_WRITE_SCOPE: &str = ".brood/plans";

/// A built-in posture for a child agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Do the whole task with whatever the parent may do (the default).
    General,
    /// Read-only mapping of the code; returns evidence.
    Explore,
    /// Decompose an objective into steps; writes only plan artifacts.
    Plan,
    /// Grade an existing change; never patches.
    Review,
    /// Land a specified change with the smallest edit.
    Implementer,
    /// Run the checks and report an authoritative pass/fail.
    Verifier,
    /// Exactly the tools the spawn lists in `allowed_tools`.
    Custom,
}

/// An agent type that is neither a role nor an alias.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown role '{given}'; accepted roles: {}; aliases: {}", accepted_roles().join(", "), alias_list())]
pub struct UnknownRole {
    pub(crate) given: String,
}

fn accepted_roles() -> Vec<&'static str> {
    Role::ALL.iter().map(|r| r.as_str()).collect()
}

fn alias_list() -> String {
    Role::ALL
        .iter()
        .flat_map(|r| {
            r.aliases()
                .iter()
                .map(move |a| format!("{a}→{}", r.as_str()))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Role {
    /// Every built-in role, in the order they are listed to users.
    pub const ALL: [Role; 7] = [
        Role::General,
        Role::Explore,
        Role::Plan,
        Role::Review,
        Role::Implementer,
        Role::Verifier,
        Role::Custom,
    ];

    /// The canonical (lowercase) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::General => "general",
            Role::Explore => "explore",
            Role::Plan => "plan",
            Role::Review => "review",
            Role::Implementer => "implementer",
            Role::Verifier => "verifier",
            Role::Custom => "custom",
        }
    }

    /// Other accepted spellings (lowercase).
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            Role::General => &["worker", "default", "general-purpose"],
            Role::Explore => &["explorer", "exploration"],
            Role::Plan => &["planning", "planner", "awaiter"],
            Role::Review => &["reviewer", "code-review", "code_review"],
            Role::Implementer => &["implement", "implementation", "builder"],
            Role::Verifier => &["verify", "verification", "validator", "tester"],
            Role::Custom => &[],
        }
    }

    /// Parse a role name or alias, case-insensitively (surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<Role, UnknownRole> {
        let wanted = s.trim().to_ascii_lowercase();
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == wanted || r.aliases().contains(&wanted.as_str()))
            .ok_or_else(|| UnknownRole {
                given: s.to_string(),
            })
    }

    /// Every accepted spelling with the role it names: canonical names first, then aliases.
    pub fn accepted_names() -> Vec<(&'static str, Role)> {
        let mut out: Vec<(&'static str, Role)> =
            Role::ALL.iter().map(|r| (r.as_str(), *r)).collect();
        for r in Role::ALL {
            out.extend(r.aliases().iter().map(|a| (*a, r)));
        }
        out
    }

    /// Roles that must not change the workspace (plan may only write plan artifacts).
    pub fn is_read_only(self) -> bool {
        matches!(self, Role::Explore | Role::Plan | Role::Review)
    }

    /// Turns a child of this role gets unless configured otherwise: 20 for the
    /// read-only roles, 50 for the others.
    pub fn default_max_turns(self) -> u32 {
        if self.is_read_only() {
            20
        } else {
            50
        }
    }

    /// One line for a model choosing an agent type.
    pub fn summary(self) -> &'static str {
        match self {
            Role::General => "does the whole task with the parent's tools (the default)",
            Role::Explore => "read-only search of the code; returns path:line-range evidence",
            Role::Plan => "turns an objective into checked steps; writes only under .brood/plans/",
            Role::Review => "grades an existing change with severities; never edits",
            Role::Implementer => "lands a specified change with the smallest edit, then checks it",
            Role::Verifier => "runs the tests or checks and reports an authoritative pass/fail",
            Role::Custom => "exactly the tools listed in allowed_tools",
        }
    }

    /// The posture of this role: what it may do before intersecting with the parent.
    ///
    /// `read_only_shell_available` says whether a sandboxed read-only shell can be
    /// provided; without it the read-only roles get no shell. For [`Role::Custom`]
    /// this returns an empty posture: custom tools come from `allowed_tools`
    /// ([`custom_posture`]).
    pub fn posture(self, read_only_shell_available: bool) -> Permissions {
        let ro_shell = if read_only_shell_available {
            ShellPolicy::ReadOnly
        } else {
            ShellPolicy::None
        };
        let base_read: Vec<&str> = READ_TOOLS
            .iter()
            .chain(TODO_TOOLS.iter())
            .chain(MEMORY_READ_TOOLS.iter())
            .copied()
            .collect();
        // Explore and review answer one focused question: no todo list (its two
        // schemas were a fifth of their first request).
        let scan: Vec<&str> = READ_TOOLS
            .iter()
            .chain(MEMORY_READ_TOOLS.iter())
            .copied()
            .collect();
        match self {
            Role::General => Permissions::full(self.as_str()),
            Role::Explore => posture(self, &scan, &[], ro_shell, None),
            Role::Plan => posture(
                self,
                &base_read,
                &WRITE_TOOLS,
                ro_shell,
                Some(vec![PathBuf::from(PLAN_WRITE_SCOPE)]),
            ),
            Role::Review => posture(self, &scan, &[], ShellPolicy::None, None),
            Role::Implementer => posture(
                self,
                &base_read,
                &[REMEMBER_TOOL, WRITE_TOOLS[0], WRITE_TOOLS[1]],
                ShellPolicy::Full,
                None,
            ),
            Role::Verifier => posture(self, &base_read, &[REMEMBER_TOOL], ShellPolicy::Full, None),
            Role::Custom => Permissions {
                capabilities: BTreeSet::new(),
                allowed_tools: Some(BTreeSet::new()),
                write_scopes: None,
                shell: ShellPolicy::None,
                network: true,
                holder: self.as_str().to_string(),
            },
        }
    }

    /// How a child of this role should behave, written for the model.
    pub fn stance_prompt(self) -> &'static str {
        match self {
            Role::General => GENERAL_STANCE,
            Role::Explore => EXPLORE_STANCE,
            Role::Plan => PLAN_STANCE,
            Role::Review => REVIEW_STANCE,
            Role::Implementer => IMPLEMENTER_STANCE,
            Role::Verifier => VERIFIER_STANCE,
            Role::Custom => CUSTOM_STANCE,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The posture of a custom child: exactly `allowed_tools`, a full shell only if
/// `bash` is among them. It is still intersected with the parent's grant.
pub fn custom_posture<S: AsRef<str>>(allowed_tools: &[S]) -> Permissions {
    let tools: BTreeSet<String> = allowed_tools
        .iter()
        .map(|t| t.as_ref().to_string())
        .collect();
    let has_shell = tools.contains(SHELL_TOOL);
    let mut capabilities: BTreeSet<Capability> = Capability::ALL.into_iter().collect();
    if !has_shell {
        capabilities.remove(&Capability::Shell);
    }
    Permissions {
        capabilities,
        allowed_tools: Some(tools),
        write_scopes: None,
        shell: if has_shell {
            ShellPolicy::Full
        } else {
            ShellPolicy::None
        },
        network: true,
        holder: Role::Custom.as_str().to_string(),
    }
}

fn posture(
    role: Role,
    base: &[&str],
    extra: &[&str],
    shell: ShellPolicy,
    write_scopes: Option<Vec<PathBuf>>,
) -> Permissions {
    let mut tools: BTreeSet<String> = base.iter().chain(extra).map(|s| s.to_string()).collect();
    let mut capabilities: BTreeSet<Capability> = [Capability::Read, Capability::Memory].into();
    if extra.iter().any(|t| WRITE_TOOLS.contains(t)) {
        capabilities.insert(Capability::Write);
    }
    if shell != ShellPolicy::None {
        capabilities.insert(Capability::Shell);
        tools.insert(SHELL_TOOL.to_string());
    }
    Permissions {
        capabilities,
        allowed_tools: Some(tools),
        write_scopes,
        // Read-only shells never reach the network; writers may where the user's
        // `[sandbox] network` allows it.
        network: shell == ShellPolicy::Full,
        shell,
        holder: role.as_str().to_string(),
    }
}

const GENERAL_STANCE: &str = "\
Do the whole assignment yourself with your tools. Stay inside it, do not ask what you \
could find out by looking, and when something blocks you, say exactly what instead of \
guessing.";

const EXPLORE_STANCE: &str = "\
You are an explorer: find facts in the code, do not change it (no writes; any shell is \
read-only).
- Orient first (the project root; README.md or AGENTS.md if the tree is new), then search \
only where the answer is likely: a few targeted greps and reads, not a walk of the tree.
- Report findings as precise `path:start-end` citations, each with one line on why it \
matters; the parent opens them next. No narration, no tour.";

const PLAN_STANCE: &str = "\
You are a planning sub-agent. Turn the objective into an ordered list of steps that \
someone else will carry out. For every step name what it produces (files, functions, \
tests) and how to check it is done. Read as much as you need to make the plan concrete, \
but do not execute it: you may only write plan files under .brood/plans/, and any shell \
you have is read-only. Call out unknowns and decisions the parent has to make.";

const REVIEW_STANCE: &str = "\
You are a reviewer sub-agent. Read the change you are pointed at and grade it. Give \
every finding a severity (critical, high, medium, low or nit), the place it is in as \
`path:start-end`, what is wrong and why it matters. You never edit anything: for each \
finding, describe the fix precisely enough that an implementer can apply it without \
asking. Finish with an overall verdict (ship, fix first, or rethink).";

const IMPLEMENTER_STANCE: &str = "\
You are an implementer sub-agent. The change is already decided; land it. Make the \
smallest edit that does what is asked: no drive-by refactoring, no renames, no \
reformatting of code you did not need to touch. Before handing back, run a quick check \
that exercises the change (a build, a focused test, or running the command) and report \
its outcome honestly, including when it fails.";

const VERIFIER_STANCE: &str = "\
You are a verifier sub-agent. Run the checks you are asked for and give an \
authoritative verdict: PASS or FAIL, with the exact commands you ran. You do not fix \
anything and you cannot edit files. For each failure, capture the failing assertion or \
error message and the relevant part of the stack trace or log, verbatim. Put your ideas \
about causes and fixes under RISKS, clearly marked as suggestions.";

const CUSTOM_STANCE: &str = "\
You are a sub-agent with a deliberately narrow set of tools chosen by the parent. Do the \
assignment with those tools only; if it cannot be done with them, say what is missing \
under BLOCKERS instead of working around it.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_maps_to_its_role_and_only_one() {
        let names = Role::accepted_names();
        let mut seen = BTreeSet::new();
        for (name, role) in &names {
            assert!(seen.insert(*name), "{name} listed twice");
            assert_eq!(Role::parse(name).unwrap(), *role);
            assert_eq!(Role::parse(&name.to_uppercase()).unwrap(), *role);
        }
        assert_eq!(names.len(), 7 + 18);
    }

    #[test]
    fn unknown_role_lists_accepted_set() {
        let e = Role::parse("wizard").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("'wizard'"));
        for (name, _) in Role::accepted_names() {
            assert!(msg.contains(name), "{msg} lacks {name}");
        }
    }

    #[test]
    fn read_only_roles_lose_shell_without_sandbox() {
        for role in [Role::Explore, Role::Plan] {
            let p = role.posture(false);
            assert_eq!(p.shell, ShellPolicy::None);
            assert!(!p.capabilities.contains(&Capability::Shell));
            assert!(!p.allowed_tools.as_ref().unwrap().contains(SHELL_TOOL));
            let p = role.posture(true);
            assert_eq!(p.shell, ShellPolicy::ReadOnly);
            assert!(p.allowed_tools.as_ref().unwrap().contains(SHELL_TOOL));
        }
        // Roles with a full shell do not depend on the sandbox.
        assert_eq!(Role::Verifier.posture(false).shell, ShellPolicy::Full);
    }

    #[test]
    fn max_turns_defaults() {
        assert_eq!(Role::Explore.default_max_turns(), 20);
        assert_eq!(Role::Plan.default_max_turns(), 20);
        assert_eq!(Role::Review.default_max_turns(), 20);
        assert_eq!(Role::General.default_max_turns(), 50);
        assert_eq!(Role::Implementer.default_max_turns(), 50);
        assert_eq!(Role::Verifier.default_max_turns(), 50);
        assert_eq!(Role::Custom.default_max_turns(), 50);
    }
}
