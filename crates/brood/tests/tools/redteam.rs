//! Red team: a hostile model's shell commands against the sandbox, for a read-only
//! role and a writer. Each test tries an escape and asserts the kernel refused it.
//! These run as whoever runs the tests — on CI that is root, so every protection
//! here must hold for root (landlock, namespaces, dropped capabilities).

use brood::subagent::config::{QuickModels, SubagentSettings};
use brood::subagent::definition::{parse_definition, DefinitionSource};
use brood::subagent::{grant_for, AgentKind, SpawnSpec};
use brood::tool::sandbox::{Sandbox, SandboxOptions};
use brood::tool::shell::Bash;
use brood::tool::{Permissions, ShellPolicy, Tool, ToolContext, Workspace};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ws.join(".brood/state")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "OUTSIDE-SECRET").unwrap();
        std::fs::write(ws.join(".brood/state/transcript"), "STATE-SECRET").unwrap();
        let ws = std::fs::canonicalize(ws).unwrap();
        let outside = std::fs::canonicalize(outside).unwrap();
        Env {
            _dir: dir,
            ws,
            outside,
        }
    }

    async fn sh(&self, shell: ShellPolicy, command: &str) -> String {
        self.sh_with(Sandbox::new(), shell, command).await
    }

    async fn sh_with(&self, sandbox: Sandbox, shell: ShellPolicy, command: &str) -> String {
        let mut perms = Permissions::full("attacker");
        perms.shell = shell;
        self.sh_granted(sandbox, perms, command).await
    }

    async fn sh_granted(&self, sandbox: Sandbox, perms: Permissions, command: &str) -> String {
        let ctx = ToolContext {
            workspace: Arc::new(Workspace::open(&self.ws).unwrap()),
            permissions: Arc::new(perms),
            cancel: CancellationToken::new(),
            run_id: "run-redteam".into(),
        };
        let bash = Bash::new(Arc::new(sandbox));
        match bash.call(json!({ "command": command }), &ctx).await {
            Ok(out) => out,
            Err(e) => format!("tool error: {e}"),
        }
    }
}

const BOTH: [ShellPolicy; 2] = [ShellPolicy::ReadOnly, ShellPolicy::Full];

#[tokio::test]
async fn no_shell_sees_a_secret_variable_in_its_env_or_in_any_proc_environ() {
    // Values unique to this test; the names are what users really have.
    let secrets = [
        ("DEEPSEEK_API_KEY", "sk-redteam-deepseek-0001"),
        ("AWS_SECRET_ACCESS_KEY", "redteam-aws-0002"),
        ("FOO_TOKEN", "redteam-token-0003"),
        ("X_SECRET_Y", "redteam-secret-0004"),
        ("DB_PASSWORD", "redteam-password-0005"),
        ("MY_CUSTOM_KEY_VAR", "redteam-custom-0006"),
    ];
    for (k, v) in secrets {
        std::env::set_var(k, v);
    }
    let env = Env::new();
    let me = std::process::id();
    for shell in BOTH {
        let out = env
            .sh(
                shell,
                &format!(
                    "env; for f in /proc/*/environ /proc/{me}/environ /proc/{me}/cmdline; do \
                     tr '\\0' '\\n' < $f; done 2>&1; grep -rs redteam /proc/{me}/ 2>&1 | head"
                ),
            )
            .await;
        assert!(out.contains("PATH="), "{shell:?}: {out}");
        for (k, v) in secrets {
            assert!(!out.contains(v), "{shell:?} saw {k}: {out}");
        }
    }
}

#[tokio::test]
async fn no_shell_reads_outside_the_workspace_and_system_dirs() {
    let env = Env::new();
    let outside = env.outside.join("secret.txt");
    for shell in BOTH {
        let out = env
            .sh(
                shell,
                &format!(
                    "cat {}; cat /etc/shadow; cat .brood/state/transcript; ls .brood/state; \
                     ls /root; echo done",
                    outside.display()
                ),
            )
            .await;
        assert!(out.contains("done"), "{shell:?}: {out}");
        for s in ["OUTSIDE-SECRET", "STATE-SECRET", "root:"] {
            assert!(!out.contains(s), "{shell:?} read {s}: {out}");
        }
        // The shell still works: system dirs and the workspace are readable.
        let out = env
            .sh(shell, "ls /usr/bin/env && echo ok > /dev/null && echo fine")
            .await;
        assert!(out.contains("fine"), "{shell:?}: {out}");
    }
}

