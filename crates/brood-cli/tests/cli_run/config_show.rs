//! `brood config show`: every value with its source, token counts and key variable
//! names (never a secret), and the sandbox each role gets.

use super::*;

#[test]
fn config_show_prints_values_with_their_sources() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "model = \"ws-model\"\n",
    )
    .unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["config", "show", "--provider", "openai"],
        &[("BROOD_MAX_TURNS", "7")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("provider = \"openai\"    # flag --provider"),
        "{stdout}"
    );
    assert!(
        stdout.contains("model = \"ws-model\"") && stdout.contains(".brood/config.toml"),
        "{stdout}"
    );
    assert!(
        stdout.contains("max_turns = 7    # env BROOD_MAX_TURNS"),
        "{stdout}"
    );
    assert!(
        stdout.contains("api_timeout_secs = 120    # default"),
        "{stdout}"
    );
}

#[test]
fn config_show_prints_token_counts_and_key_variable_names() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "max_tokens = 128\napi_key_env = \"MY_KEY_VAR\"\n[subagents]\ntoken_budget = 5000\n",
    )
    .unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["config", "show"],
        &[("MY_KEY_VAR", "sk-never-printed")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("max_tokens = 128"), "{stdout}");
    assert!(stdout.contains("subagents.token_budget = 5000"), "{stdout}");
    assert!(stdout.contains("api_key_env = \"MY_KEY_VAR\""), "{stdout}");
    assert!(!stdout.contains("<redacted>"), "{stdout}");
    assert!(!stdout.contains("sk-never-printed") && !stderr.contains("sk-never-printed"));
}

#[test]
fn config_show_prints_the_sandbox_each_role_gets() {
    let f = fixture();
    let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let line = |role: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("# {role}")))
            .unwrap_or_else(|| panic!("no line for {role}: {stdout}"))
            .to_string()
    };
    let ro = line("explore, plan");
    assert!(
        ro.contains("landlock ABI v") && ro.contains("network none"),
        "{ro}"
    );
    assert!(ro.contains("writes private tmp"), "{ro}");
    let w = line("parent, general");
    assert!(w.contains(".git/hooks") && w.contains("+net"), "{w}");
    assert!(line("review").ends_with("no shell"));
    // A definition's network: false is shown where the user grants network; its
    // network: true where the user does not.
    let agents = f.ws.path().join(".brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    for (name, network) in [("offline", false), ("online", true)] {
        std::fs::write(
            agents.join(format!("{name}.md")),
            format!("---\ndescription: d\nrole: implementer\nnetwork: {network}\n---\nGo.\n"),
        )
        .unwrap();
    }
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    for (user_network, shown, hidden) in [(true, "offline", "online"), (false, "online", "offline")]
    {
        std::fs::write(
            user_dir.join("config.toml"),
            format!("[sandbox]\nnetwork = {user_network}\n"),
        )
        .unwrap();
        let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let agent = |name: &str| {
            stdout
                .lines()
                .find(|l| l.starts_with(&format!("# agent {name} ")))
                .map(str::to_string)
        };
        let line = agent(shown).unwrap_or_else(|| panic!("no line for {shown}: {stdout}"));
        assert!(line.contains("network none"), "{line}");
        assert_eq!(agent(hidden), None, "{stdout}");
    }
    // A workspace may not widen what shells reach.
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[sandbox]\nnetwork = true\n",
    )
    .unwrap();
    let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key `sandbox`: may only be set in the user's config"),
        "{stderr}"
    );
}
