//! The environment a shell gets: an allow list, never brood's whole environment.
//!
//! A deny list always misses something (`AWS_SECRET_ACCESS_KEY`, `*_TOKEN`, a key
//! variable the user named anything at all), so only named variables pass: what a
//! shell and the usual toolchains need to work, plus what the user adds with
//! `[sandbox] env_allow` (exact names, or a prefix ending in `*`). The variables
//! that hold the session's provider keys never pass, whatever the list says.

use std::ffi::OsString;

/// Variables every shell gets when brood has them.
pub(crate) const DEFAULT_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Which variables pass into a shell.
#[derive(Debug, Clone, Default)]
pub struct EnvPolicy {
    /// Extra names or `PREFIX*` patterns (the user's `[sandbox] env_allow`).
    pub allow: Vec<String>,
    /// Names that never pass (the provider key variables of the session).
    pub deny: Vec<String>,
}

impl EnvPolicy {
    /// Whether `name` may pass into a shell.
    pub fn allows(&self, name: &str) -> bool {
        if self.deny.iter().any(|d| d == name) {
            return false;
        }
        DEFAULT_ENV_ALLOW
            .iter()
            .copied()
            .chain(self.allow.iter().map(String::as_str))
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            })
    }

    /// The variables of `vars` that pass, in order.
    pub fn filter(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.filter(|(k, _)| k.to_str().is_some_and(|k| self.allows(k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_variables_pass_and_keys_never() {
        let p = EnvPolicy {
            allow: vec!["MY_*".into(), "EXTRA".into(), "DEEPSEEK_API_KEY".into()],
            deny: vec!["DEEPSEEK_API_KEY".into()],
        };
        for ok in ["PATH", "LC_ALL", "MY_THING", "EXTRA", "HOME"] {
            assert!(p.allows(ok), "{ok}");
        }
        for no in [
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "X_SECRET_Y",
            "DB_PASSWORD",
            "DEEPSEEK_API_KEY",
            "EXTRA2",
        ] {
            assert!(!p.allows(no), "{no}");
        }
    }
}
