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
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The oldest ABI the sandbox accepts: every way to change a file is handled from v3.
const REQUIRED_ABI: ABI = ABI::V3;
/// The newest file-system rights the sandbox asks for (v5 adds device ioctls).
const WANTED_ABI: ABI = ABI::V5;
/// Devices a shell writes to as a matter of course (`2>/dev/null`).
const WRITABLE_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Landlock sandboxing for read-only shells. Whether it works is probed once per
/// instance (a real child process tries to write), not per process.
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

    /// Whether a read-only shell can run here. Probes on first use (blocking: it
    /// runs a short child process) and caches the answer in this instance.
    pub fn read_only_shell_available(&self) -> bool {
        self.probe().is_ok()
    }

    /// `Ok` if a sandboxed child really cannot write outside its temp dir and can
    /// write inside it; otherwise why not. Blocking; cached per instance.
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

/// Exit codes of the probe script.
const PROBE_TMP_WRITE_FAILED: i32 = 3;
const PROBE_ESCAPED: i32 = 4;

/// Run a child under the ruleset: it must write into its temp dir and must fail to
/// create a file in another directory.
fn run_probe() -> Result<(), String> {
    let mut prepared = Sandbox::new().prepare()?;
    let outside = PrivateDir::create("brood-probe")
        .map_err(|e| format!("cannot create a probe directory: {e}"))?;
    let mut ruleset = prepared.take_ruleset();
    let script = format!(
        "echo ok > \"$TMPDIR/probe\" || exit {PROBE_TMP_WRITE_FAILED}; \
         (echo x > \"$1/escaped\") 2>/dev/null && exit {PROBE_ESCAPED}; exit 0"
    );
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg("brood-probe")
        .arg(outside.path())
        .env("TMPDIR", prepared.tmpdir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure only calls `restrict_in_child` (no allocation, two syscalls).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || restrict_in_child(&mut ruleset));
    }
    let status = cmd
        .status()
        .map_err(|e| format!("landlock could not be applied to a child process: {e}"))?;
    if outside.path().join("escaped").exists() {
        return Err("the landlock ruleset did not stop a write outside the temp dir".into());
    }
    match status.code() {
        Some(0) => Ok(()),
        Some(PROBE_TMP_WRITE_FAILED) => {
            Err("a sandboxed shell could not write to its private temp dir".into())
        }
        Some(PROBE_ESCAPED) => {
            Err("the landlock ruleset did not stop a write outside the temp dir".into())
        }
        _ => Err(format!("the sandbox probe failed ({status})")),
    }
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
