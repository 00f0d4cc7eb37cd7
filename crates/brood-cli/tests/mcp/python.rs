//! The Python interpreters that have the official `mcp` package, shared by both MCP
//! modules: `BROOD_MCP_PYTHON` (colon-separated) or `python3`; with
//! `BROOD_MCP_REQUIRE=1` one that lacks it fails the test instead of skipping.

use std::process::Command;

/// The interpreters with the Python `mcp` package; an empty list means skip.
pub fn interpreters() -> Vec<String> {
    let require = std::env::var("BROOD_MCP_REQUIRE").is_ok_and(|v| v == "1");
    let wanted: Vec<String> = match std::env::var("BROOD_MCP_PYTHON") {
        Ok(list) if !list.is_empty() => list.split(':').map(str::to_string).collect(),
        _ => vec!["python3".into()],
    };
    let mut usable = Vec::new();
    for py in wanted {
        let ok = Command::new(&py)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            usable.push(py);
        } else if require {
            panic!(
                "{py} cannot import the Python `mcp` package and BROOD_MCP_REQUIRE=1; \
                 install it (`python3 -m venv v && v/bin/pip install mcp`) and set BROOD_MCP_PYTHON"
            );
        } else {
            eprintln!("skipping with {py}: no Python `mcp` package (set BROOD_MCP_REQUIRE=1 to fail instead)");
        }
    }
    usable
}
