//! What a replay compares: a request with its run-specific values — generated ids
//! (UUIDs, 32-hex run ids) and RFC 3339 timestamps — replaced by placeholders, and
//! the ids it held, in order, so a recorded id can be mapped to the one this run
//! issued in its place.

use super::super::ModelRequest;
use serde_json::Value;

/// Placeholder for a generated id.
pub(super) const ID: &str = "<id>";
/// Placeholder for a timestamp.
pub(super) const TIME: &str = "<time>";

/// A request as compared, and the ids it held (in the order they appear).
#[derive(Debug, Clone)]
pub(super) struct Normalized {
    pub value: Value,
    pub ids: Vec<String>,
}

impl Normalized {
    pub fn of(request: &ModelRequest) -> Normalized {
        let mut ids = Vec::new();
        let mut value = serde_json::to_value(request).unwrap_or(Value::Null);
        walk(&mut value, &mut ids);
        Normalized { value, ids }
    }

    /// The normalized request in its typed form (for describing differences).
    pub fn request(&self) -> Option<ModelRequest> {
        serde_json::from_value(self.value.clone()).ok()
    }
}

fn walk(v: &mut Value, ids: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            if let Some(n) = normalize_text(s, ids) {
                *s = n;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk(x, ids)),
        Value::Object(o) => o.values_mut().for_each(|x| walk(x, ids)),
        _ => {}
    }
}

/// `text` with ids and timestamps replaced, or `None` when it holds neither.
/// Tool-call arguments are JSON inside a string: the same scan covers them.
pub(super) fn normalize_text(text: &str, ids: &mut Vec<String>) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::new();
    let mut last = 0;
    let mut i = 0;
    while i < b.len() {
        // Only at the start of a token: not right after a letter or digit.
        let boundary = i
            .checked_sub(1)
            .and_then(|p| b.get(p))
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        // `last` and `i` sit on ASCII bytes (an id or timestamp starts and ends
        // there), so every `get` below is on char boundaries.
        if boundary {
            if let Some(len) = id_at(b, i) {
                out.push_str(text.get(last..i).unwrap_or_default());
                out.push_str(ID);
                ids.push(
                    text.get(i..i + len)
                        .unwrap_or_default()
                        .to_ascii_lowercase(),
                );
                i += len;
                last = i;
                continue;
            }
            if let Some(len) = timestamp_at(b, i) {
                out.push_str(text.get(last..i).unwrap_or_default());
                out.push_str(TIME);
                i += len;
                last = i;
                continue;
            }
        }
        i += 1;
    }
    if last == 0 {
        return None;
    }
    out.push_str(text.get(last..).unwrap_or_default());
    Some(out)
}

/// The `n` bytes of `b` from `from`, when it has them.
fn span(b: &[u8], from: usize, n: usize) -> Option<&[u8]> {
    b.get(from..from.checked_add(n)?)
}

fn hex(b: &[u8], from: usize, n: usize) -> bool {
    span(b, from, n).is_some_and(|s| s.iter().all(u8::is_ascii_hexdigit))
}

fn ends_token(b: &[u8], at: usize) -> bool {
    b.get(at).is_none_or(|c| !c.is_ascii_alphanumeric())
}

/// A hyphenated UUID (36) or 32 hex digits (a run id) starting at `i`.
fn id_at(b: &[u8], i: usize) -> Option<usize> {
    let uuid = hex(b, i, 8)
        && b.get(i + 8) == Some(&b'-')
        && hex(b, i + 9, 4)
        && b.get(i + 13) == Some(&b'-')
        && hex(b, i + 14, 4)
        && b.get(i + 18) == Some(&b'-')
        && hex(b, i + 19, 4)
        && b.get(i + 23) == Some(&b'-')
        && hex(b, i + 24, 12)
        && ends_token(b, i + 36);
    if uuid {
        return Some(36);
    }
    // 32 hex digits with at least one digit and one letter: not a word, not a number.
    if let Some(s) = span(b, i, 32).filter(|_| hex(b, i, 32) && ends_token(b, i + 32)) {
        if s.iter().any(u8::is_ascii_digit) && s.iter().any(u8::is_ascii_alphabetic) {
            return Some(32);
        }
    }
    None
}

