//! The sandbox where the kernel refuses user namespaces: landlock alone.
//!
//! `user.max_user_namespaces` is counted per user namespace, so the test makes one of
//! its own (mapping root and 65534), sets the limit to 0 inside it, and runs brood
//! there as uid 65534: brood cannot make the namespaces its shells normally get, and
//! must say so and still confine every shell with landlock.

use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

/// Runs `brood ARGS…` as uid 65534 in a user namespace whose
/// `max_user_namespaces` is 0, with only `HOME` and `PATH` set.
fn brood_without_user_namespaces(home: &Path, ws: &Path, args: &[&str]) -> Output {
    // `sh` says it is in the new namespace, waits for the test to write the id maps
    // (a process cannot map more than its own id itself), then re-executes as the
    // namespace's root (capabilities are granted at exec) to set the limit and drop
    // to 65534.
    let script = "echo ready; read go; exec sh -c \
                  'echo 0 > /proc/sys/user/max_user_namespaces && \
                   exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$@\"' sh \"$@\"";
    let mut child = command_via(
        &["unshare", "--user", "--", "sh", "-c", script, "sh"],
        home,
        ws,
    )
    .args(args)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run unshare");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        stderr.read_to_end(&mut s).map(|_| s)
    });
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    for map in ["uid_map", "gid_map"] {
        std::fs::write(
            format!("/proc/{}/{map}", child.id()),
            "0 0 1\n65534 65534 1\n",
        )
        .unwrap();
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: rest,
        stderr: err.join().unwrap().unwrap(),
    }
}

/// Without user namespaces (and without root) shells still run, under landlock:
/// no read of a file outside the workspace that the user may read on disk, no write
/// outside it, no write at all from a read-only role; the session says so on stderr
/// and in the ledger.
#[test]
fn where_user_namespaces_are_refused_shells_run_under_landlock_alone() {
    let f = fixture();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE-SECRET").unwrap();
    for root in [f.home.path(), f.ws.path(), outside.path()] {
        let st = Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(root)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let escape = outside.path().join("escaped");
    let parent_shell = format!(
        "cat notes.txt; cat {}; echo new > made.txt; echo x > {}; echo done",
        outside.path().join("secret.txt").display(),
        escape.display()
    );
    let server = MockServer::start(move |req| {
        if req.first_user_text() == Some("read-only child") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call(
                    "bash",
                    json!({"command": "touch ro-made.txt; echo x > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo RO-RAN"}),
                ),
                _ => MockReply::text("SUMMARY: tried"),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("bash", json!({ "command": parent_shell })),
            1 => MockReply::tool_call(
                "task",
                json!({"description": "read-only child", "agent_type": "explore"}),
            ),
            _ => MockReply::text("done"),
        }
    });
    let base = server.base_url();
    let out = brood_without_user_namespaces(
        f.home.path(),
        f.ws.path(),
        &[
            "run",
            "--json",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
            "x",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("shell sandbox: namespaces unavailable")
            && stderr.contains("landlock only"),
        "{stderr}"
    );

    // The parent's shell ran, read the workspace, wrote it, and nothing outside.
    let captured = server.captured();
    let after_shell = serde_json::to_string(captured[1].body()).unwrap();
    assert!(
        after_shell.contains("alpha") && after_shell.contains("done"),
        "{after_shell}"
    );
    assert!(!after_shell.contains("OUTSIDE-SECRET"), "{after_shell}");
    assert!(f.ws.path().join("made.txt").exists(), "{after_shell}");
    assert!(!escape.exists(), "a shell wrote outside the workspace");

    // The read-only child's shell ran (its temp dir works) but wrote nothing.
    let child_second = captured
        .iter()
        .filter(|r| r.first_user_text() == Some("read-only child"))
        .nth(1)
        .map(|r| serde_json::to_string(r.body()).unwrap())
        .unwrap_or_else(|| panic!("the child made no second request: {stderr}"));
    assert!(child_second.contains("RO-RAN"), "{child_second}");
    assert!(!f.ws.path().join("ro-made.txt").exists(), "{child_second}");

    // The ledger keeps the warning on the run.
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    let run_id = report["run_id"].as_str().unwrap();
    let show = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", run_id, "--json"],
        &[],
    );
    let (shown, show_err) = text(&show);
    assert_eq!(show.status.code(), Some(0), "{show_err}");
    let detail: Value = serde_json::from_str(&shown).unwrap();
    let warning = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "warning")
        .unwrap_or_else(|| panic!("no warning event: {shown}"));
    assert!(
        warning["payload"]["sandbox"]
            .to_string()
            .contains("namespaces unavailable"),
        "{warning}"
    );
}
