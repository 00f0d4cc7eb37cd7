//! `brood chat` full-screen, driven as a person would: the real binary in a real
//! pseudo-terminal, keys typed into it, and its screen read back through a VT100
//! parser. Children are held in flight by the mock's gate, so "running" is
//! observed without sleeps.

use super::*;
use brood_mock::Gate;
use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};
use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long the screen may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(60);

/// The screen as the terminal shows it, and whether the program's side closed.
struct Shared {
    parser: vt100::Parser,
    closed: bool,
    /// Inside a frame (between the UI's begin and end of a synchronized update):
    /// the screen is half drawn and not judged.
    drawing: bool,
}

/// The synchronized-update marks the UI puts around each frame (DEC mode 2026).
const FRAME_BEGIN: &[u8] = b"\x1b[?2026h";
const FRAME_END: &[u8] = b"\x1b[?2026l";

/// Whether the output ends inside a frame, after `tail` (the end of what came
/// before, so a mark split between two reads is seen) and `chunk`.
fn ends_inside_frame(tail: &[u8], chunk: &[u8], before: bool) -> bool {
    let joined = [tail, chunk].concat();
    let last = |mark: &[u8]| joined.windows(mark.len()).rposition(|w| w == mark);
    match (last(FRAME_BEGIN), last(FRAME_END)) {
        (Some(b), Some(e)) => b > e,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => before,
    }
}

/// `brood chat` in a pseudo-terminal.
struct Tui {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<(Mutex<Shared>, Condvar)>,
    _master: Box<dyn MasterPty + Send>,
}

impl Tui {
    /// `brood chat --provider local --base-url <server> --model m` on a
    /// `rows`×`cols` terminal.
    fn spawn(f: &Fixture, server: &MockServer, rows: u16, cols: u16) -> Tui {
        let base = server.base_url();
        let args = [
            "chat",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
        ];
        Tui::spawn_with(f, &args, &[], rows, cols)
    }

    /// `brood ARGS…` with `env` on a `rows`×`cols` terminal.
    fn spawn_with(f: &Fixture, args: &[&str], env: &[(&str, &str)], rows: u16, cols: u16) -> Tui {
        Tui::spawn_program(f, env!("CARGO_BIN_EXE_brood"), args, env, (rows, cols))
    }

