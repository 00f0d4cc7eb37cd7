//! The signals that cancel a `brood run`: SIGINT (Ctrl-C), SIGTERM (`timeout`, CI
//! runners, process supervisors) and SIGHUP (a closed terminal). All three mean the
//! same: cancel the run and its children, record them `cancelled` naming the
//! signal, print what there is, exit 5 (`exit::CANCELLED`). A second one exits at
//! once.

use std::io;

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    Int,
    Term,
    Hup,
}

impl Sig {
    pub fn name(self) -> &'static str {
        match self {
            Sig::Int => "SIGINT",
            Sig::Term => "SIGTERM",
            Sig::Hup => "SIGHUP",
        }
    }

    /// The exit status of a process that stops because of this signal, as shells
    /// report it: 128 + the signal's number.
    pub fn exit_code(self) -> u8 {
        match self {
            Sig::Hup => 128 + 1,
            Sig::Int => 128 + 2,
            Sig::Term => 128 + 15,
        }
    }
}

/// The installed handlers. While they exist the default action (die at once, with
/// no record and no output) is replaced by delivery here.
pub struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Take over SIGINT, SIGTERM and SIGHUP (must run inside the tokio runtime).
    #[cfg(unix)]
    pub fn install() -> io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {})
    }

    /// The next signal. Never resolves once the handlers are gone.
    #[cfg(unix)]
    pub async fn next(&mut self) -> Sig {
        loop {
            tokio::select! {
                Some(()) = self.int.recv() => return Sig::Int,
                Some(()) = self.term.recv() => return Sig::Term,
                Some(()) = self.hup.recv() => return Sig::Hup,
                else => std::future::pending::<()>().await,
            }
        }
    }

    #[cfg(not(unix))]
    pub async fn next(&mut self) -> Sig {
        match tokio::signal::ctrl_c().await {
            Ok(()) => Sig::Int,
            Err(_) => std::future::pending().await,
        }
    }
}

/// The next signal, or never when none could be installed.
pub async fn next(signals: &mut Option<Signals>) -> Sig {
    match signals {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}
