//! The workspace jail: every path a tool touches resolves inside the root.
//!
//! [`Workspace::resolve`] turns a path a model wrote (relative to the root, or
//! absolute) into a canonical path inside the root. The longest existing prefix is
//! canonicalized (so `..` and symlinks are resolved the way the kernel would), a
//! dangling symlink is followed to its target, and the non-existing tail (needed to
//! create new files) may only contain plain names. Whatever the route, the final path
//! is re-checked against the root; a path that leaves it is refused with
//! [`ToolError::OutsideWorkspace`] naming the path and why.
//!
//! Protected paths (brood's state, `.brood/`, `.claude/`, `.git/`) are refused on the
//! canonical path (see `protect`). The resolved path is then opened beneath a
//! descriptor of the root with no symlink followed (see `beneath`), so a process
//! that swaps a component for a symlink between the check and the open makes the
//! open fail instead of leading it out. Regular files with more than one hard link
//! are not read: their other names may lie outside the workspace.

use super::beneath;
use super::locks::{PathLock, WriteLocks};
use super::protect::{append_refusal, read_refusal, write_refusal};
use super::{clip, Permissions, ToolError};
use rustix::fs::{FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// How many symlinks one resolution may follow before it is refused (as the kernel's
/// `ELOOP` limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// Longest path (in bytes) a tool takes, as the kernel's `PATH_MAX`.
pub(crate) const PATH_MAX_BYTES: usize = 4096;

/// A workspace root. All tool paths resolve inside it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// Per-path write locks of the session using this workspace (clones share them).
    writes: Arc<WriteLocks>,
    /// The root, opened once: every file is opened beneath it.
    root_fd: Arc<OwnedFd>,
}

/// A file a tool opened through the jail, with what `fstat` said of it.
pub(crate) struct Opened {
    pub file: File,
    pub kind: FileType,
    pub len: u64,
}

/// Why a resolution failed before it was turned into a [`ToolError`].
enum Refusal {
    /// The resolved path lies outside the root.
    Outside(PathBuf),
    /// `..` in a part of the path that does not exist.
    DotDotInNewTail,
    /// Too many symlinks.
    Loop,
    /// The file system said no (permission denied and the like).
    Io(io::Error),
}