/// `YYYY-MM-DDTHH:MM:SS` with optional fraction and zone, starting at `i`.
fn timestamp_at(b: &[u8], i: usize) -> Option<usize> {
    let d =
        |k: usize, n: usize| span(b, i + k, n).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |k: usize, c: u8| b.get(i + k) == Some(&c);
    let t = at(10, b'T') || at(10, b' ');
    if !(d(0, 4) && at(4, b'-') && d(5, 2) && at(7, b'-') && d(8, 2) && t && d(11, 2))
        || !(at(13, b':') && d(14, 2) && at(16, b':') && d(17, 2))
    {
        return None;
    }
    let mut len = 19;
    if at(len, b'.') {
        len += 1;
        while b.get(i + len).is_some_and(u8::is_ascii_digit) {
            len += 1;
        }
    }
    if at(len, b'Z') {
        len += 1;
    } else if (at(len, b'+') || at(len, b'-'))
        && d(len + 1, 2)
        && at(len + 3, b':')
        && d(len + 4, 2)
    {
        len += 6;
    }
    Some(len)
}

/// `value` with every recorded id in `map` replaced by the id this run issued.
pub(super) fn reissue(value: &mut Value, map: &std::collections::HashMap<String, String>) {
    match value {
        Value::String(s) => {
            let mut ids = Vec::new();
            if normalize_text(s, &mut ids).is_some() && ids.iter().any(|i| map.contains_key(i)) {
                let mut out = s.clone();
                for id in ids {
                    if let Some(new) = map.get(&id) {
                        out = replace_ignoring_case(&out, &id, new);
                    }
                }
                *s = out;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| reissue(x, map)),
        Value::Object(o) => o.values_mut().for_each(|x| reissue(x, map)),
        _ => {}
    }
}

fn replace_ignoring_case(text: &str, from: &str, to: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    // ASCII lowercasing keeps every byte where it was, so a match's bounds in
    // `lower` are char boundaries of `text`.
    for (at, _) in lower.match_indices(from) {
        out.push_str(text.get(last..at).unwrap_or_default());
        out.push_str(to);
        last = at + from.len();
    }
    out.push_str(text.get(last..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_timestamps_become_placeholders_words_and_numbers_stay() {
        let mut ids = Vec::new();
        let t =
            "agent 01a211a4c6d974ff96302f3e0884ba92 (transcript:01A211A4C6D974FF96302F3E0884BA93) \
                 at 2026-11-25T07:30:26.123Z, uuid 0190f3c4-1b2a-7c3d-8e4f-0123456789ab; \
                 deadbeefdeadbeefdeadbeefdeadbeef1 and 12345678901234567890123456789012 stay";
        let n = normalize_text(t, &mut ids).unwrap();
        assert_eq!(
            n,
            "agent <id> (transcript:<id>) at <time>, uuid <id>; \
             deadbeefdeadbeefdeadbeefdeadbeef1 and 12345678901234567890123456789012 stay"
        );
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[1], "01a211a4c6d974ff96302f3e0884ba93");
        assert!(normalize_text("nothing to see", &mut ids).is_none());
    }

    #[test]
    fn reissue_maps_recorded_ids_to_new_ones() {
        let mut v =
            serde_json::json!({"args": "{\"agent_id\":\"01a211a4c6d974ff96302f3e0884ba92\"}"});
        let map = [(
            "01a211a4c6d974ff96302f3e0884ba92".to_string(),
            "01b0000000000000000000000000000f".to_string(),
        )]
        .into_iter()
        .collect();
        reissue(&mut v, &map);
        assert_eq!(
            v["args"],
            "{\"agent_id\":\"01b0000000000000000000000000000f\"}"
        );
    }
}
