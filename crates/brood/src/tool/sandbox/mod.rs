//! The shell sandbox: every `bash` call, of every role, runs confined by the kernel.
//!
//! - **landlock** (ABI v3+ required): reads only the workspace, the system
//!   directories a shell needs, the toolchains on `PATH` and `[sandbox] read_allow`;
//!   writes only a private temp dir made for the call, plus the workspace for
//!   writers (and `[sandbox] write_allow`); network rules (ABI v4) and signal /
//!   abstract-socket scoping (ABI v6) where the kernel has them.
//! - **namespaces** (where brood may create them): a mount namespace that makes
//!   `.brood/`, `.claude/`, `.git/hooks/` and `.git/config` read-only, hides
//!   `.brood/state/` and secret files such as `/etc/shadow`, and mounts a fresh
//!   `/proc` showing only the call's processes (so brood's `/proc/<pid>/environ` is
//!   out of reach); a PID namespace whose end kills every process the call started;
//!   a network namespace (no network) unless the grant has network; IPC.
//! - **capabilities**: all dropped, bounding set included, so root in the sandbox
//!   cannot undo any of it.
//! - **environment**: an allow list ([`mod@env`]).
//!
//! Where the kernel lacks a piece, [`Sandbox::degradations`] says what (the session
//! reports it once) and the strongest available set applies; without landlock,
//! read-only roles get no shell at all. The child side is in `child`; the
//! ruleset and the plan are built here, in the parent.

mod child;
pub mod env;

pub(crate) use child::{enter, ChildPlan};
pub use env::EnvPolicy;

use child::MountStep;
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The oldest ABI the sandbox accepts: every way to change a file is handled from v3.
const REQUIRED_ABI: ABI = ABI::V3;
/// The newest file-system rights the sandbox asks for (v5 adds device ioctls).
const WANTED_ABI: ABI = ABI::V5;
/// Devices a shell reads and writes as a matter of course.
const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];
/// System directories every shell may read and execute from.
const SYSTEM_READ: [&str; 11] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys", "/dev",
];
/// Secret files hidden (an empty file bound over them) from every shell.
const SECRET_FILES: [&str; 6] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
];
/// Secret directories hidden (an empty tmpfs over them) from every shell.
const SECRET_DIRS: [&str; 3] = ["/etc/ssl/private", "/etc/sudoers.d", "/root/.ssh"];
/// Workspace entries no shell may change (a read-only bind over each).
pub(crate) const PROTECTED: [&str; 4] = [".brood", ".claude", ".git/hooks", ".git/config"];

/// What the user's config says about shells (`[sandbox]`, user config only).
#[derive(Debug, Clone, Default)]
pub struct SandboxOptions {
    /// Shells may reach the network (`[sandbox] network`, default false).
    pub network: bool,
    /// Which environment variables pass.
    pub env: EnvPolicy,
    /// Extra directories shells may read (`[sandbox] read_allow`).
    pub read_allow: Vec<PathBuf>,
    /// Extra directories writer shells may write (`[sandbox] write_allow`).
    pub write_allow: Vec<PathBuf>,
}

/// What a shell may do to the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellMode {
    /// Read; write only the private temp dir.
    ReadOnly,
    /// Read; write the workspace (but its protected entries) and the temp dir.
    Writer,
}

/// What this kernel gives: found once per [`Sandbox`].
#[derive(Debug, Clone)]
struct Support {
    landlock: Result<(), String>,
    namespaces: Result<(), String>,
}

/// The shell sandbox of one session. What the kernel supports is probed once per
/// instance, on first use (blocking: short-lived threads try it).
#[derive(Debug, Default)]
pub struct Sandbox {
    options: SandboxOptions,
    support: OnceLock<Support>,
    read_roots: OnceLock<Vec<PathBuf>>,
}

/// A sandbox set up for one shell call: the child's plan, the ruleset descriptor it
/// uses, and the private temp dir (removed when this is dropped).
#[derive(Debug)]
pub struct PreparedSandbox {
    plan: std::sync::Arc<ChildPlan>,
    _ruleset: Option<OwnedFd>,
    tmp: PrivateDir,
}

impl Sandbox {
    /// A sandbox with default options (no network, the default environment).
    pub fn new() -> Self {
        Sandbox::default()
    }

    /// A sandbox with the user's options.
    pub fn with_options(options: SandboxOptions) -> Self {
        Sandbox {
            options,
            ..Sandbox::default()
        }
    }

