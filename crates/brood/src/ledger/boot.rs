//! Boots and liveness. Every `Ledger::open` is a *boot*: a fresh id, a row in `boots`,
//! and an exclusive `flock` on `.brood/state/boots/<boot_id>.lock` held (through an
//! open file, close-on-exec) for the life of the `Ledger`. The kernel drops the lock
//! when the process dies, however it dies, so "can I take its lock?" is a real
//! liveness test: taken → the boot is dead; refused → it is alive.
//!
//! At open, every other boot that still has unfinished runs (or was never marked
//! ended, or left a lock file) is probed; the dead ones have their unfinished runs
//! marked `interrupted` ("process exited") and their lock file removed. Live boots are
//! left alone, so two live processes never mark each other's runs.
//!
//! A lock file appears at its final name already locked (created under a temporary
//! name, locked, then renamed), so a probe can never take the lock of a boot that is
//! still starting. A boot whose lock file is missing is treated as dead: do not
//! delete `.brood/state/boots/` while brood is running.

use std::path::Path;
use std::time::{Duration, Instant};

use super::db::{args, query_vec, Db, Dialect, RowExt, Tuning};
use super::error::{LedgerError, SqlContext};
use super::liveness::{BootLock, DeadBoot, Liveness};
use super::ops::{self, NON_TERMINAL_SQL};
use super::paths::LedgerPaths;
use super::store::now_ms;
use super::types::{RecoveryReport, RunId};

/// The reason written on runs of a boot found dead.
pub(crate) const DEAD_BOOT_REASON: &str = "process exited";

/// Temporary lock files older than this are leftovers of a crash during open.
const STALE_TEMP: Duration = Duration::from_secs(600);

/// A dead boot's recovery whose COMMIT was sent but not answered: (boot, its runs).
type Pending = Option<(String, Vec<RunId>)>;

