//! What a sandboxed shell's process does between `fork` and `exec`.
//!
//! Everything here runs in the forked child of a multi-threaded parent, so it makes
//! raw syscalls only: no allocation, no locks. Every path and every buffer is built
//! by the parent beforehand ([`ChildPlan`]).
//!
//! The order, in the first child (C1): a new session (`setsid`, so the call's
//! process group is its own), then the new namespaces (mount, PID, IPC and — unless
//! the grant has network — network). A new PID namespace only applies to children,
//! so C1 forks C2 and stays behind as a plain waiter that exits with C2's status;
//! C2 is PID 1 of the namespace, and when it dies the kernel kills every process
//! left in it — `setsid -f` daemons and double forks included. C2 then remounts
//! (protected paths read-only, brood's state and secret files hidden, a fresh
//! `/proc` that shows only the call's own processes), applies the landlock ruleset
//! (plus the new `/proc`), drops every capability (so a root shell cannot undo any
//! of it), and returns to `exec` bash.

use std::ffi::CString;
use std::io;
use std::os::raw::{c_int, c_ulong};

/// One mount made in C2, in order.
#[derive(Debug)]
pub(crate) struct MountStep {
    pub source: CString,
    pub target: CString,
    pub fstype: Option<CString>,
    pub flags: c_ulong,
    /// Remount the bind read-only afterwards.
    pub read_only: bool,
}

/// Everything C1 and C2 need, prepared in the parent.
#[derive(Debug, Default)]
pub(crate) struct ChildPlan {
    /// `CLONE_NEW*` flags to unshare; 0 = no namespaces (landlock only).
    pub unshare_flags: c_int,
    /// Mounts made inside the new mount namespace (empty without one).
    pub mounts: Vec<MountStep>,
    /// The landlock ruleset's descriptor, or -1 for none.
    pub ruleset_fd: c_int,
    /// Rights to grant on the new `/proc` (landlock access bits); 0 = none.
    pub proc_access: u64,
    /// Whether to drop every capability before `exec`.
    pub drop_caps: bool,
    /// For a brood without privileges: the lines for `/proc/self/uid_map` and
    /// `gid_map` (its own ids, mapped to themselves) written after
    /// `unshare(CLONE_NEWUSER | …)`, which gives the namespaces without root.
    pub user_maps: Option<(CString, CString)>,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}
const LANDLOCK_RULE_PATH_BENEATH: c_int = 1;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const CAP_VERSION_3: u32 = 0x2008_0522;
/// SECBIT_NOROOT | _LOCKED | NO_SETUID_FIXUP | _LOCKED | KEEP_CAPS_LOCKED: root
/// gets no capabilities back at `exec`.
const SECURE_BITS: libc::c_ulong = 0x2f;

fn check(r: c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Run in the forked child (`pre_exec`). Returns in the process that goes on to
/// `exec` bash; the waiter C1 never returns from here.
///
/// # Safety
/// Call only between `fork` and `exec`; `plan` must outlive the call (it does: the
/// closure owns it).
pub(crate) unsafe fn enter(plan: &ChildPlan) -> io::Result<()> {
    check(libc::setsid())?;
    if plan.unshare_flags != 0 {
        check(libc::unshare(plan.unshare_flags))?;
        if let Some((uid_map, gid_map)) = &plan.user_maps {
            // A non-dumpable brood's /proc/self files belong to root, so its fork may
            // not write its own id maps; dumpable only while it does.
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let written = write_file(c"/proc/self/setgroups", c"deny")
                .and_then(|()| write_file(c"/proc/self/uid_map", uid_map))
                .and_then(|()| write_file(c"/proc/self/gid_map", gid_map));
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            written?;
        }
        // The waiter dies with the thread that spawned it; C2 dies with the waiter.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as c_ulong, 0, 0, 0);
        if plan.unshare_flags & libc::CLONE_NEWPID != 0 {
            let pid = libc::fork();
            if pid == -1 {
                return Err(io::Error::last_os_error());
            }
            if pid > 0 {
                wait_and_exit(pid);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as c_ulong, 0, 0, 0);
        }
        mount_all(plan)?;
    }
    if plan.ruleset_fd >= 0 {
        restrict(plan)?;
    }
    if plan.drop_caps {
        drop_capabilities()?;
    }
    Ok(())
}

/// Write `text` to `path` with raw syscalls.
unsafe fn write_file(path: &std::ffi::CStr, text: &std::ffi::CStr) -> io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    let bytes = text.to_bytes();
    let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let err = io::Error::last_os_error();
    libc::close(fd);
    if n != bytes.len() as isize {
        return Err(err);
    }
    Ok(())
}

/// C1: close what it does not need (the spawn's error pipe among them, so the
/// parent's `spawn` returns once C2 has exec'd), wait for C2, exit as it did.
unsafe fn wait_and_exit(pid: libc::pid_t) -> ! {
    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    let mut status: c_int = 0;
    loop {
        let r = libc::waitpid(pid, &mut status, 0);
        if r == pid {
            break;
        }
        if r == -1 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

unsafe fn mount_all(plan: &ChildPlan) -> io::Result<()> {
    let null = std::ptr::null();
    check(libc::mount(
        null,
        c"/".as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ))?;
    for m in &plan.mounts {
        let fstype = m.fstype.as_ref().map_or(null, |f| f.as_ptr());
        check(libc::mount(
            m.source.as_ptr(),
            m.target.as_ptr(),
            fstype,
            m.flags,
            std::ptr::null(),
        ))?;
        if m.read_only {
            check(libc::mount(
                null,
                m.target.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID,
                std::ptr::null(),
            ))?;
        }
    }
    Ok(())
}

unsafe fn restrict(plan: &ChildPlan) -> io::Result<()> {
    if plan.proc_access != 0 && plan.unshare_flags & libc::CLONE_NEWPID != 0 {
        let fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fd >= 0 {
            let attr = PathBeneathAttr {
                allowed_access: plan.proc_access,
                parent_fd: fd,
            };
            let r = libc::syscall(
                libc::SYS_landlock_add_rule,
                plan.ruleset_fd,
                LANDLOCK_RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            );
            libc::close(fd);
            if r == -1 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    let r = libc::syscall(libc::SYS_landlock_restrict_self, plan.ruleset_fd, 0u32);
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    libc::close(plan.ruleset_fd);
    Ok(())
}

/// No capability survives into the shell, for root too: secure bits stop root from
/// regaining them at `exec`, the bounding and ambient sets are emptied, then the
/// process's own sets. A process without capabilities skips what it may not do.
unsafe fn drop_capabilities() -> io::Result<()> {
    libc::prctl(libc::PR_SET_SECUREBITS, SECURE_BITS, 0, 0, 0);
    for cap in 0..64 {
        libc::prctl(libc::PR_CAPBSET_DROP, cap as c_ulong, 0, 0, 0);
    }
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as c_ulong,
        0,
        0,
        0,
    );
    let header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    let r = libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr());
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
