//! Layered configuration through `Config::load`: file < workspace file < env <
//! flags, provenance, unknown keys and bad values named with their file, clamps.

use brood::runtime::config::{Config, ConfigPaths, Overrides, Source};
use std::collections::BTreeMap;
use std::path::Path;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

struct Fixture {
    _user: tempfile::TempDir,
    _ws: tempfile::TempDir,
    paths: ConfigPaths,
}

fn fixture(user: &str, ws: &str) -> Fixture {
    let u = tempfile::tempdir().unwrap();
    let w = tempfile::tempdir().unwrap();
    if !user.is_empty() {
        write(&u.path().join("config.toml"), user);
    }
    if !ws.is_empty() {
        write(&w.path().join(".brood/config.toml"), ws);
    }
    let paths = ConfigPaths {
        user_dir: Some(u.path().to_path_buf()),
        workspace: w.path().to_path_buf(),
    };
    Fixture {
        _user: u,
        _ws: w,
        paths,
    }
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_without_any_layer() {
    let f = fixture("", "");
    let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.provider, "deepseek");
    assert_eq!(c.api_timeout_secs, 120);
    assert_eq!(c.max_turns, 30);
    assert_eq!(c.max_attempts, 4);
    assert!(c.stream);
    let shown = c.effective();
    let provider = shown.iter().find(|(k, _, _)| k == "provider").unwrap();
    assert_eq!(provider.2, Source::Default);
}

#[test]
fn later_layers_win_key_by_key_and_provenance_says_where() {
    let f = fixture(
        "provider = \"openai\"\nmodel = \"user-model\"\nmax_turns = 5\n[subagents]\nmax_concurrent = 4\n",
        "model = \"ws-model\"\n[subagents]\nmax_depth = 2\n",
    );
    let flags = Overrides {
        max_turns: Some(9),
        ..Default::default()
    };
    let c = Config::load(&f.paths, &env(&[("BROOD_PROVIDER", "ollama")]), &flags).unwrap();
    assert_eq!(c.provider, "ollama");
    assert_eq!(c.model.as_deref(), Some("ws-model"));
    assert_eq!(c.max_turns, 9);
    // Nested sections merge key by key across files.
    assert_eq!(c.subagents.max_concurrent, Some(4));
    assert_eq!(c.subagents.max_depth, Some(2));
    let src = |key: &str| {
        c.effective()
            .into_iter()
            .find(|(k, _, _)| k == key)
            .unwrap()
            .2
    };
    assert_eq!(src("provider"), Source::Env("BROOD_PROVIDER".into()));
    assert_eq!(
        src("model"),
        Source::File(f.paths.workspace.join(".brood/config.toml"))
    );
    assert_eq!(src("max_turns"), Source::Flag("--max-turns".into()));
    assert_eq!(
        src("subagents.max_concurrent"),
        Source::File(f.paths.user_dir.clone().unwrap().join("config.toml"))
    );
}

#[test]
fn unknown_keys_are_errors_naming_key_and_file() {
    let f = fixture("", "modle = \"typo\"\n");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("modle"), "{err}");
    assert!(err.contains(".brood/config.toml"), "{err}");

    let f = fixture("[subagents]\nmax_concurent = 3\n", "");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_concurent") && err.contains("config.toml"),
        "{err}"
    );
}

/// What an embedder matches on: the file, the key, what is wrong and what is
/// accepted, as fields.
#[test]
fn an_invalid_file_is_a_typed_error_with_file_key_problem_and_accepted() {
    use brood::runtime::config::ConfigError;
    let load = |user: &str, ws: &str| {
        let f = fixture(user, ws);
        let err = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap_err();
        (f, err)
    };
    // An unknown key in a section: the dotted key and the keys accepted there.
    let (f, err) = load(
        "[subagents]
max_concurent = 3
",
        "",
    );
    let ConfigError::Invalid {
        path,
        key,
        problem,
        accepted,
    } = &err
    else {
        panic!("not Invalid: {err:?}")
    };
    assert_eq!(
        path,
        &f.paths
            .user_dir
            .as_ref()
            .unwrap()
            .join("config.toml")
            .display()
            .to_string()
    );
    assert_eq!(key.as_deref(), Some("subagents.max_concurent"));
    assert_eq!(problem, "unknown key");
    assert!(
        accepted.iter().any(|a| a == "max_concurrent"),
        "{accepted:?}"
    );
    assert!(err.to_string().contains("`max_concurrent`"), "{err}");

    // A value of the wrong type at the top level: its key and line.
    let (_f, err) = load("provider = \"deepseek\"\nmax_turns = \"many\"\n", "");
    let ConfigError::Invalid { key, problem, .. } = &err else {
        panic!("not Invalid: {err:?}")
    };
    assert_eq!(key.as_deref(), Some("max_turns"));
    assert!(problem.contains("line 2"), "{problem}");

    // An unknown preset: the presets accepted.
    let (_f, err) = load("[providers.nosuch]\nbase_url = \"http://x\"\n", "");
    let ConfigError::Invalid { key, accepted, .. } = &err else {
        panic!("not Invalid: {err:?}")
    };
    assert_eq!(key.as_deref(), Some("providers.nosuch"));
    assert!(accepted.iter().any(|a| a == "deepseek"), "{accepted:?}");

    // A section a workspace may not set: that section, in the workspace's file.
    let (f, err) = load("", "[sandbox]\nnetwork = true\n");
    let ConfigError::Invalid { path, key, .. } = &err else {
        panic!("not Invalid: {err:?}")
    };
    assert_eq!(key.as_deref(), Some("sandbox"));
    assert_eq!(
        path,
        &f.paths
            .workspace
            .join(".brood/config.toml")
            .display()
            .to_string()
    );
}

