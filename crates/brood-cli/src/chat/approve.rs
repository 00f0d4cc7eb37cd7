//! Approvals in `brood chat`: the session's [`Approver`] hands each request to the
//! chat's loop over a channel and waits for the person's answer — the full-screen
//! UI shows it as a prompt over the screen (and queues what arrives meanwhile);
//! plain mode on a terminal asks on it, one question at a time ([`ask_line`]).

use brood::{Approval, ApprovalRequest, Approver};
use tokio::sync::{mpsc, oneshot};

/// A request the UI shows, and where its answer goes.
pub struct Asking {
    pub request: ApprovalRequest,
    answer: oneshot::Sender<Approval>,
}

impl Asking {
    /// Give the answer (the run waiting for it goes on).
    pub fn answer(self, approval: Approval) {
        // The run may have been cancelled meanwhile: then nobody waits.
        let _ = self.answer.send(approval);
    }
}

/// The approver a chat session is opened with.
pub struct UiApprover {
    tx: mpsc::UnboundedSender<Asking>,
}

/// An approver and the receiving end the UI's loop reads.
pub fn channel() -> (UiApprover, mpsc::UnboundedReceiver<Asking>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (UiApprover { tx }, rx)
}

#[async_trait::async_trait]
impl Approver for UiApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Approval {
        let (answer, rx) = oneshot::channel();
        let asking = Asking {
            request: request.clone(),
            answer,
        };
        if self.tx.send(asking).is_err() {
            return Approval::Deny {
                reason: "the chat's window is closed; nobody can approve this call".into(),
            };
        }
        rx.await.unwrap_or_else(|_| Approval::Deny {
            reason: "the chat ended before the user answered; do not retry this call".into(),
        })
    }
}

/// Plain mode's question, on the lines it prints (stderr): who asks, the tool,
/// its arguments and the rule, then the answers. `who` is the asking agent's
/// name. Model-written text is printed without control characters, so an
/// argument cannot move the cursor or retitle the terminal.
pub fn question(request: &ApprovalRequest, who: &str) -> Vec<String> {
    let clean = crate::words::one_line;
    let mut out = vec![format!(
        "approval needed: {} [{} · {}] wants to run {}",
        clean(who, 60),
        clean(&request.role, 40),
        clean(&request.agent_type, 40),
        clean(&request.tool, 80)
    )];
    out.push(format!("  {}", clean(&request.arguments.to_string(), 300)));
    if let Some((rule, source)) = &request.rule {
        out.push(format!(
            "  asked by the rule ask {} ({})",
            clean(rule, 200),
            clean(source, 200)
        ));
    }
    out
}

/// What plain mode asks after [`question`].
pub const ANSWERS: &str = "  y: allow once · s: allow for this session · n [reason]: deny > ";

/// A typed answer: `y`/`yes`, `s`/`session`; anything else denies — `n REASON`
/// (or any text) with that reason for the model, an empty line without one.
pub fn ask_line(line: &str) -> Approval {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" | "a" => Approval::AllowOnce,
        "s" | "session" => Approval::AllowForSession,
        "n" | "no" | "d" | "" if rest.trim().is_empty() => Approval::Deny {
            reason: "the user denied this call".into(),
        },
        "n" | "no" | "d" => Approval::Deny {
            reason: format!("the user denied this call: {}", rest.trim()),
        },
        _ => Approval::Deny {
            reason: format!("the user denied this call: {line}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_answers() {
        assert_eq!(ask_line("y"), Approval::AllowOnce);
        assert_eq!(ask_line(" Yes "), Approval::AllowOnce);
        assert_eq!(ask_line("s"), Approval::AllowForSession);
        let deny = |r: &str| Approval::Deny { reason: r.into() };
        assert_eq!(ask_line(""), deny("the user denied this call"));
        assert_eq!(ask_line("n"), deny("the user denied this call"));
        assert_eq!(
            ask_line("n use a temp dir"),
            deny("the user denied this call: use a temp dir")
        );
        // Not an answer: denied, never allowed.
        assert_eq!(ask_line("sure"), deny("the user denied this call: sure"));
    }
}
