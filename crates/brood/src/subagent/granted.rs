//! The grant a run was opened with, recorded with its spawn (the `grant` object of
//! its `spawned` event): the names of the tools it held after every narrowing (the
//! parent's grant, its role, its definition, the call's `allowed_tools`), its
//! permissions, and the `deny` and `ask` permission rules it ran under (the
//! session's at its spawn — config, `.claude/settings*.json`, rules added in the
//! session — and its definitions'). A resume re-derives the run's grant under
//! today's configuration, then narrows it to this record (`super::resume`), and
//! keeps every recorded rule today's rules lack: a grant narrows, never widens,
//! and resuming never loosens the rules a run ran under. (`allow` rules are not
//! kept: one would only let through what today's rules ask about.)
//!
//! A run recorded without one (by a brood from before this record) is not
//! resumed: what it was allowed cannot be known, so it is refused rather than
//! guessed ([`super::ResumeError::NoRecordedGrant`]).

use super::ctx::RunCtx;
use crate::ledger::{EventKind, EventRecord, JsonText};
use crate::tool::{CallGate, Permissions, RuleKind, RuleSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// What is kept of a run's grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedGrant {
    /// The tools the run held (offered and callable), by name.
    pub tools: BTreeSet<String>,
    /// Its permissions (capabilities, shell, write scopes, network).
    pub permissions: Permissions,
    /// The `deny` and `ask` rules it ran under.
    #[serde(default)]
    pub rules: Vec<RecordedRule>,
    /// A fork: how many of its parent's messages it started from (its transcript
    /// holds only what follows them; a resume takes them from the parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_messages: Option<usize>,
}

/// One permission rule as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedRule {
    /// `deny` or `ask`.
    pub kind: String,
    /// The rule as written.
    pub rule: String,
    /// Where it came from.
    pub source: String,
}

impl RecordedGrant {
    /// The record of a run holding `tools` under `permissions` and `rules`.
    #[cfg(test)]
    pub fn new(tools: &[String], permissions: &Permissions, rules: &RuleSet) -> Self {
        RecordedGrant {
            tools: tools.iter().cloned().collect(),
            permissions: permissions.clone(),
            rules: recorded_rules(rules),
            fork_messages: None,
        }
    }

    /// As stored in the `spawned` event: encoded once, here, and written as it is
    /// (`None` only if it could not be encoded: then no grant is recorded, and the
    /// run is never resumed).
    pub fn to_json(&self) -> Option<JsonText> {
        JsonText::of(self).ok()
    }

    /// The grant recorded in `events` (a run's, its `spawned` event first): `None`
    /// when none was recorded, `Err` (what is wrong) when it cannot be read.
    pub fn from_events(events: &[EventRecord]) -> Option<Result<RecordedGrant, String>> {
        let spawned = events.iter().find(|e| e.kind == EventKind::Spawned)?;
        let grant = spawned.payload.get("grant")?;
        Some(
            serde_json::from_value(grant.clone())
                .map_err(|e| format!("its recorded grant cannot be read ({e})")),
        )
    }

    /// `rebuilt` (today's grant for the run) narrowed to what was recorded: only
    /// the recorded tools, and no capability, shell, write scope or network it
    /// did not have. Held by `rebuilt`'s holder.
    pub fn narrow(&self, rebuilt: &Permissions) -> Permissions {
        let recorded = Permissions {
            allowed_tools: Some(match &self.permissions.allowed_tools {
                Some(listed) => listed.intersection(&self.tools).cloned().collect(),
                None => self.tools.clone(),
            }),
            ..self.permissions.clone()
        };
        recorded.intersect(rebuilt)
    }

    /// The recorded rules `today` (the rules the resumed run gets anyway) lacks,
    /// each naming where it came from; `Err` when one cannot be read back.
    pub fn missing_rules(&self, today: &RuleSet) -> Result<RuleSet, String> {
        let mut out = RuleSet::new();
        for r in &self.rules {
            let kind = RuleKind::parse(&r.kind)
                .filter(|k| *k != RuleKind::Allow)
                .ok_or_else(|| format!("its recorded rule kind {:?} is unknown", r.kind))?;
            let present = today
                .rules()
                .iter()
                .any(|t| t.kind == kind && t.rule.text() == r.rule.trim());
            if !present {
                let source = format!("recorded when it ran: {}", r.source);
                out.add(kind, &r.rule, &source)
                    .map_err(|e| format!("its recorded rule cannot be read ({e})"))?;
            }
        }
        Ok(out)
    }
}

/// The `deny` and `ask` rules of `rules`, as recorded.
fn recorded_rules(rules: &RuleSet) -> Vec<RecordedRule> {
    rules
        .rules()
        .iter()
        .filter(|r| matches!(r.kind, RuleKind::Deny | RuleKind::Ask))
        .map(|r| RecordedRule {
            kind: r.kind.as_str().to_string(),
            rule: r.rule.text().to_string(),
            source: r.source.clone(),
        })
        .collect()
}

