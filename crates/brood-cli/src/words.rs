//! Counts in words: "1 run", "3 runs" — never "1 runs" or "run(s)".

/// `n` and the noun in the right number.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_everything_else_plural() {
        assert_eq!(count(0u64, "run", "runs"), "0 runs");
        assert_eq!(count(1u64, "run", "runs"), "1 run");
        assert_eq!(count(2u64, "spill file", "spill files"), "2 spill files");
    }
}
