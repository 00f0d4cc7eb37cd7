//! The workspace tools through their public surface: the jail against every escape,
//! file and search tools, the shell's process-group kill and read-only sandbox,
//! permission checks in the toolbox, todo and memory. Shared fixtures live here.

mod bounded;
#[path = "../common/mod.rs"]
mod common;
mod e2e;
mod files;
mod grants;
mod jail;
mod memory;
mod protect;
mod races;
mod redteam;
mod schemas;
mod search;
mod shell;

use brood::model::ToolCall;
use brood::tool::memory::MemoryFiles;
use brood::tool::sandbox::Sandbox;
use brood::tool::shell::Bash;
use brood::tool::{
    builtin_tools, BuiltinOptions, Capability, Permissions, ShellPolicy, Tool, ToolContext,
    ToolError, Toolbox, Workspace,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A temp dir holding a workspace `ws/` and a sibling `outside/` with a secret.
struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

const SECRET: &str = "the secret\n";

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
        let ws = std::fs::canonicalize(ws).unwrap();
        let outside = std::fs::canonicalize(outside).unwrap();
        Env {
            _dir: dir,
            ws,
            outside,
        }
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn ctx(&self, perms: Permissions) -> ToolContext {
        ToolContext {
            workspace: Arc::new(Workspace::open(&self.ws).unwrap()),
            permissions: Arc::new(perms),
            cancel: CancellationToken::new(),
            run_id: "run-test".into(),
        }
    }

    fn memory(&self) -> MemoryFiles {
        MemoryFiles::for_workspace(&self.ws, Some(self.outside.join("user-memory.md")))
    }

    fn toolbox(&self, perms: Permissions) -> Toolbox {
        let opts = BuiltinOptions {
            memory: Some(self.memory()),
            sandbox: None,
        };
        Toolbox::new(builtin_tools(&opts), perms)
    }

    fn secret_untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(self.outside.join("secret.txt")).unwrap(),
            SECRET
        );
        let names: BTreeSet<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["secret.txt".to_string()]),
            "nothing may be created outside the workspace"
        );
    }
}

fn tool_call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        name: name.to_string(),
        arguments: args.to_string(),
    }
}

async fn call(env: &Env, name: &str, args: serde_json::Value) -> Result<String, ToolError> {
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    tb.call(&tool_call(name, args), &env.ctx(perms)).await
}

#[track_caller]
fn assert_outside(r: Result<String, ToolError>, path: &str, reason_has: &str) {
    match r {
        Err(ToolError::OutsideWorkspace { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(
                reason.contains(reason_has),
                "reason {reason:?} should mention {reason_has:?}"
            );
            let msg = ToolError::OutsideWorkspace {
                path: p,
                reason: reason.clone(),
            }
            .to_string();
            assert!(msg.contains(path), "message names the path: {msg}");
        }
        other => panic!("expected OutsideWorkspace for {path}, got {other:?}"),
    }
}