    /// The options this sandbox applies.
    pub fn options(&self) -> &SandboxOptions {
        &self.options
    }

    fn support(&self) -> &Support {
        self.support.get_or_init(|| Support {
            landlock: run_probe(),
            namespaces: probe_namespaces(),
        })
    }

    /// Whether a read-only shell can run here (landlock works).
    pub fn read_only_shell_available(&self) -> bool {
        self.probe().is_ok()
    }

    /// `Ok` if landlock confines a thread as the shells rely on; otherwise why not.
    pub fn probe(&self) -> Result<(), String> {
        self.support().landlock.clone()
    }

    /// What this kernel cannot give, one line each (empty: the full sandbox).
    pub fn degradations(&self) -> Vec<String> {
        let s = self.support();
        degradations(&s.landlock, &s.namespaces, landlock_abi())
    }

    /// One line per role posture: what a shell gets on this kernel.
    pub fn describe(&self, mode: ShellMode, workspace: &Path) -> String {
        let s = self.support();
        let abi = landlock_abi();
        let mut writes = vec!["private tmp".to_string()];
        if mode == ShellMode::Writer {
            let guard = if s.namespaces.is_ok() {
                "but"
            } else {
                "file tools alone guard"
            };
            writes.insert(
                0,
                format!("{} ({guard} {})", workspace.display(), PROTECTED.join(", ")),
            );
            writes.extend(
                self.options
                    .write_allow
                    .iter()
                    .map(|p| p.display().to_string()),
            );
        }
        let reads: Vec<String> = std::iter::once(workspace.display().to_string())
            .chain(self.read_roots().iter().map(|p| p.display().to_string()))
            .collect();
        format!(
            "landlock {}; namespaces {}; network {}; reads {}; writes {}",
            match (&s.landlock, abi) {
                (Ok(()), Some(v)) => format!("ABI v{v}"),
                (Ok(()), None) => "on".into(),
                (Err(_), _) => "unavailable".into(),
            },
            if s.namespaces.is_ok() {
                let user = if user_maps().is_some() { "user+" } else { "" };
                format!(
                    "{user}mount+pid+ipc{}",
                    if self.options.network { "" } else { "+net" }
                )
            } else {
                "unavailable".into()
            },
            match (
                self.options.network && mode == ShellMode::Writer,
                &s.namespaces
            ) {
                (true, _) => "allowed",
                (false, Ok(())) => "none",
                (false, Err(_)) if landlock_net_available() => "TCP blocked (UDP not)",
                (false, Err(_)) => "not blocked",
            },
            reads.join(", "),
            writes.join(", ")
        )
    }

