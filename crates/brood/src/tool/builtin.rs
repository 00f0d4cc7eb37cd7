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
    /// `read_file`: Reads a file, or a range of its lines.
    pub const READ_FILE: &str = "read_file";
    /// `list_dir`: Lists a directory.
    pub const LIST_DIR: &str = "list_dir";
    /// `find_files`: Finds files by glob.
    pub const FIND_FILES: &str = "find_files";
    /// `grep`: Searches file contents by regex.
    pub const GREP: &str = "grep";
    /// `write_file`: Writes a whole file.
    pub const WRITE_FILE: &str = "write_file";
    /// `edit_file`: Replaces one exact string in a file.
    pub const EDIT_FILE: &str = "edit_file";
    /// `bash`: Runs a shell command.
    pub const BASH: &str = "bash";
    /// `todo_write`: Replaces the run's todo list.
    pub const TODO_WRITE: &str = "todo_write";
    /// `todo_read`: Reads the run's todo list.
    pub const TODO_READ: &str = "todo_read";
    /// `memory_read`: Shows the memory files with line numbers.
    pub const MEMORY_READ: &str = "memory_read";
    /// `memory_search`: Finds lines in the memory files.
    pub const MEMORY_SEARCH: &str = "memory_search";
    /// `remember`: Appends one dated note to the workspace memory file.
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
