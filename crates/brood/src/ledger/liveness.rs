//! Boot liveness by file lock (the SQLite backend's): a live boot holds an exclusive
//! `flock` on `.brood/state/boots/<boot_id>.lock`; the kernel drops it when the
//! process dies, so taking it is a real liveness test (see `boot` for the rules).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use super::error::LedgerError;
use super::paths::LedgerPaths;

/// This process's hold on its boot. Dropping it removes the lock file, then releases
/// the lock (closing the file).
#[derive(Debug)]
pub(crate) struct BootLock {
    path: PathBuf,
    _file: File,
}

impl BootLock {
    pub fn acquire(paths: &LedgerPaths, boot_id: &str) -> Result<BootLock, LedgerError> {
        let path = paths.boot_lock(boot_id);
        let temp = paths.boots.join(format!(".{boot_id}.lock.tmp"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| LedgerError::io(&temp, e))?;
        if !try_flock(&file).map_err(|e| LedgerError::io(&temp, e))? {
            return Err(LedgerError::Lock {
                path: temp,
                detail: "a fresh lock file is already locked".into(),
            });
        }
        std::fs::rename(&temp, &path).map_err(|e| LedgerError::io(&path, e))?;
        Ok(BootLock { path, _file: file })
    }
}

impl Drop for BootLock {
    fn drop(&mut self) {
        // Removed while still locked; a prober that opened it before the unlink takes
        // the lock after we close, finds nothing unfinished, and removes nothing.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a probe found.
#[derive(Debug)]
pub(crate) enum Liveness {
    Alive,
    /// Dead. While the guard lives we hold the dead boot's lock (if it had a file).
    Dead(DeadBoot),
}

#[derive(Debug)]
pub(crate) struct DeadBoot {
    path: PathBuf,
    file: Option<File>,
}

impl DeadBoot {
    /// A dead boot with no lock file to remove (its liveness was not a file).
    pub fn without_file() -> Self {
        DeadBoot {
            path: PathBuf::new(),
            file: None,
        }
    }

    /// Remove the dead boot's lock file (after its runs were marked), then release it.
    pub fn remove_lock_file(self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Is boot `boot_id` alive? Takes its lock for a moment when it is dead.
pub(crate) fn probe(paths: &LedgerPaths, boot_id: &str) -> Result<Liveness, LedgerError> {
    let path = paths.boot_lock(boot_id);
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Liveness::Dead(DeadBoot { path, file: None }))
        }
        Err(e) => return Err(LedgerError::io(&path, e)),
    };
    if try_flock(&file).map_err(|e| LedgerError::io(&path, e))? {
        Ok(Liveness::Dead(DeadBoot {
            path,
            file: Some(file),
        }))
    } else {
        Ok(Liveness::Alive)
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: Ok(true) when taken, Ok(false) when another open file
/// description holds it.
fn try_flock(file: &File) -> std::io::Result<bool> {
    loop {
        // SAFETY: flock on a valid, open file descriptor owned by `file`.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}
