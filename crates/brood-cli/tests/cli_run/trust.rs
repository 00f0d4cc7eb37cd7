//! What a run may reach: a model-driven shell never sees API keys, every shell is
//! sandboxed even without privileges, and an untrusted workspace cannot choose the
//! endpoint, the key or the children's provider.

use super::*;

#[test]
fn a_model_driven_shell_never_sees_api_keys() {
    // Variables pass into a shell only by the allow list: the key never, an
    // ordinary variable only once the user's `[sandbox] env_allow` names it.
    for allowed in [false, true] {
        let f = fixture();
        if allowed {
            let dir = f.home.path().join(".config/brood");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("config.toml"),
                "[sandbox]\nenv_allow = [\"PLAIN_*\", \"DEEPSEEK_API_KEY\"]\n",
            )
            .unwrap();
        }
        let server = MockServer::start(|req| match req.assistant_turns() {
            0 => MockReply::tool_call(
                "bash",
                json!({"command": "echo key=[$DEEPSEEK_API_KEY] token=[$GH_TOKEN] other=[$PLAIN_VAR]"}),
            ),
            _ => MockReply::text("done"),
        });
        let out = brood(
            f.home.path(),
            f.ws.path(),
            &[
                "run",
                "--provider",
                "deepseek",
                "--base-url",
                &server.base_url(),
                "--json",
                "x",
            ],
            &[
                ("DEEPSEEK_API_KEY", "sk-very-secret"),
                ("GH_TOKEN", "gh-secret"),
                ("PLAIN_VAR", "visible"),
            ],
        );
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let bodies = server.requests();
        let second = serde_json::to_string(&bodies[1]).unwrap();
        assert!(
            second.contains("key=[] token=[]"),
            "no key or token reaches the shell: {second}"
        );
        let other = if allowed {
            "other=[visible]"
        } else {
            "other=[]"
        };
        assert!(second.contains(other), "allow list ({allowed}): {second}");
        assert!(!second.contains("sk-very-secret"));
    }
}

/// As a user without privileges (uid 65534) the sandbox is the same as root's: the
/// namespaces come from a user namespace. Shells read the workspace, write it, and
/// still cannot change `.git/config` (writable for that user on disk), write outside
/// the workspace, or keep a daemon running.
#[test]
fn without_privileges_every_shell_is_still_sandboxed() {
    let f = fixture();
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(f.ws.path())
        .status()
        .unwrap();
    assert!(status.success());
    let outside = tempfile::tempdir().unwrap();
    for root in [f.home.path(), f.ws.path(), outside.path()] {
        let st = Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(root)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let config_before = std::fs::read_to_string(f.ws.path().join(".git/config")).unwrap();
    let escape = outside.path().join("escaped");
    let command = format!(
        "cat notes.txt; echo new > made.txt; echo x > {}; echo '[x]' >> .git/config; \
         setsid -f sleep 300.4242; echo done",
        escape.display()
    );
    let server = MockServer::start(move |req| match req.assistant_turns() {
        0 => MockReply::tool_call("bash", json!({ "command": command })),
        _ => MockReply::text("done"),
    });
    let out = command_via(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        f.home.path(),
        f.ws.path(),
    )
    .arg("run")
    .args(local_flags(&server))
    .arg("x")
    .output()
    .expect("run setpriv");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("namespaces unavailable"), "{stderr}");
    let second = serde_json::to_string(&server.requests()[1]).unwrap();
    assert!(
        second.contains("alpha") && second.contains("done"),
        "{second}"
    );
    assert!(!escape.exists(), "a shell wrote outside the workspace");
    assert!(f.ws.path().join("made.txt").exists(), "{second}");
    assert_eq!(
        std::fs::read_to_string(f.ws.path().join(".git/config")).unwrap(),
        config_before,
        "{second}"
    );
    let alive = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x00300.4242\x00")
    });
    assert!(!alive, "a detached daemon outlived the call");
}

