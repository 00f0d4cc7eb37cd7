//! `brood run --allow RULE`: the approver of a session nobody can be asked in. A
//! call an `ask` rule stops runs only when an `--allow` rule covers it — the asking
//! rule itself given again, or a rule matching the whole call; otherwise it is
//! refused with a tool error naming the rule and the flag.

use brood::tool::Rule;
use brood::{Approval, ApprovalRequest, Approver};
use std::path::PathBuf;

/// The `--allow` rules of one `brood run`.
pub struct FlagApprover {
    rules: Vec<Rule>,
    root: PathBuf,
}

impl FlagApprover {
    /// Read every `--allow` value; a malformed one is an error naming it.
    pub fn new(values: &[String], root: PathBuf) -> Result<FlagApprover, String> {
        let rules = values
            .iter()
            .map(|v| Rule::parse(v).map_err(|e| format!("--allow: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        // Absolute paths in calls are matched against the real root.
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        Ok(FlagApprover { rules, root })
    }
}

#[async_trait::async_trait]
impl Approver for FlagApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Approval {
        let asking = request.rule.as_ref().map(|(text, _)| text.as_str());
        let covered = self.rules.iter().any(|r| {
            Some(r.text()) == asking
                || r.matches(&request.tool, &request.arguments, &self.root, true)
        });
        if covered {
            return Approval::AllowOnce;
        }
        let reason = match &request.rule {
            Some((rule, source)) => format!(
                "the permission rule ask {rule:?} ({source}) requires approval, and brood run cannot ask anyone: the user must rerun with --allow '{rule}' to let it run; do the work another way or report that it needs that approval"
            ),
            None => "this call requires approval, and brood run cannot ask anyone; do the work another way or report that it needs approval".to_string(),
        };
        Approval::Deny { reason }
    }
}
