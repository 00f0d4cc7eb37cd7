//! Ledger URLs as shown to people: a password in `postgres://user:secret@host/db` or
//! in a `password=` parameter is replaced by `***` before a URL enters a message, a
//! listing (`brood config show`) or the ledger.

/// `url` with any password hidden.
///
/// The user info is found as tokio-postgres finds it — everything up to the first
/// `@` after the scheme, even past a `/` (a password with an unencoded `/`, as
/// generated and base64 ones have, is still the password there) — and up to the
/// last `@` before the host's end, so a password with an unencoded `@` is hidden
/// whole. Every `password` parameter is hidden, its key percent-decoded as
/// tokio-postgres decodes it (`passw%6Frd=`).
pub fn redact(url: &str) -> String {
    let out = match url.split_once("://") {
        Some((scheme, rest)) => match rest.find('@') {
            Some(first) => {
                // The host ends at the first '/', '?' or '#' after the first '@'.
                let host_end = rest[first..]
                    .find(['/', '?', '#'])
                    .map_or(rest.len(), |n| first + n);
                let last = rest[..host_end].rfind('@').unwrap_or(first);
                let (userinfo, tail) = (&rest[..last], &rest[last..]);
                match userinfo.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***{tail}"),
                    None => url.to_string(),
                }
            }
            None => url.to_string(),
        },
        None => url.to_string(),
    };
    hide_password_params(&out)
}

/// `text` with the value of every `password=` parameter (URL query or key-value
/// form: up to the next `&` or space) replaced by `***`, the key compared
/// percent-decoded and without regard to case.
fn hide_password_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        // The key: back to the previous separator.
        let key_start = before.rfind(['?', '&', ' ', ';']).map_or(0, |n| n + 1);
        let key = percent_decoded(before[key_start..].trim()).to_ascii_lowercase();
        let value_end = after[1..].find(['&', ' ']).map_or(after.len(), |n| n + 1);
        out.push_str(before);
        out.push('=');
        if key == "password" {
            out.push_str("***");
        } else {
            out.push_str(&after[1..value_end]);
        }
        rest = &after[value_end..];
    }
    out.push_str(rest);
    out
}

/// `s` with its `%XX` escapes decoded (invalid UTF-8 replaced); without the
/// PostgreSQL client's percent-encoding crate, which this module does not need.
fn percent_decoded(s: &str) -> String {
    let mut rest = s.as_bytes();
    let mut out = Vec::with_capacity(rest.len());
    let hex = |b: u8| (b as char).to_digit(16);
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail) {
            (b'%', [h, l, after @ ..]) if hex(*h).is_some() && hex(*l).is_some() => {
                out.push((hex(*h).unwrap_or(0) * 16 + hex(*l).unwrap_or(0)) as u8);
                rest = after;
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        // What tokio-postgres takes for the password, with an unencoded '/' (the
        // credentials run to the first '@'), or both '/' and '@'.
        assert_eq!(
            redact("postgres://me:ab/c+d=@db:5432/brood?sslmode=disable"),
            "postgres://me:***@db:5432/brood?sslmode=disable"
        );
        assert_eq!(
            redact("postgres://me:a/b@c@db/brood"),
            "postgres://me:***@db/brood"
        );
        // Every password parameter, its key percent-decoded.
        assert_eq!(
            redact("postgres://db/brood?password=one&user=me&Passw%6Frd=two&x=y"),
            "postgres://db/brood?password=***&user=me&Passw%6Frd=***&x=y"
        );
        // No user info: nothing hidden but parameters.
        assert_eq!(
            redact("postgres://db/brood?application_name=a=b&sslmode=require"),
            "postgres://db/brood?application_name=a=b&sslmode=require"
        );
    }
}