    /// Directories every shell may read besides the workspace: the system's, the
    /// toolchains on `PATH`, and `[sandbox] read_allow`.
    pub(crate) fn read_roots(&self) -> &[PathBuf] {
        self.read_roots.get_or_init(|| {
            let mut roots: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
            roots.extend(toolchain_roots());
            // git refuses to run when it cannot read the user's configuration.
            if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
                roots.push(home.join(".gitconfig"));
                roots.push(home.join(".config/git"));
            }
            roots.extend(self.options.read_allow.iter().cloned());
            roots.retain(|p| p.exists());
            roots.sort();
            roots.dedup();
            roots
        })
    }

    /// Build the plan, the ruleset and the private temp dir for one call.
    /// `granted_network` is the caller's grant ([`crate::Permissions::network`]): the
    /// shell reaches the network only if it, the user's `[sandbox] network` and the
    /// mode (writers only) all allow it.
    pub fn prepare(
        &self,
        mode: ShellMode,
        workspace: &Path,
        granted_network: bool,
    ) -> Result<PreparedSandbox, String> {
        let tmp = PrivateDir::create("brood-sh")
            .map_err(|e| format!("cannot create the private temp dir: {e}"))?;
        let support = self.support().clone();
        let network = self.options.network && mode == ShellMode::Writer && granted_network;
        let ruleset = match support.landlock {
            Ok(()) => Some(self.build_ruleset(mode, workspace, tmp.path(), network)?),
            Err(e) if mode == ShellMode::ReadOnly => return Err(e),
            Err(_) => None,
        };
        let mut plan = ChildPlan {
            drop_caps: true,
            ..ChildPlan::default()
        };
        if support.namespaces.is_ok() {
            plan.unshare_flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
            plan.user_maps = user_maps();
            if plan.user_maps.is_some() {
                plan.unshare_flags |= libc::CLONE_NEWUSER;
            }
            if !network {
                plan.unshare_flags |= libc::CLONE_NEWNET;
            }
            plan.mounts = mounts(workspace)?;
        }
        let ruleset: Option<OwnedFd> = ruleset.and_then(|r| r.into());
        plan.ruleset_fd = ruleset.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        plan.proc_access = (AccessFs::ReadFile | AccessFs::ReadDir).bits();
        Ok(PreparedSandbox {
            plan: std::sync::Arc::new(plan),
            _ruleset: ruleset,
            tmp,
        })
    }

    fn build_ruleset(
        &self,
        mode: ShellMode,
        workspace: &Path,
        tmp: &Path,
        network: bool,
    ) -> Result<RulesetCreated, String> {
        let unavailable = |e: &dyn std::fmt::Display| {
            format!("landlock ABI v3 (Linux 6.2+) with landlock enabled is required: {e}")
        };
        let mut base = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(REQUIRED_ABI))
            .map_err(|e| unavailable(&e))?
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(WANTED_ABI))
            .map_err(|e| unavailable(&e))?
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(|e| unavailable(&e))?;
        if !network {
            base = base
                .handle_access(AccessNet::from_all(ABI::V4))
                .map_err(|e| unavailable(&e))?;
        }
        let read = AccessFs::from_read(WANTED_ABI);
        let all = AccessFs::from_all(WANTED_ABI);
        // A file root (e.g. `~/.gitconfig`) takes file rights only.
        let mut rules: Vec<(PathBuf, landlock::BitFlags<AccessFs>)> = self
            .read_roots()
            .iter()
            .map(|r| {
                let access = if r.is_file() {
                    AccessFs::ReadFile.into()
                } else {
                    read
                };
                (r.clone(), access)
            })
            .collect();
        rules.push((
            workspace.to_path_buf(),
            if mode == ShellMode::Writer { all } else { read },
        ));
        if mode == ShellMode::Writer {
            rules.extend(self.options.write_allow.iter().map(|p| (p.clone(), all)));
        }
        rules.push((tmp.to_path_buf(), all));
        rules.extend(
            DEVICES
                .iter()
                .map(|d| (PathBuf::from(d), AccessFs::from_file(WANTED_ABI))),
        );
        let mut ruleset = base.create().map_err(|e| unavailable(&e))?;
        for (path, access) in rules {
            // A root that vanished grants nothing.
            let Ok(fd) = PathFd::new(&path) else { continue };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("landlock rule for {}: {e}", path.display()))?;
        }
        Ok(ruleset)
    }
}

impl PreparedSandbox {
    /// The private temp dir the shell may write to (set as `TMPDIR`).
    pub(crate) fn tmpdir(&self) -> &Path {
        self.tmp.path()
    }

    /// The plan the forked child follows ([`enter`]).
    pub(crate) fn plan(&self) -> &std::sync::Arc<ChildPlan> {
        &self.plan
    }
}

/// What a kernel with this support cannot give, one line each. Without namespaces,
/// landlock's own network rules (ABI v4) and signal / abstract-socket scoping (v6)
/// are all that is left of those protections, so an older ABI is named.
fn degradations(
    landlock: &Result<(), String>,
    namespaces: &Result<(), String>,
    abi: Option<i64>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Err(e) = landlock {
        out.push(format!(
            "landlock unavailable ({e}): read-only roles get no shell, writer shells \
             are confined by namespaces only"
        ));
    }
    if let Err(e) = namespaces {
        let abi = abi.filter(|_| landlock.is_ok()).unwrap_or(0);
        let mut lost = vec![
            "protected workspace paths are guarded by the file tools alone".to_string(),
            "processes a shell detaches (setsid) may outlive the call".to_string(),
        ];
        lost.push(if abi >= 4 {
            "network is blocked for TCP only".to_string()
        } else {
            "network is not blocked".to_string()
        });
        if abi < 6 {
            lost.push(format!(
                "{}shells may signal other processes of this user and reach abstract \
                 unix sockets (landlock scoping needs ABI v6)",
                if abi > 0 {
                    format!("with landlock ABI v{abi}, ")
                } else {
                    String::new()
                }
            ));
        }
        out.push(format!(
            "namespaces unavailable ({e}): shells are confined by landlock only — {}",
            lost.join(", ")
        ));
    }
    out
}