/// Start this boot at `Ledger::open`: take its liveness (lock file or advisory lock),
/// record it and recover the dead boots. On a PostgreSQL ledger whose connection is
/// lost on the way (the database restarting) the whole of it is tried again on a new
/// connection ([`Db::reconnect`]) for up to `reconnect_for`, and nothing is done twice:
/// the boot's row is inserted only when missing (the insert of a lost try may have
/// committed), a dead boot recovered in a try is no longer a candidate (its runs are
/// `interrupted`, it is marked ended), and a recovery whose COMMIT's answer was lost
/// is counted by that transaction's fate — committed, reported; not, made again.
pub(crate) fn start(
    db: &dyn Db,
    paths: &LedgerPaths,
    boot_id: &str,
    session_id: &str,
    reconnect_for: Duration,
) -> Result<(Option<BootLock>, RecoveryReport), LedgerError> {
    let deadline = super::types::deadline_after(reconnect_for);
    let at = now_ms();
    let mut held: Option<Option<BootLock>> = None;
    let mut report = RecoveryReport::default();
    loop {
        let mut pending: Pending = None;
        let tried = (|| {
            if held.is_none() {
                held = Some(db.hold_boot(boot_id)?);
            }
            // The boot row and the recovery commit without folding the WAL into the
            // database (after a crash the WAL can hold thousands of pages): the
            // writer thread checkpoints first thing, off the caller's path.
            db.tune(Tuning::SuspendCheckpoints)
                .ctx("suspending the automatic checkpoint")?;
            register(db, boot_id, session_id, at)?;
            recover(db, paths, boot_id, &mut report, &mut pending)?;
            db.tune(Tuning::ResumeCheckpoints)
                .ctx("resuming the automatic checkpoint")
        })();
        match tried {
            Ok(()) => return Ok((held.flatten(), report)),
            Err(_) if db.connection_lost() && Instant::now() < deadline => {
                // `reconnect` takes the boot's advisory lock again once held, and says
                // whether the transaction last begun — a pending recovery's — committed.
                if db.reconnect()? {
                    if let Some((boot, runs)) = pending.take() {
                        report.interrupted.extend(runs);
                        report.dead_boots.push(boot);
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Record this boot (once: a row already there is its own, from a try whose answer
/// was lost).
fn register(db: &dyn Db, boot_id: &str, session_id: &str, at: i64) -> Result<(), LedgerError> {
    let host = hostname();
    db.execute(
        "INSERT INTO boots (boot_id, session_id, pid, started_at, host) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (boot_id) DO NOTHING",
        args![boot_id, session_id, std::process::id(), at, &host],
    )
    .ctx("registering this boot")?;
    Ok(())
}

/// Probe every other boot that might need recovery and recover the dead ones, into
/// `report`; `pending` holds a recovery while its COMMIT is unanswered.
fn recover(
    db: &dyn Db,
    paths: &LedgerPaths,
    own_boot: &str,
    report: &mut RecoveryReport,
    pending: &mut Pending,
) -> Result<(), LedgerError> {
    let mut candidates: Vec<String> = query_vec(
        db,
        &format!(
            "SELECT DISTINCT session_boot_id FROM runs WHERE status IN {NON_TERMINAL_SQL}
             UNION SELECT boot_id FROM boots WHERE ended_at IS NULL"
        ),
        &[],
        |r| r.string(0),
    )
    .ctx("finding boots to check")?;
    if db.dialect() == Dialect::Sqlite {
        candidates.extend(lock_files(&paths.boots)?);
    }
    candidates.sort();
    candidates.dedup();
    candidates.retain(|b| b != own_boot);

    // Live boots are probed again by each try.
    report.live_boots.clear();
    for boot in candidates {
        // Only a well-formed id names a lock file or a lock (the database is
        // untrusted); no live boot has another.
        let liveness = match ops::validate_id("boot id", &boot) {
            Ok(()) => db.probe_boot(&boot)?,
            Err(_) => Liveness::Dead(DeadBoot::without_file()),
        };
        match liveness {
            Liveness::Alive => report.live_boots.push(boot),
            Liveness::Dead(guard) => {
                db.tune(Tuning::RecoveryCache)
                    .ctx("raising cache_size for recovery")?;
                let runs = interrupt_dead(db, &boot, pending);
                let restored = db
                    .tune(Tuning::NormalCache)
                    .ctx("restoring cache_size after recovery");
                let runs = runs?;
                restored?;
                guard.remove_lock_file();
                report.interrupted.extend(runs);
                report.dead_boots.push(boot);
            }
        }
    }
    sweep_stale_temps(&paths.boots);
    Ok(())
}

/// Mark a dead boot's unfinished runs interrupted, in one transaction; `pending`
/// holds them while its COMMIT is unanswered.
fn interrupt_dead(
    db: &dyn Db,
    boot: &str,
    pending: &mut Pending,
) -> Result<Vec<RunId>, LedgerError> {
    db.begin().ctx("starting recovery")?;
    let marked = ops::interrupt_boot(db, boot, DEAD_BOOT_REASON, now_ms()).and_then(|runs| {
        *pending = Some((boot.to_string(), runs));
        db.commit().ctx("committing recovery")?;
        Ok(pending.take().map(|(_, runs)| runs).unwrap_or_default())
    });
    if marked.is_err() {
        let _ = db.rollback();
    }
    marked
}

/// Boot ids that have a lock file.
fn lock_files(dir: &Path) -> Result<Vec<String>, LedgerError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LedgerError::io(dir, e)),
    };
    let mut ids = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        if let Some(id) = name.strip_suffix(".lock") {
            if ops::validate_id("boot id", id).is_ok() {
                ids.push(id.to_string());
            }
        }
    }
    Ok(ids)
}

/// Remove temporary lock files left by a crash between create and rename.
fn sweep_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_temp = name
            .to_str()
            .is_some_and(|n| n.starts_with('.') && n.ends_with(".lock.tmp"));
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_TEMP);
        if is_temp && old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let name = buf.split(|&b| b == 0).next().unwrap_or(&[]);
    String::from_utf8(name.to_vec()).ok()
}
