//! What the CLI's integration test binaries share (each one says `mod common;`): a
//! temporary workspace and home ([`Fixture`]), the brood binary run in a clean
//! environment, the flags that point a run at a brood-mock server, and readers of
//! its output and of the ledger's JSON listings.
#![allow(dead_code)] // each binary uses its own part of it

use brood_mock::{MockRequest, MockServer};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test: this build's, or the one `BROOD_TEST_BIN` names (`.ci/run`
/// sets it to the binary the README's install line installed).
pub fn bin() -> OsString {
    std::env::var_os("BROOD_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_brood").into())
}

/// The brood binary in `ws` with only `HOME` (= `home`) and `PATH` set.
pub fn command(home: &Path, ws: &Path) -> Command {
    command_via(&[], home, ws)
}

/// [`command`], run through `wrapper` (e.g. `setpriv …` to drop root) when given.
pub fn command_via(wrapper: &[&str], home: &Path, ws: &Path) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    cmd.current_dir(ws)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

/// `--provider local --base-url <server> --model m`: a run against `server`.
pub fn local_flags(server: &MockServer) -> Vec<String> {
    [
        "--provider",
        "local",
        "--base-url",
        &server.base_url(),
        "--model",
        "m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A temporary workspace (`ws`) and home directory (`home`).
pub struct Fixture {
    /// `HOME` of every brood run (its user config is `.config/brood/config.toml`).
    pub home: tempfile::TempDir,
    /// The workspace, each run's working directory.
    pub ws: tempfile::TempDir,
}

impl Fixture {
    /// Both empty.
    pub fn new() -> Self {
        Fixture {
            home: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
        }
    }

    /// With `notes.txt` holding `notes` in the workspace.
    pub fn with_notes(notes: &str) -> Self {
        let f = Fixture::new();
        f.write("notes.txt", notes);
        f
    }

    /// Write `text` to `rel` in the workspace, making its directories.
    pub fn write(&self, rel: &str, text: &str) {
        write(&self.ws.path().join(rel), text);
    }

    /// Write the user config (`~/.config/brood/config.toml`); its path.
    pub fn user_config(&self, text: &str) -> PathBuf {
        let path = self.home.path().join(".config/brood/config.toml");
        write(&path, text);
        path
    }

    /// The brood binary in this workspace and home ([`command`]).
    pub fn command(&self) -> Command {
        command(self.home.path(), self.ws.path())
    }

    /// `brood ARGS…`, waited for.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run brood")
    }

    /// `brood ARGS…` with `env` set too: its exit code, stdout and stderr.
    pub fn brood(&self, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
        let out = self
            .command()
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run brood");
        outcome(&out)
    }

    /// `brood agents list --all --json`: every run of the workspace (the command must
    /// succeed).
    pub fn runs(&self) -> Vec<Value> {
        serde_json::from_value(json_of(
            &self.output(&["agents", "list", "--all", "--json"]),
        ))
        .expect("a list of runs")
    }

    /// `brood agents show ID --json` (the command must succeed).
    pub fn show(&self, id: &str) -> Value {
        json_of(&self.output(&["agents", "show", id, "--json"]))
    }
}

/// `brood run --provider local --base-url <server> --model m ARGS…` in `f`.
pub fn run_local(f: &Fixture, server: &MockServer, args: &[&str]) -> Output {
    f.command()
        .arg("run")
        .args(local_flags(server))
        .args(args)
        .output()
        .expect("run brood")
}

/// Write `text` to `path`, making its directories.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A process's stdout and stderr, as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A process's stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A process's exit code (`None`: killed by a signal), stdout and stderr.
pub fn outcome(o: &Output) -> (Option<i32>, String, String) {
    let (out, err) = text(o);
    (o.status.code(), out, err)
}

/// The JSON a successful command printed on stdout.
pub fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("the command printed JSON")
}

/// Block until `server` has received `n` requests (a condition, not a delay); fails
/// the test after a minute.
pub fn wait_for_requests(server: &MockServer, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            server.wait_for_requests(n),
        )
        .await
        .unwrap_or_else(|_| panic!("the mock never received {n} requests"));
    });
}

/// Whether `req` is a child's: the tests' children get prompts starting `child `.
pub fn is_child(req: &MockRequest) -> bool {
    req.first_user_text()
        .is_some_and(|t| t.starts_with("child "))
}