    /// `PROGRAM ARGS…` with `env` on a terminal of `size` (rows, columns).
    fn spawn_program(
        f: &Fixture,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        (rows, cols): (u16, u16),
    ) -> Tui {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pseudo-terminal");
        let mut cmd = CommandBuilder::new(program);
        cmd.args(args);
        cmd.cwd(f.ws.path());
        cmd.env_clear();
        cmd.env("HOME", f.home.path());
        cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.env("TERM", "xterm-256color");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).expect("spawn brood chat");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("pty reader");
        let writer = pair.master.take_writer().expect("pty writer");
        let screen = Arc::new((
            Mutex::new(Shared {
                parser: vt100::Parser::new(
                    std::num::NonZeroU16::new(rows).expect("rows"),
                    std::num::NonZeroU16::new(cols).expect("cols"),
                    0,
                ),
                closed: false,
                drawing: false,
            }),
            Condvar::new(),
        ));
        let feed = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut tail: Vec<u8> = Vec::new();
            loop {
                let n = reader.read(&mut buf).unwrap_or(0);
                let (lock, changed) = &*feed;
                // A test that failed holding the lock must not hide its message.
                let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
                if n == 0 {
                    s.closed = true;
                    s.drawing = false;
                } else {
                    let chunk = &buf[..n];
                    s.parser.process(chunk);
                    s.drawing = ends_inside_frame(&tail, chunk, s.drawing);
                    let keep = [tail.as_slice(), chunk].concat();
                    tail = keep[keep.len().saturating_sub(FRAME_BEGIN.len())..].to_vec();
                }
                changed.notify_all();
                if n == 0 {
                    break;
                }
            }
        });
        Tui {
            child,
            writer,
            screen,
            _master: pair.master,
        }
    }

    /// Type `keys` (raw bytes: `\r` is Enter, `\x03` Ctrl-C, `\x1b` Esc).
    fn keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).expect("type");
        self.writer.flush().expect("type");
    }

    /// A line typed and sent.
    fn line(&mut self, text: &str) {
        self.keys(text);
        self.keys("\r");
    }

    fn contents(&self) -> String {
        self.screen.0.lock().unwrap().parser.screen().contents()
    }

    /// Wait until the screen satisfies `ok` (it is redrawn as output arrives);
    /// panics naming `what` with the screen after [`PATIENCE`].
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        let (lock, changed) = &*self.screen;
        let mut s = lock.lock().unwrap();
        loop {
            let text = s.parser.screen().contents();
            if !s.drawing && ok(&text) {
                return text;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && !s.closed,
                "timed out waiting for {what}; the screen:\n{text}"
            );
            s = changed.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Wait for the program to end (bounded); its exit code. Its side of the
    /// terminal closes when it (and everything that inherited the terminal) has
    /// exited.
    fn wait_exit(&mut self) -> u32 {
        let deadline = Instant::now() + PATIENCE;
        {
            let (lock, changed) = &*self.screen;
            let mut s = lock.lock().unwrap();
            while !s.closed {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let text = s.parser.screen().contents();
                    drop(s);
                    let _ = self.child.kill();
                    panic!("brood chat did not exit; the screen:\n{text}");
                }
                s = changed.wait_timeout(s, left).unwrap().0;
            }
        }
        self.child.wait().expect("wait for brood").exit_code()
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Lines of `screen` that mention `needle` and `state`.
fn count(screen: &str, needle: &str, state: &str) -> usize {
    screen
        .lines()
        .filter(|l| l.contains(needle) && l.contains(state))
        .count()
}

/// The parent fans `fan out` out to three explore children; each child's answer
/// waits behind `gate`; every child's requested model is kept.
fn fan_out_server(gate: &Gate, child_models: Arc<Mutex<Vec<String>>>) -> MockServer {
    let gate = gate.clone();
    MockServer::start(move |req| {
        if req
            .first_user_text()
            .is_some_and(|t| t.starts_with("child "))
        {
            child_models.lock().unwrap().push(req.model().to_string());
            return MockReply::text("SUMMARY: looked").until(&gate);
        }
        let last = req.last_message().cloned().unwrap_or_default();
        if last.get("role").and_then(Value::as_str) == Some("tool") {
            // A hostile answer: escapes that would leave the UI's screen and clear
            // it were they written to the terminal as they came.
            return MockReply::text("fanned out to three\x1b[?1049l\x1b[2J\x1b]2;pwned\x07");
        }
        MockReply::tool_call(
            "task",
            json!({"prompts": ["child a", "child b", "child c"], "agent_type": "explore"}),
        )
    })
}

#[test]
fn tui_shows_children_running_then_completed_and_answers_commands() {
    let f = fixture();
    let gate = Gate::new();
    let models = Arc::new(Mutex::new(Vec::new()));
    let server = fan_out_server(&gate, models.clone());
    let mut tui = Tui::spawn(&f, &server, 50, 160);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));

    tui.line("fan out");
    let s = tui.wait_for("three children running", |s| {
        count(s, "[explore · m]", "— running") == 3
    });
    assert!(s.contains("Working (3)"), "{s}");
    assert!(s.contains("├─ ") && s.contains("└─ "), "{s}");
    gate.open();
    // The turn's end too (the status line says ready), not only its answer on
    // screen: /model-subagent below waits for no turn.
    let s = tui.wait_for(
        "three children completed, the answer, the turn's end",
        |s| {
            count(s, "[explore · m]", "— completed") == 3
                && s.contains("fanned out to three")
                && s.contains("ready · /help")
        },
    );
    assert!(s.contains("Done (3)"), "{s}");
    assert!(!s.contains("Working ("), "{s}");
    assert!(
        tui.screen
            .0
            .lock()
            .unwrap()
            .parser
            .screen()
            .alternate_screen(),
        "the model's escapes reached the terminal: {s}"
    );
    let first = models.lock().unwrap().len();

    // /agents: the whole tree, the turn's root included (the pane lists children).
    tui.line("/agents");
    tui.wait_for("/agents", |s| {
        s.contains("parent [parent · m] fan out — completed")
    });

    tui.line("/models-subagent");
    tui.wait_for("/models-subagent", |s| {
        s.lines()
            .any(|l| l.contains("explore ") && l.contains(" m on local (the main model)"))
    });
    tui.line("/model-subagent explore kid-model");
    tui.wait_for("/model-subagent", |s| {
        s.contains("explore children: the next ones run on kid-model")
    });
    tui.line("fan out");
    let s = tui.wait_for("three kid-model children completed", |s| {
        count(s, "[explore · kid-model]", "— completed") == 3
    });
    assert!(s.contains("Done (6)"), "{s}");
    // Checked on the mock's side: the first children asked for m, the next ones
    // for kid-model.
    let asked = models.lock().unwrap().clone();
    assert!(first >= 3 && asked.len() >= first + 3, "{asked:?}");
    assert!(asked[..first].iter().all(|m| m == "m"), "{asked:?}");
    assert!(asked[first..].iter().all(|m| m == "kid-model"), "{asked:?}");

    tui.line("/status");
    let s = tui.wait_for("/status", |s| s.contains("children: 0 running, 0 queued"));
    assert!(s.contains("limits: max_concurrent "), "{s}");
    assert!(s.contains("brood.db"), "{s}");
    assert!(s.contains("local · m"), "the status line: {s}");

    // Tab completes a command; an unknown one says what is accepted.
    tui.keys("/bog\t\r");
    tui.wait_for("an unknown command's error", |s| {
        s.contains("unknown command /bog (accepted: /help")
    });

    let pid = tui.child.process_id().expect("pid");
    tui.line("/quit");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "brood (pid {pid}) is still there"
    );
    let s = tui.screen.0.lock().unwrap();
    assert!(
        !s.parser.screen().alternate_screen(),
        "the terminal was left on the alternate screen"
    );
}

