//! File tools that write: `write_file` and `edit_file`.
//!
//! Paths go through the [`Workspace`](super::Workspace) jail, its protected paths
//! and the caller's write scopes; the file is opened and replaced beneath the root
//! (a temp file in the same directory, flushed, then renamed over). Writers of one
//! file in a session take turns (the workspace's per-path lock), so `edit_file`'s
//! read-modify-write never loses a parallel edit.

use super::fs::{io_error, not_regular};
use super::memory::read_capped;
use super::{blocking, clip, parse_args, schema_of, Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use rustix::fs::FileType;
use schemars::JsonSchema;
use serde::Deserialize;

/// Largest file `edit_file` changes (it holds the file in memory).
pub(crate) const EDIT_MAX_BYTES: u64 = 16 << 20;

/// The builtin file tools that write, fresh instances.
pub fn tools() -> Vec<std::sync::Arc<dyn Tool>> {
    vec![
        std::sync::Arc::new(WriteFile),
        std::sync::Arc::new(EditFile),
    ]
}

// ---------------------------------------------------------------- write_file

/// `write_file`: create or replace a file.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WriteFile;

/// Arguments of `write_file`.
// Fields undocumented on purpose: schemars would send doc comments to the model
// in the tool's schema (every request pays for them); the tool's description says it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteFileArgs {
    pub path: String,
    pub content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Create or overwrite a whole file (parents are created); to change part of one use edit_file."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<WriteFileArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Write
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: WriteFileArgs = parse_args(self.name(), args)?;
        let ws = ctx.workspace.clone();
        let perms = ctx.permissions.clone();
        blocking(move || {
            let abs = ws.resolve_for_write(&a.path, "write_file", &perms)?;
            let shown = ws.display(&abs);
            let lock = ws.write_lock(&abs);
            let _turn = lock.hold();
            let existed = abs.exists();
            ws.write_file(&abs, &shown, a.content.as_bytes())?;
            Ok(format!(
                "{} {shown} ({} bytes, {} lines)",
                if existed { "overwrote" } else { "created" },
                a.content.len(),
                a.content.lines().count()
            ))
        })
        .await
    }
}

// ---------------------------------------------------------------- edit_file

/// `edit_file`: replace one exact occurrence of a string.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EditFile;

/// Arguments of `edit_file`.
// Fields undocumented on purpose: schemars would send doc comments to the model
// in the tool's schema (every request pays for them); the tool's description says it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EditFileArgs {
    pub path: String,
    /// Exact text, whitespace included; add nearby lines to make it unique.
    pub old_string: String,
    pub new_string: String,
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }
    fn description(&self) -> &str {
        "Replace the one exact occurrence of old_string (copied without read_file's line-number prefix) with new_string; otherwise nothing changes and the error says how many matched."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<EditFileArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Write
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: EditFileArgs = parse_args(self.name(), args)?;
        if a.old_string.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "old_string is empty; to create a file use write_file".into(),
            });
        }
        if a.old_string == a.new_string {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "old_string and new_string are identical; nothing would change".into(),
            });
        }
        let ws = ctx.workspace.clone();
        let perms = ctx.permissions.clone();
        blocking(move || {
            let abs = ws.resolve_for_write(&a.path, "edit_file", &perms)?;
            let shown = ws.display(&abs);
            // Read, change and replace the file in one turn of its lock.
            let lock = ws.write_lock(&abs);
            let _turn = lock.hold();
            let opened = ws.open_read(&abs, &shown)?;
            if opened.kind != FileType::RegularFile {
                return Err(not_regular(&shown));
            }
            let bytes = read_capped(&opened.file, EDIT_MAX_BYTES)
                .map_err(|e| io_error(&shown, e))?
                .ok_or_else(|| ToolError::Io {
                    path: clip(&shown),
                    detail: format!(
                        "is larger than {} MiB; edit_file edits files up to that size - use \
                         bash (e.g. sed) for larger ones",
                        EDIT_MAX_BYTES >> 20
                    ),
                })?;
            let text = String::from_utf8(bytes).map_err(|_| ToolError::Io {
                path: shown.clone(),
                detail: "is not UTF-8 text; edit_file only edits text files".into(),
            })?;
            let count = text.matches(a.old_string.as_str()).count();
            match count {
                0 => return Err(ToolError::EditNoMatch { path: shown }),
                1 => {}
                n => {
                    return Err(ToolError::EditAmbiguous {
                        path: shown,
                        count: n,
                    })
                }
            }
            let at = text.find(a.old_string.as_str()).unwrap_or(0);
            let line = text[..at].matches('\n').count() + 1;
            let new_text = text.replacen(a.old_string.as_str(), &a.new_string, 1);
            ws.write_file(&abs, &shown, new_text.as_bytes())?;
            Ok(format!(
                "edited {shown}: replaced 1 occurrence at line {line} ({} lines -> {} lines)",
                a.old_string.lines().count().max(1),
                a.new_string.lines().count()
            ))
        })
        .await
    }
}
