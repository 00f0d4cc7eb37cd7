//! Front matter of agent files: the `---`-fenced block at the top, read as strict
//! YAML first and, when that fails, line by line the way Claude Code reads it in
//! practice.
//!
//! Agent files from public collections are often not strict YAML: a description with
//! an unquoted colon (`description: Use when ... Triggers on: 'p-value'`), one that
//! starts with `**` (a YAML alias), `<example>` tags. Claude Code accepts them, so
//! brood does too: in the line form a value runs to the end of its line, indented
//! lines continue it (or are `- item` entries of a list), `|`/`>` start a block, and a
//! value quoted as a whole has its quotes removed. Anything else — text before the
//! first key, a line that is not `key: value`, a key given twice — is a
//! [`LenientError`] naming the line, so a truly broken file still gets one clear
//! message.

use serde_yaml::{Mapping, Value};

/// The front matter could not be read, not even line by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LenientError {
    /// 1-based line in the file (the opening `---` is line 1).
    pub line: usize,
    pub(crate) problem: String,
    /// The text is valid YAML, but a list or a lone value instead of keys.
    pub not_a_mapping: bool,
}

/// How the front matter was read.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Strict YAML.
    Yaml(Mapping),
    /// Not strict YAML; read line by line. `yaml_error` says why YAML refused it.
    Lines {
        /// The keys read line by line.
        map: Mapping,
        /// Why strict YAML refused the text.
        yaml_error: String,
    },
}

/// Keys whose line-form value is read as a YAML scalar (a number or a boolean)
/// when it is one; every other value stays text.
const SCALAR_KEYS: [&str; 5] = [
    "max_turns",
    "maxTurns",
    "token_budget",
    "cost_budget_usd",
    "fork_context",
];

/// Read `front` (the text between the fences): strict YAML, else the line form.
pub fn parse(front: &str) -> Result<Parsed, LenientError> {
    let (yaml_error, not_a_mapping) = match serde_yaml::from_str::<Value>(front) {
        Ok(Value::Mapping(m)) => return Ok(Parsed::Yaml(m)),
        Ok(Value::Null) => return Ok(Parsed::Yaml(Mapping::new())),
        Ok(_) => (
            "the front matter is not a mapping of keys to values".to_string(),
            true,
        ),
        Err(e) => (e.to_string(), false),
    };
    let map = lines(front).map_err(|e| LenientError { not_a_mapping, ..e })?;
    Ok(Parsed::Lines { map, yaml_error })
}

/// One key being collected.
struct Entry {
    key: String,
    inline: String,
    /// `Some('|')`/`Some('>')` for a block scalar.
    block: Option<char>,
    continued: Vec<String>,
    items: Vec<String>,
}