/// A chat that fans out to three explore children (held by the mock's gate),
/// then quits with `Ctrl-C` twice while they run; the server, for what follows.
fn fan_out_then_ctrl_c_twice(f: &Fixture) -> MockServer {
    let gate = Gate::new();
    let server = fan_out_server(&gate, Arc::default());
    let mut tui = Tui::spawn(f, &server, 40, 120);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));
    tui.line("fan out");
    tui.wait_for("three children running", |s| {
        count(s, "[explore · m]", "— running") == 3
    });
    tui.keys("\x03");
    tui.wait_for("the second Ctrl-C asked for", |s| {
        s.contains("Ctrl-C again to quit")
    });
    tui.keys("\x03");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
    drop(tui);
    server
}

/// `Ctrl-C` twice quits while children run: every run is cancelled and recorded.
#[test]
fn tui_ctrl_c_twice_cancels_and_records_every_child() {
    let f = fixture();
    let _server = fan_out_then_ctrl_c_twice(&f);

    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 4, "the turn and its three children: {runs:?}");
    // Every run's status in the message: which one was not cancelled, and how the
    // others ended, tells a flake's cause.
    let statuses: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {} {}", r["name"], r["status"], r["status_reason"]))
        .collect();
    assert!(
        runs.iter().all(|r| r["status"] == "cancelled"),
        "{statuses:#?}"
    );
    let kids = runs.iter().filter(|r| r["parent_id"].is_string()).count();
    assert_eq!(kids, 3, "{runs:?}");
}