impl Workspace {
    /// Open `root` (canonicalized; it must exist and be a directory).
    pub fn open(root: impl AsRef<Path>) -> std::io::Result<Self> {
        let root = std::fs::canonicalize(root.as_ref())?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace root {} is not a directory", root.display()),
            ));
        }
        let root_fd = rustix::fs::openat(
            rustix::fs::CWD,
            &root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Workspace {
            root,
            writes: Arc::default(),
            root_fd: Arc::new(root_fd),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve `path` (relative to the root, or absolute inside it) to a canonical
    /// path inside the root. The path need not exist (its parent directories need not
    /// either), but every existing part is resolved, symlinks included, and the
    /// result must stay inside the root. An empty path means the root. A path tools
    /// may not read (brood's state) is refused with [`ToolError::Protected`].
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let resolved = self.resolve_inside(path)?;
        self.check(path, &resolved, read_refusal)?;
        Ok(resolved)
    }

    /// [`resolve`](Self::resolve) for `remember`'s append: the result must be the
    /// workspace memory file or a path tools may write ([`ToolError::Protected`]
    /// otherwise), so a memory file symlinked to a hook is refused.
    pub(crate) fn resolve_for_append(&self, path: &str) -> Result<PathBuf, ToolError> {
        let resolved = self.resolve_inside(path)?;
        self.check(path, &resolved, append_refusal)?;
        Ok(resolved)
    }

    /// Refuse `resolved` (given as `path`) when `rule` says why.
    fn check(
        &self,
        path: &str,
        resolved: &Path,
        rule: fn(&Path) -> Option<&'static str>,
    ) -> Result<(), ToolError> {
        let rel = resolved.strip_prefix(&self.root).unwrap_or(resolved);
        let why = rule(rel)
            .or_else(|| super::protect::alias(&self.root, resolved).and_then(|named| rule(&named)));
        match why {
            Some(why) => Err(ToolError::Protected {
                path: clip(path),
                reason: format!("'{}' {why}", clip(&self.display(resolved))),
            }),
            None => Ok(()),
        }
    }

    /// The jail alone: `path` resolved to a canonical path inside the root.
    fn resolve_inside(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.len() > PATH_MAX_BYTES {
            return Err(ToolError::InvalidArguments {
                tool: "path".into(),
                detail: format!(
                    "path '{}' is {} bytes, longer than the {PATH_MAX_BYTES} a path may have",
                    clip(path),
                    path.len()
                ),
            });
        }
        if path.contains('\0') {
            return Err(ToolError::InvalidArguments {
                tool: "path".into(),
                detail: format!("path {:?} contains a NUL byte", clip(path)),
            });
        }
        let given = Path::new(path);
        let candidate = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        match resolve_existing_prefix(&candidate, 0) {
            Ok(resolved) if resolved.starts_with(&self.root) => Ok(resolved),
            Ok(resolved) => Err(ToolError::OutsideWorkspace {
                path: clip(path),
                reason: self.outside_reason(given, &resolved),
            }),
            Err(Refusal::Outside(resolved)) => Err(ToolError::OutsideWorkspace {
                path: clip(path),
                reason: self.outside_reason(given, &resolved),
            }),
            Err(Refusal::DotDotInNewTail) => Err(ToolError::OutsideWorkspace {
                path: clip(path),
                reason: "'..' follows a directory that does not exist, so it cannot be checked"
                    .into(),
            }),
            Err(Refusal::Loop) => Err(ToolError::OutsideWorkspace {
                path: clip(path),
                reason: format!("more than {MAX_SYMLINK_HOPS} symlinks to follow"),
            }),
            Err(Refusal::Io(e)) => Err(ToolError::Io {
                path: clip(path),
                detail: e.to_string(),
            }),
        }
    }

    /// [`resolve`](Self::resolve) for a write by `tool`: additionally the result must
    /// not be a protected path ([`ToolError::Protected`]), and must lie under one of
    /// `permissions.write_scopes` (workspace-relative directories) when those are
    /// set; otherwise [`ToolError::NotGranted`] names the tool, the holder and the
    /// allowed scopes.
    pub(crate) fn resolve_for_write(
        &self,
        path: &str,
        tool: &str,
        permissions: &Permissions,
    ) -> Result<PathBuf, ToolError> {
        let resolved = self.resolve_inside(path)?;
        self.check(path, &resolved, write_refusal)?;
        if let Some(scopes) = &permissions.write_scopes {
            let inside = scopes.iter().any(|scope| {
                scope
                    .to_str()
                    .and_then(|s| self.resolve(s).ok())
                    .is_some_and(|dir| resolved.starts_with(dir))
            });
            if !inside {
                let list = if scopes.is_empty() {
                    "nowhere".to_string()
                } else {
                    scopes
                        .iter()
                        .map(|s| format!("{}/", s.display()))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(ToolError::NotGranted {
                    tool: tool.to_string(),
                    holder: permissions.holder.clone(),
                    reason: format!(
                        "'{}' is outside the writable scopes; writes are allowed only under: {list}",
                        clip(&self.display(&resolved))
                    ),
                });
            }
        }
        Ok(resolved)
    }

    /// The write lock of `abs` (a path [`resolve_for_write`](Self::resolve_for_write)
    /// returned): writers of one file through this workspace take turns.
    pub(crate) fn write_lock(&self, abs: &Path) -> PathLock {
        self.writes.of(abs)
    }

    /// `abs` (a path [`resolve`](Self::resolve) returned) relative to the root.
    fn relative<'a>(&self, abs: &'a Path) -> &'a Path {
        abs.strip_prefix(&self.root).unwrap_or(Path::new(""))
    }

    /// Open `abs` (a path [`resolve`](Self::resolve) returned, shown as `shown`)
    /// for reading, beneath the root and through no symlink. It does not block on a
    /// FIFO; a regular file with more than one hard link is refused
    /// ([`ToolError::HardLinked`]).
    pub(crate) fn open_read(&self, abs: &Path, shown: &str) -> Result<Opened, ToolError> {
        let fd = beneath::open(
            self.root_fd.as_fd(),
            self.relative(abs),
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| open_error(shown, e))?;
        let st = beneath::status(fd.as_fd()).map_err(|e| open_error(shown, e))?;
        let kind = beneath::file_type(&st);
        if kind == FileType::RegularFile && st.st_nlink > 1 {
            return Err(ToolError::HardLinked {
                path: clip(shown),
                links: st.st_nlink,
            });
        }
        Ok(Opened {
            file: File::from(fd),
            kind,
            len: u64::try_from(st.st_size).unwrap_or(0),
        })
    }

    /// Replace the file at `abs` (a path [`resolve_for_write`](Self::resolve_for_write)
    /// returned) with `data`, atomically; missing parent directories are created.
    /// Everything happens beneath the root, through no symlink.
    pub(crate) fn write_file(&self, abs: &Path, shown: &str, data: &[u8]) -> Result<(), ToolError> {
        let (dir, name) = self.parent_of(abs, shown)?;
        beneath::write_atomic_in(dir.as_fd(), name, data).map_err(|e| open_error(shown, e))
    }

    /// Open the file at `abs` for appending (created if missing, with its parent
    /// directories), beneath the root and through no symlink; a file with more than
    /// one hard link is refused.
    pub(crate) fn open_append(&self, abs: &Path, shown: &str) -> Result<File, ToolError> {
        let (dir, name) = self.parent_of(abs, shown)?;
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::RDWR
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(|e| open_error(shown, e.into()))?;
        // Appending to a file with another name would change that name's file too.
        let st = beneath::status(fd.as_fd()).map_err(|e| open_error(shown, e))?;
        if st.st_nlink > 1 {
            return Err(ToolError::HardLinked {
                path: clip(shown),
                links: st.st_nlink,
            });
        }
        Ok(File::from(fd))
    }

    /// The parent directory of `abs` (created if missing) and `abs`'s name.
    fn parent_of<'a>(&self, abs: &'a Path, shown: &str) -> Result<(OwnedFd, &'a OsStr), ToolError> {
        let rel = self.relative(abs);
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(ToolError::Io {
                path: clip(shown),
                detail: "is the workspace root, not a file".into(),
            });
        };
        let dir = beneath::dir_creating(self.root_fd.as_fd(), parent)
            .map_err(|e| open_error(shown, e))?;
        Ok((dir, name))
    }

    /// Directories a walk must not enter besides `.brood/state` (brood's state when
    /// `.brood` is a symlink to another directory of the workspace).
    pub(crate) fn hidden_dirs(&self) -> Vec<PathBuf> {
        super::protect::hidden_state_dirs(&self.root)
    }

    /// `abs` relative to the root for tool output (`.` for the root itself); paths
    /// outside the root are shown in full.
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }

    /// Why a path that resolved to `resolved` (outside the root) is refused.
    fn outside_reason(&self, given: &Path, resolved: &Path) -> String {
        let lexical = lexical_normalize(&if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        });
        match lexical {
            Some(lex) if !lex.starts_with(&self.root) => {
                if given.is_absolute() && !given.components().any(|c| c == Component::ParentDir) {
                    format!(
                        "absolute path not under the workspace root {}",
                        self.root.display()
                    )
                } else {
                    format!(
                        "'..' leads out of the workspace root {}",
                        self.root.display()
                    )
                }
            }
            None => format!(
                "'..' leads out of the workspace root {}",
                self.root.display()
            ),
            Some(_) => format!(
                "a symlink leads to {}, outside the workspace root {}",
                resolved.display(),
                self.root.display()
            ),
        }
    }
}