#[test]
fn bad_values_are_errors_naming_key_and_source() {
    let f = fixture("max_attempts = 0\n", "");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_attempts") && err.contains("config.toml"),
        "{err}"
    );

    let f = fixture("max_turns = \"many\"\n", "");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_turns"), "{err}");

    let f = fixture("", "");
    let err = Config::load(
        &f.paths,
        &env(&[("BROOD_MAX_TURNS", "lots")]),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("BROOD_MAX_TURNS") && err.contains("max_turns"),
        "{err}"
    );

    let f = fixture("[providers.nosuch]\nbase_url = \"http://x\"\n", "");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nosuch") && err.contains("deepseek"),
        "unknown preset lists the known ones: {err}"
    );
}

#[test]
fn a_provider_ca_cert_must_be_an_absolute_path() {
    let f = fixture("[providers.local]\nca_cert = \"certs/ca.pem\"\n", "");
    let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("providers.local.ca_cert") && err.contains("absolute"),
        "{err}"
    );
    let f = fixture("[providers.local]\nca_cert = \"/etc/brood/ca.pem\"\n", "");
    let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(
        c.providers["local"].ca_cert.as_deref(),
        Some(Path::new("/etc/brood/ca.pem"))
    );
}

#[test]
fn api_timeout_is_clamped_and_zero_means_default() {
    for (given, want) in [("0", 120), ("5000", 1800), ("7", 7)] {
        let f = fixture(&format!("api_timeout_secs = {given}\n"), "");
        let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(c.api_timeout_secs, want, "given {given}");
    }
}

#[test]
fn memory_and_tool_choice_from_env() {
    let f = fixture("", "");
    let c = Config::load(
        &f.paths,
        &env(&[
            ("BROOD_MEMORY", "on"),
            ("BROOD_FIRST_TOOL_CHOICE", "read_file"),
            ("BROOD_TOOL_CHOICE", "auto"),
        ]),
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.memory.enabled, Some(true));
    assert_eq!(
        c.tool_choice.first,
        Some(brood::model::ToolChoice::Named("read_file".into()))
    );
    assert_eq!(c.tool_choice.rest, Some(brood::model::ToolChoice::Auto));
    let bad = Config::load(
        &f.paths,
        &env(&[("BROOD_MEMORY", "maybe")]),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("BROOD_MEMORY"), "{bad}");
}

#[test]
fn key_variable_names_are_shown_never_keys() {
    let f = fixture("[providers.openai]\napi_key_env = \"MY_KEY\"\n", "");
    let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
    let shown: Vec<String> = c
        .effective()
        .into_iter()
        .map(|(k, v, _)| format!("{k}={v}"))
        .collect();
    assert!(
        shown
            .iter()
            .any(|s| s == "providers.openai.api_key_env=\"MY_KEY\""),
        "{shown:?}"
    );
}

#[test]
fn max_answer_bytes_defaults_to_8_mib_and_is_bounded() {
    let f = fixture("", "");
    let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.max_answer_bytes, 8 * 1024 * 1024);
    let f = fixture("max_answer_bytes = 100000\n", "");
    let c = Config::load(&f.paths, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.max_answer_bytes, 100_000);
    let c = Config::load(
        &f.paths,
        &env(&[("BROOD_MAX_ANSWER_BYTES", "200000")]),
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.max_answer_bytes, 200_000);
    for bad in ["0", "1000", "2000000000", "-5"] {
        let f = fixture(&format!("max_answer_bytes = {bad}\n"), "");
        let err = Config::load(&f.paths, &env(&[]), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_answer_bytes"), "{bad}: {err}");
    }
}

/// An empty `XDG_CONFIG_HOME` means unset (XDG Base Directory spec): the user's
/// config is found under `$HOME/.config`, not under a relative `brood/`.
#[test]
fn an_empty_xdg_config_home_means_unset() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // In a child process: the environment is process-global.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "config::xdg_probe", "--nocapture", "--ignored"])
        .env_clear()
        .env("XDG_CONFIG_HOME", "")
        .env("HOME", home.path())
        .env("BROOD_XDG_PROBE_WS", ws.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("user_dir={}/.config/brood", home.path().display())),
        "{stdout}"
    );
}

/// Run in a child process by `an_empty_xdg_config_home_means_unset`.
#[test]
#[ignore]
fn xdg_probe() {
    let ws = std::env::var("BROOD_XDG_PROBE_WS").unwrap_or_else(|_| ".".into());
    let paths = brood::runtime::config::ConfigPaths::from_env(std::path::Path::new(&ws));
    println!("user_dir={}", paths.user_dir.unwrap_or_default().display());
}