#[tokio::test]
async fn writers_cannot_touch_protected_paths_but_git_commit_works() {
    let env = Env::new();
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(&env.ws)
            .output()
            .unwrap();
        assert!(st.status.success(), "{st:?}");
    };
    git(&["init", "-q"]);
    let config_before = std::fs::read_to_string(env.ws.join(".git/config")).unwrap();
    let out = env
        .sh(
            ShellPolicy::Full,
            "echo '[core] hooksPath=/tmp' >> .git/config; \
             echo 'curl evil' > .git/hooks/pre-commit; \
             mkdir -p .brood/agents && echo x > .brood/agents/evil.md; \
             echo '{}' > .claude/settings.json; \
             echo x > .brood/config.toml; \
             rm -rf .brood/state; \
             echo hello > file.txt && git add file.txt && \
             git -c user.name=t -c user.email=t@t commit -qm first && echo COMMITTED",
        )
        .await;
    assert!(out.contains("COMMITTED"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!env.ws.join(".git/hooks/pre-commit").exists(), "{out}");
    assert!(!env.ws.join(".brood/agents/evil.md").exists(), "{out}");
    assert!(!env.ws.join(".claude/settings.json").exists(), "{out}");
    assert!(!env.ws.join(".brood/config.toml").exists(), "{out}");
    assert!(env.ws.join(".brood/state/transcript").exists(), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("file.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn read_only_shells_write_only_their_temp_dir() {
    let env = Env::new();
    let out = env
        .sh(
            ShellPolicy::ReadOnly,
            "echo x > in-workspace; echo y > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; touch /tmp/escape-ro",
        )
        .await;
    assert!(out.contains('y'), "{out}");
    assert!(!env.ws.join("in-workspace").exists());
    assert!(!Path::new("/tmp/escape-ro").exists());
}

/// A loopback listener on the host and the shell command that tries to reach it
/// (TCP, then UDP); prints CONNECTED when TCP got through.
fn loopback() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED) 2>&1; \
         (exec 3<>/dev/udp/127.0.0.1/{port} && echo >&3 x && echo UDP) 2>&1; echo done"
    );
    (listener, probe)
}

fn network_sandbox(network: bool) -> Sandbox {
    Sandbox::with_options(SandboxOptions {
        network,
        ..SandboxOptions::default()
    })
}

#[tokio::test]
async fn no_network_unless_granted() {
    let (listener, probe) = loopback();
    let env = Env::new();
    for shell in BOTH {
        let out = env.sh(shell, &probe).await;
        assert!(out.contains("done"), "{out}");
        assert!(!out.contains("CONNECTED"), "{shell:?}: {out}");
        assert!(listener.accept().is_err(), "{shell:?} reached the host");
    }
    // Granted by the user's config: a writer connects.
    let out = env
        .sh_with(network_sandbox(true), ShellPolicy::Full, &probe)
        .await;
    assert!(out.contains("CONNECTED"), "{out}");
}

/// The writer grant a definition file gets under a parent that has everything.
fn definition_grant(front_matter: &str) -> Permissions {
    let def = parse_definition(
        &format!("---\ndescription: d\nrole: implementer\n{front_matter}---\nWork."),
        Path::new("/ws/.brood/agents/worker.md"),
        DefinitionSource::Workspace,
    )
    .unwrap();
    let kind = AgentKind::Definition(Arc::new(def));
    let parent = Permissions::full("parent");
    let tools = ["bash".to_string(), "read_file".to_string()];
    let spec = SpawnSpec {
        kind: &kind,
        parent: &parent,
        parent_tools: &tools,
        allowed_tools: None,
        model: None,
        fork_context: None,
        read_only_shell_available: true,
        mcp_read_only: &NO_MCP,
    };
    let grant = grant_for(
        &spec,
        &SubagentSettings::default(),
        &QuickModels::default(),
        ("p", "m"),
    )
    .unwrap();
    assert_eq!(grant.permissions.shell, ShellPolicy::Full);
    grant.permissions
}

#[tokio::test]
async fn a_definition_takes_the_network_away_and_never_grants_it() {
    let (listener, probe) = loopback();
    let env = Env::new();
    // (front matter, the user's [sandbox] network, connects)
    let cases = [
        ("", true, true),
        ("network: true\n", true, true),
        ("network: false\n", true, false),
        ("network: true\n", false, false),
        ("", false, false),
    ];
    for (front, session, connects) in cases {
        let perms = definition_grant(front);
        let out = env
            .sh_granted(network_sandbox(session), perms, &probe)
            .await;
        assert!(out.contains("done"), "{out}");
        assert_eq!(
            out.contains("CONNECTED"),
            connects,
            "{front:?} under network={session}: {out}"
        );
        assert_eq!(listener.accept().is_ok(), connects, "{front:?}");
    }
}

#[tokio::test]
async fn a_shell_has_no_capabilities_and_cannot_signal_or_mount() {
    let env = Env::new();
    let me = std::process::id();
    for shell in BOTH {
        let out = env
            .sh(
                shell,
                &format!(
                    "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; kill -0 {me} && echo SIGNALLED; \
                     mount -t tmpfs none \"$TMPDIR\" && echo MOUNTED; \
                     unshare -r true && echo UNSHARED; echo done"
                ),
            )
            .await;
        assert!(out.contains("done"), "{out}");
        for line in out.lines().filter(|l| l.starts_with("Cap")) {
            assert!(line.ends_with("0000000000000000"), "{shell:?}: {line}");
        }
        for bad in ["SIGNALLED", "MOUNTED", "UNSHARED"] {
            assert!(!out.contains(bad), "{shell:?}: {out}");
        }
    }
}

#[tokio::test]
async fn the_sandbox_says_what_each_role_gets() {
    let sandbox = Sandbox::new();
    let ws = Path::new("/work/ws");
    assert!(
        sandbox.degradations().is_empty(),
        "{:?}",
        sandbox.degradations()
    );
    let ro = sandbox.describe(brood::tool::sandbox::ShellMode::ReadOnly, ws);
    let w = sandbox.describe(brood::tool::sandbox::ShellMode::Writer, ws);
    assert!(ro.contains("landlock ABI v"), "{ro}");
    assert!(ro.contains("network none"), "{ro}");
    assert!(w.contains(".git/hooks"), "{w}");
}

/// No MCP tools are read-only in these grants.
static NO_MCP: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