/// The landlock ABI this kernel offers, if any.
fn landlock_abi() -> Option<i64> {
    // SAFETY: landlock_create_ruleset with LANDLOCK_CREATE_RULESET_VERSION (1 << 0)
    // and no attributes only returns the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    (v > 0).then_some(v)
}

fn landlock_net_available() -> bool {
    landlock_abi().is_some_and(|v| v >= 4)
}

/// Toolchain homes on `PATH` outside the system directories (`~/.cargo/bin` →
/// `~/.cargo`, `~/.pyenv/shims` → `~/.pyenv`), and rustup's home beside cargo's —
/// never the home directory itself or anything above it.
fn toolchain_roots() -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut out = Vec::new();
    let Some(path) = std::env::var_os("PATH") else {
        return out;
    };
    for dir in std::env::split_paths(&path) {
        if !dir.is_absolute() || SYSTEM_READ.iter().any(|s| dir.starts_with(s)) {
            continue;
        }
        let named_bin = dir.file_name().is_some_and(|n| n == "bin" || n == "shims");
        let candidate = match dir.parent() {
            Some(parent) if named_bin => parent.to_path_buf(),
            _ => dir.clone(),
        };
        let too_wide = candidate.parent().is_none()
            || home.as_ref().is_some_and(|h| h.starts_with(&candidate));
        out.push(if too_wide { dir } else { candidate });
    }
    if let Some(h) = &home {
        if out.iter().any(|p| p.ends_with(".cargo")) {
            out.push(
                std::env::var_os("RUSTUP_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| h.join(".rustup")),
            );
        }
    }
    out
}

fn cstring(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} has a NUL byte", p.display()))
}

