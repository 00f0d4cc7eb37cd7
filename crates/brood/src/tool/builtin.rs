//! The builtin tool set of one run: file, search, shell, todo and (optionally)
//! memory tools, fresh instances every time so no state leaks between runs.

use super::memory::{memory_tools, MemoryFiles};
use super::sandbox::Sandbox;
use super::shell::Bash;
use super::todo::todo_tools;
use super::{edit, fs, search, Tool};
use std::sync::Arc;

/// Names of the builtin tools, for role postures and allowed-tool lists.
pub mod names {
    #![allow(missing_docs)] // each constant is its own value
    pub const READ_FILE: &str = "read_file";
    pub const LIST_DIR: &str = "list_dir";
    pub const FIND_FILES: &str = "find_files";
    pub const GREP: &str = "grep";
    pub const WRITE_FILE: &str = "write_file";
    pub const EDIT_FILE: &str = "edit_file";
    pub const BASH: &str = "bash";
    pub const TODO_WRITE: &str = "todo_write";
    pub const TODO_READ: &str = "todo_read";
    pub const MEMORY_READ: &str = "memory_read";
    pub const MEMORY_SEARCH: &str = "memory_search";
    pub const REMEMBER: &str = "remember";
}

/// What [`builtin_tools`] builds.
#[derive(Debug, Clone, Default)]
pub struct BuiltinOptions {
    /// Memory files; the memory tools are included only when set.
    pub memory: Option<MemoryFiles>,
    /// The landlock sandbox for read-only shells. Share one per session so its
    /// availability probe runs once; `None` makes a new one for this set.
    pub sandbox: Option<Arc<Sandbox>>,
}

/// A fresh set of builtin tools for one run: read_file, list_dir, write_file,
/// edit_file, find_files, grep, bash, todo_write, todo_read, and memory_read,
/// memory_search, remember when `opts.memory` is set. The todo pair shares one list
/// that belongs to this set only.
pub fn builtin_tools(opts: &BuiltinOptions) -> Vec<Arc<dyn Tool>> {
    let mut tools = fs::tools();
    tools.extend(edit::tools());
    tools.extend(search::tools());
    let sandbox = opts.sandbox.clone().unwrap_or_default();
    tools.push(Arc::new(Bash::new(sandbox)));
    let (write, read, _list) = todo_tools();
    tools.push(Arc::new(write));
    tools.push(Arc::new(read));
    if let Some(files) = &opts.memory {
        tools.extend(memory_tools(files.clone()));
    }
    tools
}