/// `brood chat --resume` draws the earlier session's agent tree again from the
/// ledger: the three children a double Ctrl-C cancelled are in the tree pane,
/// each with its recorded state, before anything new runs.
#[test]
fn tui_resume_draws_the_earlier_sessions_tree() {
    let f = fixture();
    let server = fan_out_then_ctrl_c_twice(&f);

    let base = server.base_url();
    let args = [
        "chat",
        "--resume",
        "--provider",
        "local",
        "--base-url",
        &base,
        "--model",
        "m",
    ];
    let mut tui = Tui::spawn_with(&f, &args, &[], 40, 120);
    tui.wait_for("the earlier session's children, as recorded", |s| {
        count(s, "[explore · m]", "— cancelled") == 3
    });
    tui.line("/quit");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
}

/// The id of the run whose objective is `objective`, from `brood agents list`.
fn run_id_of(f: &Fixture, objective: &str) -> String {
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let runs: Value = serde_json::from_str(&text(&out).0).unwrap();
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["objective"] == objective);
    run.and_then(|r| r["id"].as_str())
        .unwrap_or_else(|| panic!("no run for {objective:?}: {runs}"))
        .to_string()
}

/// `/resume ID` in the full-screen UI runs like a turn, on its own task: while
/// the resumed child's model call waits at the mock the tree shows it running
/// and a command answers, Esc interrupts it (recorded cancelled); resumed again,
/// it completes under its own id. A `/resume` that blocked the event loop would
/// show none of it until the run ended — and the gate is opened only after.
#[test]
fn tui_resume_id_runs_live_and_esc_interrupts_it() {
    let f = fixture();
    let _first = fan_out_then_ctrl_c_twice(&f);
    let id = run_id_of(&f, "child a");
    let gate = Gate::new();
    let server = fan_out_server(&gate, Arc::default());
    let mut tui = Tui::spawn(&f, &server, 40, 160);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));
    let running = |s: &str| count(s, "[explore · m] child a", "— running") == 1;

    tui.line(&format!("/resume {id}"));
    tui.wait_for("the resumed child running in the tree", running);
    tui.line("/status");
    let s = tui.wait_for("/status while it runs", |s| {
        s.contains("children: 1 running, 0 queued")
    });
    assert!(running(&s), "{s}");
    tui.keys("\x1b");
    tui.wait_for("the resumed child interrupted", |s| {
        count(s, "[explore · m] child a", "— cancelled") == 1
            && s.contains(&format!("run {id} ended: cancelled"))
    });

    tui.line(&format!("/resume {id}"));
    tui.wait_for("the child running again", running);
    gate.open();
    tui.wait_for("the child completed, its answer shown", |s| {
        count(s, "[explore · m] child a", "— completed") == 1
            && s.contains(&format!("resumed run {id}"))
            && s.contains("SUMMARY: looked")
    });
    tui.line("/quit");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", &id, "--json"],
        &[],
    );
    let run: Value = serde_json::from_str(&text(&out).0).unwrap();
    assert_eq!(run["status"], "completed", "{run}");
}

