//! The grant a run was opened with, recorded with its spawn (the `grant` object of
//! its `spawned` event): the names of the tools it held after every narrowing (the
//! parent's grant, its role, its definition, the call's `allowed_tools`) and its
//! permissions. A resume re-derives the run's grant under today's configuration,
//! then narrows it to this record (`super::resume`): a grant narrows, never widens.
//!
//! A run recorded without one (by a brood from before this record) is not
//! resumed: what it was allowed cannot be known, so it is refused rather than
//! guessed ([`super::ResumeError::NoRecordedGrant`]).

use crate::ledger::{EventKind, EventRecord};
use crate::tool::Permissions;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;

/// What is kept of a run's grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedGrant {
    /// The tools the run held (offered and callable), by name.
    pub tools: BTreeSet<String>,
    /// Its permissions (capabilities, shell, write scopes, network).
    pub permissions: Permissions,
}

impl RecordedGrant {
    /// The record of a run holding `tools` under `permissions`.
    pub fn new(tools: &[String], permissions: &Permissions) -> Self {
        RecordedGrant {
            tools: tools.iter().cloned().collect(),
            permissions: permissions.clone(),
        }
    }

    /// As stored in the `spawned` event.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
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
        let recorded = RecordedGrant::new(&["read_file".into(), "bash".into()], &ran);
        let back: RecordedGrant = serde_json::from_value(recorded.to_value()).unwrap();
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
    }
}
