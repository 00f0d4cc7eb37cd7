//! Approvals in the full-screen UI: the session's [`Approver`] hands each request
//! to the UI's event loop over a channel and waits for the person's answer (the
//! library asks one question at a time; the UI queues what arrives meanwhile).

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

/// The approver a UI session is opened with.
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
