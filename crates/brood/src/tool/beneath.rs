//! Opening paths beneath the workspace root, so the file the jail checked is the
//! file opened: no check-then-open race.
//!
//! The jail resolves a path to a canonical, symlink-free path inside the root; this
//! module opens that path relative to a descriptor of the root with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, Linux ≥ 5.6).
//! If a concurrent process swapped a component for a symlink after the check, the
//! kernel refuses the open (`ELOOP`) instead of following it out. Where `openat2`
//! is missing (`ENOSYS`, or `EPERM` from a seccomp filter) each component is
//! opened with `openat(O_NOFOLLOW)` from the previous one, with the same effect.
//! Writes open the parent directory the same way (creating missing directories one
//! `mkdirat` at a time) and create and rename inside that descriptor.

use rustix::fs::{
    fstat, mkdirat, openat, openat2, renameat, statat, unlinkat, AtFlags, FileType, Mode, OFlags,
    ResolveFlags, Stat,
};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

/// How often an `openat2` that raced a rename (`EAGAIN`) is retried.
const AGAIN_RETRIES: usize = 16;

/// The plain names of `rel`, refusing anything else (`..`, `/`): the jail hands
/// over canonical relative paths only.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain relative path",
            )),
        })
        .collect()
}

/// Open `rel` beneath `root` with `flags`, following no symlink on the way.
pub(crate) fn open(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOCTTY;
    let rel = if names(rel)?.is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    for _ in 0..AGAIN_RETRIES {
        match openat2(root, rel, flags, mode, resolve) {
            Err(Errno::AGAIN) => continue,
            Err(Errno::NOSYS) | Err(Errno::PERM) => {
                return open_by_components(root, rel, flags, mode)
            }
            r => return r.map_err(io::Error::from),
        }
    }
    Err(io::Error::from(Errno::AGAIN))
}

/// [`open`] without `openat2`: each directory opened with `O_NOFOLLOW` from the
/// previous one, the last name with `flags | O_NOFOLLOW`.
pub(crate) fn open_by_components(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let names = names(rel)?;
    let Some((last, dirs)) = names.split_last() else {
        return Ok(openat(root, ".", flags, mode)?);
    };
    let mut dir: Option<OwnedFd> = None;
    for name in dirs {
        let at = dir.as_ref().map_or(root, |d| d.as_fd());
        dir = Some(openat(at, *name, dir_flags(), Mode::empty())?);
    }
    let at = dir.as_ref().map_or(root, |d| d.as_fd());
    Ok(openat(at, *last, flags | OFlags::NOFOLLOW, mode)?)
}

/// Flags of a directory opened only to walk through it.
fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The directory `rel` beneath `root`, created (one `mkdirat` per missing name,
/// never through a symlink) when missing.
pub(crate) fn dir_creating(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let mut dir = openat(root, ".", dir_flags(), Mode::empty())?;
    for name in names(rel)? {
        match mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = openat(&dir, name, dir_flags(), Mode::empty())?;
    }
    Ok(dir)
}

/// The status of an open descriptor.
pub(crate) fn status(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    Ok(fstat(fd)?)
}

/// Whether `st` is a regular file, a directory, or something else.
pub(crate) fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// Replace `name` in `dir` with `data` atomically: a temp file beside it, flushed
/// to disk, renamed over it. An existing file keeps its permission bits; a
/// directory of that name is refused.
pub(crate) fn write_atomic_in(dir: BorrowedFd<'_>, name: &OsStr, data: &[u8]) -> io::Result<()> {
    let existing = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if file_type(&st) == FileType::Directory => {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory, not a file",
            ))
        }
        Ok(st) if file_type(&st) == FileType::RegularFile => Some(st.st_mode & 0o7777),
        _ => None,
    };
    let tmp = format!(
        ".{}.brood-{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    );
    let fd = openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )?;
    let result = (|| {
        let mut f = File::from(fd);
        if let Some(bits) = existing {
            rustix::fs::fchmod(&f, Mode::from_raw_mode(bits))?;
        }
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        Ok::<_, io::Error>(renameat(dir, tmp.as_str(), dir, name)?)
    })();
    if result.is_err() {
        let _ = unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn components_refuse_symlinks_and_dotdot() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/f"), "in").unwrap();
        std::fs::write(dir.path().join("secret"), "out").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("a/s")).unwrap();
        let rootfd = openat(rustix::fs::CWD, &root, dir_flags(), Mode::empty()).unwrap();
        let ro = OFlags::RDONLY;
        for open_fn in [open, open_by_components] {
            let mut text = String::new();
            File::from(open_fn(rootfd.as_fd(), Path::new("a/f"), ro, Mode::empty()).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "in");
            for bad in ["up/secret", "a/s", "../secret"] {
                assert!(
                    open_fn(rootfd.as_fd(), Path::new(bad), ro, Mode::empty()).is_err(),
                    "{bad}"
                );
            }
        }
        // Creating directories never goes through a symlink.
        assert!(dir_creating(rootfd.as_fd(), Path::new("up/new")).is_err());
        assert!(!dir.path().join("new").exists());
        dir_creating(rootfd.as_fd(), Path::new("x/y")).unwrap();
        assert!(root.join("x/y").is_dir());
    }
}