/// The mounts of one call: secret files hidden, protected workspace entries
/// read-only, brood's state hidden, a fresh `/proc`.
fn mounts(workspace: &Path) -> Result<Vec<MountStep>, String> {
    let mut out = Vec::new();
    let bind = |source: &Path, target: &Path, read_only: bool| -> Result<MountStep, String> {
        Ok(MountStep {
            source: cstring(source)?,
            target: cstring(target)?,
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            read_only,
        })
    };
    let tmpfs = |target: &Path| -> Result<MountStep, String> {
        Ok(MountStep {
            source: CString::from(c"tmpfs"),
            target: cstring(target)?,
            fstype: Some(CString::from(c"tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
            read_only: false,
        })
    };
    for f in SECRET_FILES {
        if Path::new(f).is_file() {
            out.push(bind(Path::new("/dev/null"), Path::new(f), true)?);
        }
    }
    for d in SECRET_DIRS {
        if Path::new(d).is_dir() {
            out.push(tmpfs(Path::new(d))?);
        }
    }
    ensure_protected_exist(workspace);
    for rel in PROTECTED {
        let p = workspace.join(rel);
        // A symlinked entry is bound at what it names, inside the workspace only.
        let Ok(real) = p.canonicalize() else { continue };
        if real.starts_with(workspace) {
            out.push(bind(&real, &real, true)?);
        }
    }
    let state = workspace.join(".brood/state");
    if state.is_dir() {
        out.push(tmpfs(&state)?);
    }
    out.push(MountStep {
        source: CString::from(c"proc"),
        target: CString::from(c"/proc"),
        fstype: Some(CString::from(c"proc")),
        flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        read_only: false,
    });
    Ok(out)
}

/// A protected entry that does not exist cannot be bound read-only, and a shell
/// could then create it: make the empty directories first (`.brood/`, `.claude/`,
/// and `.git/hooks/` where `.git` is a directory). `.git/config` exists wherever
/// `.git` does.
fn ensure_protected_exist(workspace: &Path) {
    let mut dirs = vec![workspace.join(".brood"), workspace.join(".claude")];
    let git = workspace.join(".git");
    if git.is_dir() {
        dirs.push(git.join("hooks"));
    }
    for d in dirs {
        if std::fs::symlink_metadata(&d).is_err() {
            let _ = std::fs::create_dir(&d);
        }
    }
}

/// For a brood without root: the id maps of a user namespace that maps its own
/// user and group to themselves (`None` as root: no user namespace is needed).
fn user_maps() -> Option<(CString, CString)> {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        return None;
    }
    let line = |id: u32| CString::new(format!("{id} {id} 1")).ok();
    Some((line(uid)?, line(gid)?))
}

/// Whether this process may make the namespaces a shell runs in. As root a
/// short-lived thread tries (mount, PID, network and IPC namespaces are per thread
/// until a child is made, so nothing stays on the process). Without root they come
/// from a user namespace, which a multi-threaded process cannot enter: a child
/// process tries the whole plan once (`true` in the namespaces, with a fresh `/proc`).
fn probe_namespaces() -> Result<(), String> {
    if user_maps().is_some() {
        return probe_user_namespaces();
    }
    std::thread::Builder::new()
        .name("brood-ns-probe".into())
        .spawn(|| {
            // SAFETY: unshare affects only this thread, which ends right after.
            let r = unsafe {
                libc::unshare(
                    libc::CLONE_NEWNS
                        | libc::CLONE_NEWPID
                        | libc::CLONE_NEWNET
                        | libc::CLONE_NEWIPC,
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(format!(
                    "unshare: {} (as root brood makes namespaces directly)",
                    io::Error::last_os_error()
                ))
            }
        })
        .map_err(|e| format!("cannot start the namespace probe: {e}"))?
        .join()
        .unwrap_or_else(|_| Err("the namespace probe panicked".into()))
}

fn probe_user_namespaces() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let plan = std::sync::Arc::new(ChildPlan {
        unshare_flags: libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWNET,
        mounts: vec![MountStep {
            source: CString::from(c"proc"),
            target: CString::from(c"/proc"),
            fstype: Some(CString::from(c"proc")),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            read_only: false,
        }],
        ruleset_fd: -1,
        proc_access: 0,
        drop_caps: true,
        user_maps: user_maps(),
    });
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: `enter` makes raw syscalls only, on buffers built above.
    unsafe {
        cmd.pre_exec(move || enter(&plan));
    }
    match cmd.status() {
        Ok(st) if st.success() => Ok(()),
        Ok(st) => Err(format!("a user namespace could not be set up ({st})")),
        Err(e) => Err(format!(
            "user namespaces are not available to this user: {e} (kernel.unprivileged_userns_clone, \
             user.max_user_namespaces or an AppArmor/SELinux policy)"
        )),
    }
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
    let prepared = PrivateDir::create("brood-probe-tmp")
        .map_err(|e| format!("cannot create the private temp dir: {e}"))?;
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED_ABI))
        .and_then(|r| r.create())
        .map_err(|e| {
            format!("landlock ABI v3 (Linux 6.2+) with landlock enabled is required: {e}")
        })?;
    let tmp_fd =
        PathFd::new(prepared.path()).map_err(|e| format!("cannot open the temp dir: {e}"))?;
    let ruleset = ruleset
        .add_rule(PathBeneath::new(tmp_fd, AccessFs::from_all(REQUIRED_ABI)))
        .map_err(|e| format!("landlock rule for the temp dir: {e}"))?;
    let outside = PrivateDir::create("brood-probe")
        .map_err(|e| format!("cannot create a probe directory: {e}"))?;
    let inside = prepared.path().join("probe");
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

/// Make this process non-dumpable, so processes of the same user that are not
/// root cannot read its `/proc/<pid>/environ`, `mem` or `maps` (where the API key
/// is). The `brood` binary calls it first thing; a library host decides for itself
/// (it changes the whole process). Shells are kept out by their fresh `/proc`
/// regardless.
pub fn harden_process() -> io::Result<()> {
    // SAFETY: plain prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::degradations;

    #[test]
    fn an_old_landlock_without_namespaces_is_named_for_what_it_lacks() {
        let ok = Ok(());
        let no_ns: Result<(), String> = Err("unshare: EPERM".into());
        assert!(degradations(&ok, &ok, Some(4)).is_empty());
        let v7 = degradations(&ok, &no_ns, Some(7)).join("\n");
        assert!(
            v7.contains("landlock only") && v7.contains("TCP only"),
            "{v7}"
        );
        assert!(!v7.contains("signal"), "{v7}");
        let v5 = degradations(&ok, &no_ns, Some(5)).join("\n");
        assert!(
            v5.contains("TCP only") && v5.contains("ABI v5, shells may signal"),
            "{v5}"
        );
        let v3 = degradations(&ok, &no_ns, Some(3)).join("\n");
        assert!(
            v3.contains("network is not blocked") && v3.contains("signal"),
            "{v3}"
        );
        let none = degradations(&Err("no landlock".into()), &ok, None);
        assert_eq!(none.len(), 1);
        assert!(none[0].contains("read-only roles get no shell"), "{none:?}");
    }
}