/// The error of an open beneath the root: a symlink met on the way (`ELOOP`,
/// `EXDEV`) means the path changed since it was checked.
fn open_error(shown: &str, e: io::Error) -> ToolError {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EXDEV) => ToolError::OutsideWorkspace {
            path: clip(shown),
            reason: "a part of the path was replaced by a symlink while it was being opened".into(),
        },
        _ if e.kind() == io::ErrorKind::NotFound => ToolError::NotFound { path: clip(shown) },
        _ => ToolError::Io {
            path: clip(shown),
            detail: e.to_string(),
        },
    }
}

/// Resolve an absolute `candidate`: canonicalize its longest existing prefix, follow
/// a dangling symlink at the boundary, and append the non-existing tail (plain names
/// only).
fn resolve_existing_prefix(candidate: &Path, hops: usize) -> Result<PathBuf, Refusal> {
    if hops > MAX_SYMLINK_HOPS {
        return Err(Refusal::Loop);
    }
    let mut prefix = candidate;
    loop {
        match std::fs::canonicalize(prefix) {
            Ok(canon) => {
                let tail = strip(candidate, prefix);
                return append_tail(canon, &tail);
            }
            Err(e) if is_missing(&e) => {
                // A dangling symlink: follow it by hand, then resolve its target
                // with the rest of the path appended.
                if let Ok(meta) = std::fs::symlink_metadata(prefix) {
                    if meta.file_type().is_symlink() {
                        let target = std::fs::read_link(prefix).map_err(Refusal::Io)?;
                        let base = prefix.parent().unwrap_or(Path::new("/"));
                        let next = base.join(target).join(strip(candidate, prefix));
                        return resolve_existing_prefix(&next, hops + 1);
                    }
                }
                match prefix.parent() {
                    Some(parent) => prefix = parent,
                    // Nothing exists, not even "/": cannot happen on a sane system.
                    None => return Err(Refusal::Io(e)),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Refusal::Loop),
            Err(e) => return Err(Refusal::Io(e)),
        }
    }
}

/// `full` with its leading `prefix` removed.
fn strip(full: &Path, prefix: &Path) -> PathBuf {
    full.strip_prefix(prefix)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Append a tail that does not exist yet: `.` is dropped, `..` refused.
fn append_tail(mut base: PathBuf, tail: &Path) -> Result<PathBuf, Refusal> {
    for c in tail.components() {
        match c {
            Component::Normal(name) => base.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(Refusal::DotDotInNewTail),
            Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::Outside(tail.to_path_buf()))
            }
        }
    }
    Ok(base)
}

fn is_missing(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// `..` and `.` removed without touching the file system; `None` if `..` climbs
/// above `/`.
fn lexical_normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalize_resolves_dots() {
        assert_eq!(
            lexical_normalize(Path::new("/a/b/../c/./d")),
            Some(PathBuf::from("/a/c/d"))
        );
        assert_eq!(lexical_normalize(Path::new("/..")), None);
    }

    #[test]
    fn tail_refuses_dotdot() {
        assert!(matches!(
            append_tail(PathBuf::from("/r"), Path::new("a/../b")),
            Err(Refusal::DotDotInNewTail)
        ));
        assert_eq!(
            append_tail(PathBuf::from("/r"), Path::new("./a/b")).ok(),
            Some(PathBuf::from("/r/a/b"))
        );
    }
}
