//! The run's todo list: `todo_write` replaces it, `todo_read` shows it.
//!
//! The list lives in memory, shared by the two tools of one run (see [`todo_tools`]);
//! every run gets its own. Both tools have [`Capability::Read`] on purpose: the list
//! is the run's private scratch pad and changes nothing in the workspace, so
//! read-only roles (explore, plan, review) keep it to track their steps.

use super::{parse_args, schema_of, Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, MutexGuard};

/// Most items a list may hold.
pub(crate) const MAX_ITEMS: usize = 100;
/// Longest item text, in characters.
pub(crate) const MAX_ITEM_CHARS: usize = 500;

/// Where an item stands.
// Fields undocumented on purpose: schemars would send doc comments to the model
// in the tool's schema (every request pays for them); the tool's description says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(description = "")]
#[serde(rename_all = "snake_case")]
pub(crate) enum TodoStatus {
    Pending,
    InProgress,
    Done,
}

/// One item of the list.
// Fields undocumented on purpose: schemars would send doc comments to the model
// in the tool's schema (every request pays for them); the tool's description says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(description = "")]
#[serde(deny_unknown_fields)]
pub(crate) struct TodoItem {
    /// One short imperative sentence.
    pub content: String,
    pub status: TodoStatus,
}

/// Arguments of `todo_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TodoWriteArgs {
    /// The complete list, in order.
    pub items: Vec<TodoItem>,
}

/// Arguments of `todo_read` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TodoReadArgs {}

/// The list two tools share.
#[derive(Debug, Clone, Default)]
pub struct TodoList {
    items: Arc<Mutex<Vec<TodoItem>>>,
}

impl TodoList {
    /// An empty list.
    pub fn new() -> Self {
        TodoList::default()
    }

    /// A copy of the items.
    pub(crate) fn items(&self) -> Vec<TodoItem> {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<TodoItem>> {
        // A panic elsewhere cannot leave a Vec half-replaced (we swap whole lists),
        // so a poisoned lock still holds a valid list.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn replace(&self, items: Vec<TodoItem>) {
        *self.lock() = items;
    }
}

/// `todo_write`.
#[derive(Debug, Clone)]
pub struct TodoWrite {
    list: TodoList,
}

/// `todo_read`.
#[derive(Debug, Clone)]
pub struct TodoRead {
    list: TodoList,
}

/// A `todo_write` and a `todo_read` sharing one fresh list, and the list itself.
pub fn todo_tools() -> (TodoWrite, TodoRead, TodoList) {
    let list = TodoList::new();
    (
        TodoWrite { list: list.clone() },
        TodoRead { list: list.clone() },
        list,
    )
}

/// The list as the model sees it.
fn render(items: &[TodoItem]) -> String {
    if items.is_empty() {
        return "(the todo list is empty)".to_string();
    }
    let done = items
        .iter()
        .filter(|i| i.status == TodoStatus::Done)
        .count();
    let mut out = format!("todo: {done}/{} done\n", items.len());
    for (n, item) in items.iter().enumerate() {
        let mark = match item.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[~]",
            TodoStatus::Done => "[x]",
        };
        out.push_str(&format!("{}. {mark} {}\n", n + 1, item.content));
    }
    out
}

#[async_trait]
impl Tool for TodoWrite {
    fn name(&self) -> &str {
        "todo_write"
    }
    fn description(&self) -> &str {
        "Replace your whole todo list; mark each step in_progress, then done."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<TodoWriteArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let a: TodoWriteArgs = parse_args(self.name(), args)?;
        let invalid = |detail: String| ToolError::InvalidArguments {
            tool: "todo_write".into(),
            detail,
        };
        if a.items.len() > MAX_ITEMS {
            return Err(invalid(format!(
                "{} items; a list holds at most {MAX_ITEMS}",
                a.items.len()
            )));
        }
        let mut items = a.items;
        for (n, item) in items.iter_mut().enumerate() {
            item.content = item.content.trim().to_string();
            if item.content.is_empty() {
                return Err(invalid(format!("item {} has empty content", n + 1)));
            }
            if item.content.chars().count() > MAX_ITEM_CHARS {
                return Err(invalid(format!(
                    "item {} is longer than {MAX_ITEM_CHARS} characters; keep items short",
                    n + 1
                )));
            }
        }
        let text = render(&items);
        self.list.replace(items);
        Ok(text)
    }
}

#[async_trait]
impl Tool for TodoRead {
    fn name(&self) -> &str {
        "todo_read"
    }
    fn description(&self) -> &str {
        "Show your todo list and each step's status."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<TodoReadArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let _: TodoReadArgs = parse_args(self.name(), args)?;
        Ok(render(&self.list.items()))
    }
}