/// Bare `brood` on a terminal is the full-screen chat; a prompt edited over two
/// lines, a child's transcript shown live, tool calls expanded, `Esc` interrupting
/// the turn, the history recalled with `Up`.
#[test]
fn tui_bare_brood_edits_selects_expands_and_interrupts() {
    let f = fixture();
    let gate = Gate::new();
    let server = fan_out_server(&gate, Arc::default());
    let base = server.base_url();
    let env = [
        ("BROOD_PROVIDER", "local"),
        ("BROOD_BASE_URL", base.as_str()),
        ("BROOD_MODEL", "m"),
    ];
    let mut tui = Tui::spawn_with(&f, &[], &env, 40, 120);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));

    // A trailing `\` continues the prompt on a new line.
    tui.keys("fan\\\r");
    tui.line("out");
    tui.wait_for("three children running", |s| {
        count(s, "[explore · m]", "— running") == 3
    });
    let sent = server.captured()[0]
        .last_message()
        .cloned()
        .unwrap_or_default();
    assert_eq!(sent["content"], "fan\nout", "{sent}");

    // Ctrl-N: the first child's transcript, live; Ctrl-P: back to the conversation.
    tui.keys("\x0e");
    tui.wait_for("the child's transcript", |s| {
        s.contains("explore [explore · m] — running (Esc: back)") && s.contains("task: child a")
    });
    tui.keys("\x10");
    tui.wait_for("the conversation with the collapsed task call", |s| {
        s.contains("▸ task") && !s.contains("task: child a")
    });
    // Ctrl-O: tool calls show their arguments.
    tui.keys("\x0f");
    tui.wait_for("the expanded task call", |s| {
        s.contains("▾ task") && s.contains("│ {\"prompts\":[\"child a\"")
    });

    // Esc: the turn and its task children stop, recorded cancelled.
    tui.keys("\x1b");
    let s = tui.wait_for("the interrupted turn", |s| {
        s.contains("turn ended: interrupted (Esc)") && count(s, "[explore · m]", "— cancelled") == 3
    });
    assert!(s.contains("Done (3)"), "{s}");

    // Up: the last prompt, both lines, back in the editor.
    tui.keys("\x1b[A");
    tui.wait_for("the recalled prompt", |s| {
        s.lines().any(|l| l.starts_with("│fan ")) && s.lines().any(|l| l.starts_with("│out "))
    });
    tui.keys("\x03\x03");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
}

/// SIGTERM (a supervisor, `timeout`) while children run: the chat leaves as
/// `/quit` does — every run cancelled and recorded, the terminal restored — with
/// the shell's exit code for the signal.
#[test]
fn tui_sigterm_restores_the_terminal_and_records_every_run() {
    let f = fixture();
    let gate = Gate::new();
    let server = fan_out_server(&gate, Arc::default());
    let mut tui = Tui::spawn(&f, &server, 40, 120);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));
    tui.line("fan out");
    tui.wait_for("three children running", |s| {
        count(s, "[explore · m]", "— running") == 3
    });
    let pid = tui.child.process_id().expect("pid");
    send_signal(pid, "TERM");
    assert_eq!(tui.wait_exit(), 128 + 15, "{}", tui.contents());
    let s = tui.screen.0.lock().unwrap();
    assert!(
        !s.parser.screen().alternate_screen(),
        "the terminal was left on the alternate screen"
    );
    assert!(
        s.parser
            .screen()
            .contents()
            .contains("SIGTERM received; left the chat"),
        "{}",
        s.parser.screen().contents()
    );
    drop(s);
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let runs: Value = serde_json::from_str(&text(&out).0).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert!(runs.iter().all(|r| r["status"] == "cancelled"), "{runs:?}");
}

