//! Per-path write locks of one session, so parallel `write_file`/`edit_file` calls
//! on one file (in one step, or from sibling children) take turns: `edit_file`'s
//! read-modify-write never loses another call's edit.
//!
//! The map lives in the session's [`Workspace`](super::Workspace) (shared by every
//! run of the session), keyed by the canonical path; entries hold weak references,
//! so a path nobody writes costs nothing once its writers are done. The locks are
//! blocking locks taken on the blocking threads that do the file work, never held
//! across an `.await`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Dead entries are pruned when the map grows past this many (then past twice
/// the live count), so the map stays as large as the paths being written.
const PRUNE_AT: usize = 256;

/// The write locks of one session, by canonical path.
#[derive(Debug, Default)]
pub(crate) struct WriteLocks {
    inner: Mutex<Map>,
}

#[derive(Debug, Default)]
struct Map {
    locks: HashMap<PathBuf, Weak<Mutex<()>>>,
    prune_at: usize,
}

/// One path's lock, held while the guard lives.
pub(crate) struct PathLock {
    lock: Arc<Mutex<()>>,
}

impl PathLock {
    /// Wait for the path's turn. A poisoned lock (a writer panicked) is taken over:
    /// the file itself was replaced atomically or not at all.
    pub(crate) fn hold(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl WriteLocks {
    /// The lock of `path` (canonical), shared with every other caller of that path
    /// while any of them holds it.
    pub(crate) fn of(&self, path: &Path) -> PathLock {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = map.locks.get(path).and_then(Weak::upgrade) {
            return PathLock { lock };
        }
        let lock = Arc::new(Mutex::new(()));
        map.locks.insert(path.to_path_buf(), Arc::downgrade(&lock));
        if map.locks.len() >= map.prune_at.max(PRUNE_AT) {
            map.locks.retain(|_, w| w.strong_count() > 0);
            map.prune_at = map.locks.len() * 2;
        }
        PathLock { lock }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_path_one_lock_and_dead_entries_go() {
        let locks = WriteLocks::default();
        let a = locks.of(Path::new("/w/a"));
        let a2 = locks.of(Path::new("/w/a"));
        assert!(Arc::ptr_eq(&a.lock, &a2.lock));
        let b = locks.of(Path::new("/w/b"));
        assert!(!Arc::ptr_eq(&a.lock, &b.lock));
        drop((a, a2, b));
        for i in 0..1000 {
            let _held = locks.of(Path::new(&format!("/w/{i}")));
        }
        let len = locks.inner.lock().unwrap().locks.len();
        assert!(len <= PRUNE_AT, "{len} entries kept");
    }
}