/// Issue 13.6: a workspace `.brood/config.toml` cannot choose the endpoint or the
/// key variable unless the user trusts the workspace (`trusted_workspaces` in the
/// user config, or `--trust`). Also: an empty `XDG_CONFIG_HOME` means unset, so
/// the user config under `$HOME/.config` is still read.
#[test]
fn an_untrusted_workspace_cannot_choose_the_endpoint_a_trusted_one_can() {
    let f = fixture();
    let server = MockServer::start(|_| MockReply::text("reached the mock"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    let user_cfg = format!(
        "provider = \"local\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_attempts = 1\n",
        server.base_url()
    );
    std::fs::write(user_dir.join("config.toml"), &user_cfg).unwrap();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    let ws_file = f.ws.path().join(".brood/config.toml");
    std::fs::write(
        &ws_file,
        format!(
            "base_url = \"http://127.0.0.1:{closed}/v1\"\napi_key_env = \"BROOD_TEST_SECRET\"\n\
             [providers.local]\nbase_url = \"http://127.0.0.1:{closed}/v1\"\n"
        ),
    )
    .unwrap();
    let env = [("XDG_CONFIG_HOME", ""), ("BROOD_TEST_SECRET", "s3cret")];

    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("reached the mock"), "{stdout}");
    assert_eq!(server.requests().len(), 1);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("ignoring")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {stderr}");
    for needle in [
        "base_url",
        "api_key_env",
        "providers",
        "config.toml",
        "--trust",
    ] {
        assert!(warnings[0].contains(needle), "{needle}: {}", warnings[0]);
    }

    let show = brood(f.home.path(), f.ws.path(), &["config", "show"], &env);
    let (shown, _) = text(&show);
    assert!(
        shown.contains("# ignored: base_url") && shown.contains("# ignored: api_key_env"),
        "{shown}"
    );

    // `--trust`: the workspace's endpoint is used (and refuses connections).
    let out = brood(f.home.path(), f.ws.path(), &["run", "--trust", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{closed}")), "{stderr}");

    // Listed in the user's trusted_workspaces (by another spelling of the path).
    let listed = format!("{}/.", f.ws.path().display());
    std::fs::write(
        user_dir.join("config.toml"),
        format!("{user_cfg}trusted_workspaces = [{listed:?}]\n"),
    )
    .unwrap();
    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{closed}")), "{stderr}");
    assert!(!stderr.contains("ignoring"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "the mock was not asked again");
}

/// `[subagents] subagent_provider` chooses where every child's requests (and the
/// user's key for that provider) go: from an untrusted workspace it is ignored with
/// the same warning as the other endpoint keys; `--trust` lets it apply.
#[test]
fn an_untrusted_workspace_cannot_choose_the_childrens_provider() {
    let f = fixture();
    let reply = |answer: &'static str| {
        move |req: &brood_mock::MockRequest| {
            if req.first_user_text() == Some("look at notes.txt") {
                return MockReply::text(answer);
            }
            match req.assistant_turns() {
                0 => MockReply::tool_call("task", json!({"description": "look at notes.txt"})),
                _ => MockReply::text("done"),
            }
        }
    };
    let main = MockServer::start(reply("SUMMARY: child on the user's endpoint"));
    let other = MockServer::start(reply("SUMMARY: child on the workspace's choice"));
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(
        user_dir.join("config.toml"),
        format!(
            "provider = \"local\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_attempts = 1\n\
             [providers.llamacpp]\nbase_url = \"{}\"\n",
            main.base_url(),
            other.base_url()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[subagents]\nsubagent_provider = \"llamacpp\"\nmax_depth = 1\n",
    )
    .unwrap();
    let env = [("XDG_CONFIG_HOME", "")];

    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        other.requests().len(),
        0,
        "the workspace chose the provider"
    );
    let child_requests = |server: &MockServer| {
        server
            .captured()
            .iter()
            .filter(|r| r.first_user_text() == Some("look at notes.txt"))
            .count()
    };
    assert!(
        child_requests(&main) > 0,
        "the child ran elsewhere: {stderr}"
    );
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("ignoring")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {stderr}");
    assert!(
        warnings[0].contains("subagents.subagent_provider") && warnings[0].contains("--trust"),
        "{}",
        warnings[0]
    );
    let show = brood(f.home.path(), f.ws.path(), &["config", "show"], &env);
    let (shown, _) = text(&show);
    assert!(
        shown.contains("# ignored: subagents.subagent_provider = \"llamacpp\""),
        "{shown}"
    );

    // Trusted this once: the child goes where the workspace says.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--trust", "--json", "go"],
        &env,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("ignoring"), "{stderr}");
    assert!(child_requests(&other) > 0, "{stdout}");
}