/// An `ask` rule in the workspace config; two children ask at once. Both queue
/// as "Needs input"; the prompt names the asking agent and the rule; allow once
/// runs the first child's command, deny sends its reason to the second child's
/// model (checked at the mock).
#[test]
fn tui_approval_prompt_names_the_agent_and_both_answers_behave() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[permissions]\nask = [\"bash(touch:*)\"]\n",
    )
    .unwrap();
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if let Some(file) = first.strip_prefix("child touch ") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("bash", json!({ "command": format!("touch {file}") })),
                _ => MockReply::text("SUMMARY: tried"),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call(
                "task",
                json!({"prompts": ["child touch first.txt", "child touch second.txt"]}),
            ),
            _ => MockReply::text("both children reported"),
        }
    });
    let mut tui = Tui::spawn(&f, &server, 50, 160);
    tui.wait_for("the empty chat", |s| s.contains("Type a prompt"));
    tui.line("touch two files");
    let s = tui.wait_for("two children asking", |s| {
        s.contains("approval needed")
            && s.contains("1 more waiting")
            && s.contains("Needs input (2)")
    });
    assert!(
        s.contains("wants to run bash") && s.contains("asked by the rule ask bash(touch:*)"),
        "the prompt names the agent, the tool and the rule: {s}"
    );
    // The prompt shows the call's arguments (the tree shows each child's task).
    let asked = |file: &str| format!("\"command\":\"touch {file}\"");
    let (allowed, denied) = if s.contains(&asked("first.txt")) {
        ("first.txt", "second.txt")
    } else {
        ("second.txt", "first.txt")
    };
    tui.keys("a");
    let s = tui.wait_for("the second question", |s| {
        s.contains(&asked(denied)) && !s.contains("more waiting")
    });
    assert!(s.contains("approval needed"), "{s}");
    tui.keys("d");
    tui.keys("not this one, says the user");
    tui.keys("\r");
    tui.wait_for("the turn's answer", |s| {
        s.contains("both children reported")
    });
    assert!(
        f.ws.path().join(allowed).exists(),
        "allow once ran the command"
    );
    assert!(!f.ws.path().join(denied).exists(), "deny did not");
    let told = server.captured().iter().any(|r| {
        r.first_user_text() == Some(&format!("child touch {denied}"))
            && r.last_message()
                .and_then(|m| m["content"].as_str())
                .is_some_and(|c| {
                    c.contains("the user denied this call: not this one, says the user")
                })
    });
    assert!(told, "the denial's reason reached the child's model");
    tui.line("/quit");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
}

/// Plain `brood chat` with stdin a terminal (stdout a pipe, so line mode) asks
/// about an `ask` rule's call on the terminal: `y` runs it; `n REASON` refuses
/// it and the model reads the reason (checked at the mock). Reading prompts from
/// a pipe it refuses such calls naming the rule (chat.rs).
#[test]
fn plain_chat_on_a_terminal_asks_before_an_ask_rules_call() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[permissions]\nask = [\"bash(touch:*)\"]\n",
    )
    .unwrap();
    let server = MockServer::start(|req| {
        let last = req.last_message().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return MockReply::text("the turn is over");
        }
        let file = last["content"]
            .as_str()
            .unwrap_or_default()
            .replace(' ', "-");
        MockReply::tool_call("bash", json!({ "command": format!("touch {file}.txt") }))
    });
    let script = format!(
        "\"$0\" chat --provider local --base-url {} --model m | cat",
        server.base_url()
    );
    let brood = env!("CARGO_BIN_EXE_brood");
    let mut tui = Tui::spawn_program(&f, "sh", &["-c", &script, brood], &[], (40, 160));
    tui.wait_for("plain mode's greeting", |s| s.contains("type a prompt"));
    let asked = |n: usize| {
        move |s: &str| {
            s.matches("approval needed: parent [parent · parent] wants to run bash")
                .count()
                == n
                && s.contains("asked by the rule ask bash(touch:*)")
                && s.trim_end().ends_with("n [reason]: deny >")
        }
    };

    tui.line("touch one");
    let s = tui.wait_for("the question", asked(1));
    assert!(s.contains(r#"{"command":"touch touch-one.txt"}"#), "{s}");
    tui.line("y");
    tui.wait_for("the first turn's end", |s| s.contains("the turn is over"));
    assert!(f.ws.path().join("touch-one.txt").exists(), "y ran the call");

    tui.line("touch two");
    tui.wait_for("the second question", asked(2));
    tui.line("n not in this directory");
    tui.wait_for("the second turn's end", |s| {
        s.matches("the turn is over").count() == 2
    });
    assert!(
        !f.ws.path().join("touch-two.txt").exists(),
        "n did not run it"
    );
    let told = server.captured().iter().any(|r| {
        r.last_message()
            .and_then(|m| m["content"].as_str())
            .is_some_and(|c| c.contains("the user denied this call: not in this directory"))
    });
    assert!(told, "the reason reached the model");
    tui.line("/quit");
    assert_eq!(tui.wait_exit(), 0, "{}", tui.contents());
}
