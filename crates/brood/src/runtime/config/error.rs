//! A configuration problem ([`ConfigError`]): each names the key and where it was set.

use std::path::PathBuf;
use thiserror::Error;

/// A configuration problem. Each names the key and where it was set.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {detail}")]
    /// A config file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    #[error(
        "config file {path}{}: {problem}{}",
        key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default(),
        accepted_list(accepted)
    )]
    /// A config file is not valid TOML, or has a key or value brood cannot use.
    Invalid {
        /// The file (or `effective configuration` for the layers merged).
        path: String,
        /// The key at fault, dotted (`subagents.max_depth`), or its section
        /// (`sandbox`); `None` when the file as a whole is at fault.
        key: Option<String>,
        /// What is wrong, in words.
        problem: String,
        /// What is accepted there instead (key names, values), when it is a list;
        /// empty otherwise.
        accepted: Vec<String>,
    },
    #[error("{source_name}: bad value {value:?} for {key}: {detail}")]
    /// A value is out of range or of the wrong kind.
    BadValue {
        /// Where it was set (a file, a variable or a flag).
        source_name: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong and what is accepted.
        detail: String,
    },
}

/// `; accepted: `a`, `b`` (nothing for an empty list).
fn accepted_list(accepted: &[String]) -> String {
    if accepted.is_empty() {
        return String::new();
    }
    let names: Vec<String> = accepted.iter().map(|a| format!("`{a}`")).collect();
    format!("; accepted: {}", names.join(", "))
}

impl ConfigError {
    /// [`ConfigError::Invalid`] for `problem` at `key` (`None`: the whole file) of
    /// `path`. A `[key] ` the problem starts with is dropped (the key is said once).
    pub(crate) fn invalid(
        path: impl std::fmt::Display,
        key: Option<&str>,
        problem: impl Into<String>,
    ) -> Self {
        let problem = problem.into();
        let problem = match key.and_then(|k| problem.strip_prefix(&format!("[{k}] "))) {
            Some(rest) => rest.to_string(),
            None => problem,
        };
        let (key, problem, accepted) = match named_field(key, &problem) {
            Some((key, problem, accepted)) => (Some(key), problem, accepted),
            None => (key.map(str::to_string), problem, Vec::new()),
        };
        ConfigError::Invalid {
            path: path.to_string(),
            key,
            problem,
            accepted,
        }
    }

    /// [`ConfigError::Invalid`] for what the TOML reader refused in `section`
    /// (`None`: the top level) of `path`. An unknown key is named with the keys
    /// accepted there; with the file's `text`, a problem the reader located is
    /// given its line and the key on it.
    pub(crate) fn from_toml(
        path: impl std::fmt::Display,
        section: Option<&str>,
        text: Option<&str>,
        e: &toml::de::Error,
    ) -> Self {
        let msg = e.message().trim();
        let (key, problem, accepted) = if let Some(named) = named_field(section, msg) {
            let (key, problem, accepted) = named;
            (Some(key), problem, accepted)
        } else if let Some(rest) = msg.strip_prefix("unknown variant `") {
            let (value, tail) = rest.split_once('`').unwrap_or((rest, ""));
            let key = located_key(text, e).or_else(|| section.map(str::to_string));
            (key, format!("unknown value `{value}`"), ticked(tail))
        } else if let Some(key) = located_key(text, e) {
            (Some(key), msg.to_string(), Vec::new())
        } else if text.is_some() && e.span().is_some() {
            // Not a key's value (a syntax error): the reader's own report, which
            // shows the line and points at the place.
            return ConfigError::invalid(path, None, e.to_string().trim_end());
        } else {
            (section.map(str::to_string), msg.to_string(), Vec::new())
        };
        let problem = match located_line(text, e) {
            Some(line) => format!("{problem} (line {line})"),
            None => problem,
        };
        ConfigError::Invalid {
            path: path.to_string(),
            key,
            problem,
            accepted,
        }
    }
}

/// A reader's message about one named key of `section` (an unknown key, with the
/// keys accepted there; a missing one): the dotted key, the problem, what is
/// accepted. A table of named entries says which entry last (`… in `name``).
fn named_field(section: Option<&str>, msg: &str) -> Option<(String, String, Vec<String>)> {
    let msg = msg.trim();
    let (msg, entry) = match msg.rsplit_once("\nin `") {
        Some((head, tail)) => (head, tail.strip_suffix('`')),
        None => (msg, None),
    };
    let within = |name: &str| {
        [section, entry, Some(name)]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(".")
    };
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let list = tail.split(';').next().unwrap_or_default();
        return Some((within(name), "unknown key".to_string(), ticked(list)));
    }
    let rest = msg.strip_prefix("missing field `")?;
    let name = rest.split('`').next().unwrap_or(rest);
    Some((
        within(name),
        "required key is missing".to_string(),
        Vec::new(),
    ))
}

/// The names between backticks in `text` (`expected one of `a`, `b``).
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The 1-based line of `text` where the reader located `e`.
fn located_line(text: Option<&str>, e: &toml::de::Error) -> Option<usize> {
    let start = e.span()?.start;
    let before = text?.get(..start)?;
    Some(before.matches('\n').count() + 1)
}

/// The dotted key written on the line where the reader located `e`, under the
/// last `[table]` header above it.
fn located_key(text: Option<&str>, e: &toml::de::Error) -> Option<String> {
    let text = text?;
    let start = e.span()?.start;
    let before = text.get(..start)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next()?;
    let (name, _) = line.split_once('=')?;
    let name = name.trim().trim_matches('"');
    if name.is_empty() {
        return None;
    }
    let header = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match header {
        Some(h) => format!("{h}.{name}"),
        None => name.to_string(),
    })
}
