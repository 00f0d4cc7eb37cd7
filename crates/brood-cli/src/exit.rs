//! brood's exit codes, one per class of failure, in one place (README "Exit
//! codes"). The class comes from the library: [`brood::Error::class`] for a
//! session that could not open or run, [`brood::RunReport::failure`] for a run that
//! ended without an answer.

use brood::{Error as SessionError, ErrorClass, RunReport};

/// The run answered (also after `max_turns` or a budget, with its final report).
pub const OK: u8 = 0;
/// The run failed for a reason of no class below (a run that cannot be resumed, a
/// worktree that cannot be made, …).
pub const FAILED: u8 = 1;
/// A usage or configuration problem: a flag, a config file, the key variable, the
/// workspace. Nothing was run.
pub const USAGE: u8 = 2;
/// The model endpoint failed after its retries: a status, no connection, a
/// timeout, an answer that is not one, a recording that does not match.
pub const PROVIDER: u8 = 3;
/// A limit or budget stopped the run before it could answer.
pub const LIMIT: u8 = 4;
/// The run was cancelled (SIGINT, SIGTERM, SIGHUP); its records are complete. A
/// second signal exits at once with 128 + its number instead.
pub const CANCELLED: u8 = 5;
/// brood itself failed: the ledger could not be opened or written, a task of the
/// session stopped.
pub const INTERNAL: u8 = 6;

/// The code of a failure of class `class`.
pub fn of_class(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Usage => USAGE,
        ErrorClass::Provider => PROVIDER,
        ErrorClass::Limit => LIMIT,
        ErrorClass::Cancelled => CANCELLED,
        ErrorClass::Internal => INTERNAL,
        _ => FAILED,
    }
}

/// The code of a session error.
pub fn of_error(e: &SessionError) -> u8 {
    of_class(e.class())
}

/// The code of a finished run.
pub fn of_report(report: &RunReport) -> u8 {
    report.failure().map_or(OK, of_class)
}
