//! Words for the screen: counts ("1 run", "3 runs" — never "1 runs" or "run(s)") and
//! model-written text put on one bounded line.

/// `n` and the noun in the right number.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `s` on one line of at most `max` characters (an ellipsis ends a cut): control
/// characters become spaces and runs of whitespace one space, so model-written text
/// cannot move the cursor, retitle the terminal or break the layout.
pub fn one_line(s: &str, max: usize) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > max {
        format!(
            "{}…",
            s.chars().take(max.saturating_sub(1)).collect::<String>()
        )
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::{count, one_line};

    #[test]
    fn one_line_drops_control_characters_and_bounds_the_length() {
        assert_eq!(one_line("a\x1b]0;title\x07 b\n\tc", 80), "a ]0;title b c");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
    }

    #[test]
    fn one_is_singular_everything_else_plural() {
        assert_eq!(count(0u64, "run", "runs"), "0 runs");
        assert_eq!(count(1u64, "run", "runs"), "1 run");
        assert_eq!(count(2u64, "spill file", "spill files"), "2 spill files");
    }
}
