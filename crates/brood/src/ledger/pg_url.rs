//! Ledger URLs as shown to people: a password in `postgres://user:secret@host/db` or
//! in a `password=` parameter is replaced by `***` before a URL enters a message, a
//! listing (`brood config show`) or the ledger.

/// `url` with any password hidden.
pub fn redact(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            // The authority ends at the first '/', '?' or '#'.
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{user}:***@{host}"),
                    None => format!("{userinfo}@{host}"),
                },
                None => authority.to_string(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => url.to_string(),
    };
    // Key-value parameters: `password=…` up to the next '&' or space.
    let lower = out.to_ascii_lowercase();
    if let Some(at) = lower.find("password=") {
        let start = at + "password=".len();
        let end = out
            .get(start..)
            .and_then(|rest| rest.find(['&', ' ']))
            .map_or(out.len(), |n| start + n);
        out.replace_range(start..end, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden_wherever_they_are() {
        assert_eq!(
            redact("postgres://me:s3cret@db.local:5432/brood"),
            "postgres://me:***@db.local:5432/brood"
        );
        assert_eq!(
            redact("postgresql://me@db/brood?sslmode=disable"),
            "postgresql://me@db/brood?sslmode=disable"
        );
        assert_eq!(
            redact("postgres:///brood?host=/tmp&password=hunter2&user=me"),
            "postgres:///brood?host=/tmp&password=***&user=me"
        );
        // An '@' in the password does not leak its tail.
        assert_eq!(
            redact("postgres://me:a@b@host/db"),
            "postgres://me:***@host/db"
        );
        assert_eq!(
            redact("host=/tmp password=x user=me"),
            "host=/tmp password=*** user=me"
        );
    }
}
