//! The read-only shell sandbox: a Linux landlock ruleset that lets a shell read and
//! execute anything but write only to a private temp dir made for that one call.
//!
//! The ruleset is built in the parent (it allocates and opens files), and only
//! `restrict_self` runs in the forked child before `exec` (see
//! [`restrict_in_child`]): that is two syscalls (`prctl(PR_SET_NO_NEW_PRIVS)` and
//! `landlock_restrict_self`) and no allocation, so it is safe between `fork` and
//! `exec` in a multi-threaded parent.
//!
//! The ruleset requires at least landlock ABI v3 (Linux 6.2: writes, creation,
//! removal, renames *and* truncation are all handled); newer rights (device ioctls,
//! ABI v5) are added when the kernel has them. Where that is not available,
//! [`Sandbox::probe`] says why and the shell tool refuses read-only calls — it never
//! falls back to an unsandboxed shell.

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, ABI,
};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The oldest ABI the sandbox accepts: every way to change a file is handled from v3.
const REQUIRED_ABI: ABI = ABI::V3;
/// The newest file-system rights the sandbox asks for (v5 adds device ioctls).
const WANTED_ABI: ABI = ABI::V5;
/// Devices a shell writes to as a matter of course (`2>/dev/null`).
const WRITABLE_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Landlock sandboxing for read-only shells. Whether it works is probed once per
/// instance (a thread under the same ruleset tries to write), not per process.
#[derive(Debug, Default)]
pub struct Sandbox {
    probed: OnceLock<Result<(), String>>,
}

/// A sandbox set up for one shell call: the ruleset to apply in the child and the
/// private temp dir (removed when this is dropped).
#[derive(Debug)]
pub struct PreparedSandbox {
    ruleset: Option<RulesetCreated>,
    tmp: PrivateDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox::default()
    }

    /// Whether a read-only shell can run here. Probes on first use (blocking: a
    /// short-lived thread tries to write) and caches the answer in this instance.
    pub fn read_only_shell_available(&self) -> bool {
        self.probe().is_ok()
    }

    /// `Ok` if a thread under the ruleset really cannot write outside its temp dir
    /// and can write inside it; otherwise why not. Blocking; cached per instance.
    pub fn probe(&self) -> Result<(), String> {
        self.probed.get_or_init(run_probe).clone()
    }

    /// Build the ruleset and the private temp dir for one call.
    pub fn prepare(&self) -> Result<PreparedSandbox, String> {
        let tmp = PrivateDir::create("brood-ro")
            .map_err(|e| format!("cannot create the private temp dir: {e}"))?;
        let ruleset = build_ruleset(tmp.path())?;
        Ok(PreparedSandbox {
            ruleset: Some(ruleset),
            tmp,
        })
    }
}

impl PreparedSandbox {
    /// The private temp dir the sandboxed shell may write to (set as `TMPDIR`).
    pub fn tmpdir(&self) -> &Path {
        self.tmp.path()
    }

    /// The ruleset, to move into a `pre_exec` closure that calls
    /// [`restrict_in_child`]. `None` once taken.
    pub fn take_ruleset(&mut self) -> Option<RulesetCreated> {
        self.ruleset.take()
    }
}

/// Apply the ruleset in a forked child, before `exec`. No allocation happens here:
/// failures are reported as `EPERM` and the spawn fails in the parent. The slot is
/// an `Option` because `pre_exec` closures are `FnMut`; each forked child takes from
/// its own copy of the parent's memory.
pub fn restrict_in_child(ruleset: &mut Option<RulesetCreated>) -> io::Result<()> {
    let Some(ruleset) = ruleset.take() else {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    };
    match ruleset.restrict_self() {
        Ok(status) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EPERM)),
    }
}

/// Read + execute everywhere, everything in `tmp`, file writes to a few devices.
fn build_ruleset(tmp: &Path) -> Result<RulesetCreated, String> {
    let unavailable = |e: &dyn std::fmt::Display| {
        format!("landlock ABI v3 (Linux 6.2+) with landlock enabled is required: {e}")
    };
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED_ABI))
        .map_err(|e| unavailable(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(WANTED_ABI))
        .map_err(|e| unavailable(&e))?
        .create()
        .map_err(|e| unavailable(&e))?;
    let root = PathFd::new("/").map_err(|e| format!("cannot open /: {e}"))?;
    let tmp_fd = PathFd::new(tmp).map_err(|e| format!("cannot open {}: {e}", tmp.display()))?;
    let mut ruleset = ruleset
        .add_rule(PathBeneath::new(root, AccessFs::from_read(WANTED_ABI)))
        .map_err(|e| format!("landlock rule for /: {e}"))?
        .add_rule(PathBeneath::new(tmp_fd, AccessFs::from_all(WANTED_ABI)))
        .map_err(|e| format!("landlock rule for {}: {e}", tmp.display()))?;
    for dev in WRITABLE_DEVICES {
        if let Ok(fd) = PathFd::new(dev) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(WANTED_ABI)))
                .map_err(|e| format!("landlock rule for {dev}: {e}"))?;
        }
    }
    Ok(ruleset)
}

/// Apply the ruleset to a thread made for the probe (landlock restricts only the
/// calling thread, and `no_new_privs` is per thread too; the thread ends with the
/// probe, so nothing of it stays on the process) and check there what a sandboxed
/// shell relies on: writing into its temp dir works, creating a file elsewhere is
/// refused. No child process: forking the whole process for a probe — once per
/// session — left every page of a library host's heap copy-on-write, so the
/// session's first fan-out paid a page fault for each page it wrote (half of the
/// fan-out benchmark's page faults). The real shell calls still restrict a forked
/// child before `exec` ([`restrict_in_child`]), and landlock domains survive
/// `exec` by design.
fn run_probe() -> Result<(), String> {
    let mut prepared = Sandbox::new().prepare()?;
    let outside = PrivateDir::create("brood-probe")
        .map_err(|e| format!("cannot create a probe directory: {e}"))?;
    let ruleset = prepared
        .take_ruleset()
        .ok_or("the probe's ruleset was already used")?;
    let inside = prepared.tmpdir().join("probe");
    let escaped = outside.path().join("escaped");
    let probe = {
        let escaped = escaped.clone();
        move || -> Result<(), String> {
            match ruleset.restrict_self() {
                Ok(status) if status.ruleset != RulesetStatus::NotEnforced => {}
                Ok(_) => return Err("the kernel did not enforce the landlock ruleset".into()),
                Err(e) => return Err(format!("landlock could not be applied: {e}")),
            }
            std::fs::write(&inside, b"ok").map_err(|e| {
                format!("a sandboxed shell could not write to its private temp dir: {e}")
            })?;
            match std::fs::write(&escaped, b"x") {
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
                Err(e) => Err(format!(
                    "a write outside the temp dir failed, but not as refused: {e}"
                )),
                Ok(()) => {
                    Err("the landlock ruleset did not stop a write outside the temp dir".into())
                }
            }
        }
    };
    let verdict = std::thread::Builder::new()
        .name("brood-sandbox-probe".into())
        .spawn(probe)
        .map_err(|e| format!("cannot start the probe thread: {e}"))?
        .join()
        .unwrap_or_else(|_| Err("the sandbox probe panicked".into()));
    if escaped.exists() {
        return Err("the landlock ruleset did not stop a write outside the temp dir".into());
    }
    verdict
}

/// A directory only the current user can use, removed (with its content) on drop.
#[derive(Debug)]
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create(prefix: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir { path })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