/// What a grant record is made of.
struct GrantInputs<'a> {
    tools: &'a [String],
    permissions: &'a Arc<Permissions>,
    rules: Vec<RecordedRule>,
    fork_messages: Option<usize>,
}

/// The last grant record encoded, with what it was made of, one per session:
/// the children of one `task` (and the opens of one step of one kind) hold the
/// same grant, and share its text instead of each collecting its tool names into
/// a set and encoding the record again (issue 17.1: ~18 k instructions of a
/// child's ~63 k open, BENCHMARKS.md section 9, "the fifth start round"). A
/// record made of anything else — another tool list, permissions, rules or fork
/// — is built and encoded, and kept as the last one.
#[derive(Default)]
pub(crate) struct GrantTexts(Mutex<Option<LastGrant>>);

struct LastGrant {
    tools: Vec<String>,
    permissions: Arc<Permissions>,
    rules: Vec<RecordedRule>,
    fork_messages: Option<usize>,
    text: Option<JsonText>,
}

impl GrantTexts {
    /// The grant record of run `ctx` now, encoded (see [`RecordedGrant::to_json`]):
    /// its tools (its toolbox is built), its permissions, the session's rules
    /// (`gate`'s) and its definitions'; `fork_messages` for a fork.
    pub fn text_for(
        &self,
        gate: Option<&Arc<dyn CallGate>>,
        ctx: &RunCtx,
        fork_messages: Option<usize>,
    ) -> Option<JsonText> {
        let mut rules = gate.map(|g| g.session_rules()).unwrap_or_default();
        rules.extend(&ctx.rules);
        self.text_of(GrantInputs {
            tools: ctx.tool_names(),
            permissions: &ctx.permissions,
            rules: recorded_rules(&rules),
            fork_messages,
        })
    }

    fn text_of(&self, made_of: GrantInputs<'_>) -> Option<JsonText> {
        {
            let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = &*last {
                let same = l.fork_messages == made_of.fork_messages
                    && l.tools == made_of.tools
                    && (Arc::ptr_eq(&l.permissions, made_of.permissions)
                        || *l.permissions == **made_of.permissions)
                    && l.rules == made_of.rules;
                if same {
                    return l.text.clone();
                }
            }
        }
        // Encoded outside the lock: spawns of other parents compare meanwhile.
        let text = RecordedGrant {
            tools: made_of.tools.iter().cloned().collect(),
            permissions: (**made_of.permissions).clone(),
            rules: made_of.rules.clone(),
            fork_messages: made_of.fork_messages,
        }
        .to_json();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(LastGrant {
            tools: made_of.tools.to_vec(),
            permissions: made_of.permissions.clone(),
            rules: made_of.rules,
            fork_messages: made_of.fork_messages,
            text: text.clone(),
        });
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{Capability, ShellPolicy};

    #[test]
    fn narrowing_never_adds_a_tool_or_a_capability() {
        let mut ran = Permissions::full("explore");
        ran.shell = ShellPolicy::ReadOnly;
        ran.capabilities.remove(&Capability::Write);
        let mut rules = RuleSet::new();
        rules
            .add(RuleKind::Deny, "bash(git push:*)", "config")
            .unwrap();
        rules.add(RuleKind::Allow, "bash(ls)", "config").unwrap();
        let recorded = RecordedGrant::new(&["read_file".into(), "bash".into()], &ran, &rules);
        assert_eq!(recorded.rules.len(), 1, "allow rules are not kept");
        let back: RecordedGrant =
            serde_json::from_str(recorded.to_json().unwrap().as_str()).unwrap();
        assert_eq!(back, recorded);
        let today = Permissions::full("general");
        let p = back.narrow(&today);
        assert_eq!(
            p.allowed_tools,
            Some(["bash".to_string(), "read_file".to_string()].into())
        );
        assert!(!p.capabilities.contains(&Capability::Write));
        assert_eq!(p.shell, ShellPolicy::ReadOnly);
        assert_eq!(p.holder, "general");
        // Today's narrower grant stays narrower.
        let mut narrow = Permissions::full("general");
        narrow.allowed_tools = Some(["read_file".to_string()].into());
        assert_eq!(
            back.narrow(&narrow).allowed_tools,
            Some(["read_file".to_string()].into())
        );
        // Rules: kept unless today has them.
        let kept = back.missing_rules(&RuleSet::new()).unwrap();
        assert_eq!(kept.rules().len(), 1);
        assert!(kept.rules()[0]
            .source
            .contains("recorded when it ran: config"));
        assert!(back.missing_rules(&rules).unwrap().is_empty());
    }
}