fn lines(front: &str) -> Result<Mapping, LenientError> {
    let mut map = Mapping::new();
    let mut current: Option<Entry> = None;
    for (i, raw) in front.lines().enumerate() {
        let line_no = i + 2; // the opening fence is line 1
        let line = raw.trim_end();
        if line.trim().is_empty() {
            if let Some(e) = current.as_mut() {
                if e.block.is_some() {
                    e.continued.push(String::new());
                }
            }
            continue;
        }
        let indented = line.starts_with([' ', '\t']);
        if !indented && line.starts_with('#') {
            continue;
        }
        if indented || line.starts_with("- ") {
            let Some(e) = current.as_mut() else {
                return Err(LenientError {
                    line: line_no,
                    problem: "indented text before any key; start with `key: value`".into(),
                    not_a_mapping: false,
                });
            };
            let text = line.trim();
            match text.strip_prefix("- ") {
                Some(item) if e.inline.is_empty() && e.block.is_none() => {
                    e.items.push(unquote(item.trim()).to_string())
                }
                _ => e.continued.push(text.to_string()),
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(LenientError {
                line: line_no,
                problem: format!(
                    "`{}` is not `key: value`; put each key on its own line",
                    clip(line)
                ),
                not_a_mapping: false,
            });
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(LenientError {
                line: line_no,
                problem: format!(
                    "`{}` is not a key (letters, digits, `_` and `-` only)",
                    clip(key)
                ),
                not_a_mapping: false,
            });
        }
        if let Some(done) = current.take() {
            insert(&mut map, done, line_no)?;
        }
        if map.contains_key(Value::String(key.to_string())) {
            return Err(LenientError {
                line: line_no,
                problem: format!("key `{key}` is given twice; keep one"),
                not_a_mapping: false,
            });
        }
        let value = value.trim();
        let block = match value {
            "|" | "|-" | "|+" => Some('|'),
            ">" | ">-" | ">+" => Some('>'),
            _ => None,
        };
        current = Some(Entry {
            key: key.to_string(),
            inline: if block.is_some() {
                String::new()
            } else {
                value.to_string()
            },
            block,
            continued: Vec::new(),
            items: Vec::new(),
        });
    }
    if let Some(done) = current.take() {
        insert(&mut map, done, front.lines().count() + 2)?;
    }
    Ok(map)
}

/// Store one collected key (`lines` has already refused a repeated key).
fn insert(map: &mut Mapping, e: Entry, next_line: usize) -> Result<(), LenientError> {
    let value = if !e.items.is_empty() {
        if !e.continued.is_empty() {
            return Err(LenientError {
                line: next_line,
                problem: format!(
                    "`{}` mixes `- item` lines with other text; use one form",
                    e.key
                ),
                not_a_mapping: false,
            });
        }
        Value::Sequence(e.items.into_iter().map(Value::String).collect())
    } else {
        let text = match e.block {
            Some('|') => e.continued.join("\n"),
            Some(_) => e.continued.join(" "),
            None => std::iter::once(e.inline.as_str())
                .chain(e.continued.iter().map(String::as_str))
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
        };
        let text = text.trim();
        if text.is_empty() {
            Value::Null
        } else if SCALAR_KEYS.contains(&e.key.as_str()) {
            match serde_yaml::from_str::<Value>(text) {
                Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
                _ => Value::String(unquote(text).to_string()),
            }
        } else {
            Value::String(unquote(text).to_string())
        }
    };
    map.insert(Value::String(e.key), value);
    Ok(())
}

/// A value quoted as a whole loses its quotes; quotes inside stay.
fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            if !inner.contains(q) {
                return inner;
            }
        }
    }
    s
}

fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(map: &Mapping, key: &str) -> Option<String> {
        map.get(Value::String(key.into()))
            .and_then(|v| v.as_str().map(str::to_string))
    }

    #[test]
    fn strict_yaml_is_read_as_yaml() {
        let p = parse("name: a\ndescription: b\ntools: [Read, Grep]\n").unwrap();
        assert!(matches!(p, Parsed::Yaml(_)));
    }

    #[test]
    fn colons_and_stars_in_values_are_text() {
        let front = "name: stats\ndescription: Use when ... Triggers on: 'p-value', 'anova'\nmax_turns: 12\n";
        let Parsed::Lines { map, yaml_error } = parse(front).unwrap() else {
            panic!("strict YAML accepted an unquoted colon")
        };
        assert!(!yaml_error.is_empty());
        assert_eq!(
            text(&map, "description").as_deref(),
            Some("Use when ... Triggers on: 'p-value', 'anova'")
        );
        assert_eq!(
            map.get(Value::String("max_turns".into())),
            Some(&Value::Number(12.into()))
        );
        let Parsed::Lines { map, .. } =
            parse("description: **Expert** reviewer <example>x: y</example>\n").unwrap()
        else {
            panic!("a `**` start is not YAML")
        };
        assert_eq!(
            text(&map, "description").as_deref(),
            Some("**Expert** reviewer <example>x: y</example>")
        );
    }

    #[test]
    fn lists_continuations_and_blocks() {
        let front = "description: **a** b:\n  continued here\ntools:\n  - Read\n  - 'Grep'\nnotes: |\n  one\n  two: x\n";
        let Parsed::Lines { map, .. } = parse(front).unwrap() else {
            panic!()
        };
        assert_eq!(
            text(&map, "description").as_deref(),
            Some("**a** b: continued here")
        );
        assert_eq!(
            map.get(Value::String("tools".into())),
            Some(&Value::Sequence(vec![
                Value::String("Read".into()),
                Value::String("Grep".into())
            ]))
        );
        assert_eq!(text(&map, "notes").as_deref(), Some("one\ntwo: x"));
    }

    #[test]
    fn broken_front_matter_names_the_line() {
        let e = parse("description: **a**\nthis line has no key\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.problem.contains("not `key: value`"), "{}", e.problem);
        let e = parse("  continued **x\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("description: **a**\ndescription: b\n").unwrap_err();
        assert!(e.problem.contains("twice"), "{}", e.problem);
    }
}
