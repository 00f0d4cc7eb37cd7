//! The open-file limit a large tree needs. Every running child holds a connection
//! to its provider (over HTTP/1.1; HTTP/2 shares one), the ledger holds a few files,
//! and tools open more: `max_concurrent = 1024` does not fit the common soft limit
//! of 1024 descriptors. [`raise_open_files`] lifts the soft limit towards the hard
//! one, no further than [`OPEN_FILES_WANTED`]: shells inherit the limit, and some
//! programs walk every possible descriptor at start, so the process does not take
//! the hard limit (often a million) when it needs a few thousand.

use std::io;

/// The soft limit brood asks for: 1024 children's connections, the ledger, tools,
/// and room for each child's files.
pub const OPEN_FILES_WANTED: u64 = 16_384;

/// The soft `RLIMIT_NOFILE` before and after: raised to `min(hard, wanted)` when it
/// was lower, left alone otherwise (never lowered). Errors only when the limit
/// cannot be read or set.
pub fn raise_open_files(wanted: u64) -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid resource and a pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before: u64 = lim.rlim_cur;
    let target: u64 = wanted.min(lim.rlim_max);
    if lim.rlim_cur >= target {
        return Ok((before, before));
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit with a valid resource and a pointer to a local struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((before, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_lowers_and_never_passes_the_hard_limit() {
        // Asking for 1 descriptor leaves a higher soft limit as it is.
        let (before, after) = raise_open_files(1).unwrap();
        assert_eq!(before, after);
        let (_, after) = raise_open_files(OPEN_FILES_WANTED).unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, after);
        assert!(after >= before && after <= lim.rlim_max);
        assert!(after >= OPEN_FILES_WANTED.min(lim.rlim_max));
    }
}
