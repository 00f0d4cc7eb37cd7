//! The simple commands inside one shell command line, for permission rules on
//! `bash` ([`super::rules`]).
//!
//! A rule such as `bash(git push:*)` must hold however the model spells the call:
//! `  git push`, `env GIT_X=1 git push`, `true && git push`, `echo $(git push)`,
//! `bash -c 'git push'`, `sh -c "…"`, `/usr/bin/git push`, `'git' push`. This module
//! splits a command line into every simple command it would run — through `;`, `&&`,
//! `||`, `|`, `&`, newlines, subshells, `$( )`, backticks, `<( )`, the `-c` script of
//! `bash`/`sh`/`zsh`/`dash`/`ksh`, and wrappers (`env`, `command`, `exec`, `nohup`,
//! `nice`, `timeout`, `time`, `xargs`, `sudo`) — each as its words with quotes
//! removed, leading `NAME=value` assignments and redirections dropped, and a command
//! name given as a path cut to its last part.
//!
//! It is deliberately not a full shell parser: where it cannot be confident what
//! runs (`eval`, a command name built from a variable or a substitution, unbalanced
//! quotes, here-documents, `case`, `$'…'`, nesting deeper than 8) the result is
//! [`Split::sure`] `false`, and the rules treat the call as matching every `ask` and
//! `deny` rule on `bash` (fail closed) and no `allow` rule.
//!
//! Why not a crate: `shlex`/`shell-words` split words but know no operators or
//! substitutions; a full bash parser (`brush-parser`) is a large build for what
//! this needs, and any construct it understands that this module does not is still
//! answered the safe way (not sure → ask/deny hold).

/// The simple commands of a command line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    /// Each simple command's words (quotes removed), in the order they appear.
    pub commands: Vec<Vec<String>>,
    /// `false` when some part could not be read with confidence.
    pub sure: bool,
}

/// Split `line` into its simple commands (see the module's doc).
pub fn split(line: &str) -> Split {
    let mut commands = Vec::new();
    let sure = parse(line, 0, &mut commands).is_ok();
    Split { commands, sure }
}

const MAX_DEPTH: u32 = 8;

/// Not confident what runs.
#[derive(Debug)]
struct Unsure;

/// One word: its text with quotes removed, and whether an expansion made part of
/// it (`$X`, `$( )`, a backtick), so its value is unknown until run time.
#[derive(Debug, Clone)]
struct Word {
    text: String,
    dynamic: bool,
}

enum Token {
    Word(Word),
    /// `;`, `&&`, `||`, `|`, `&`, newline, `(`, `)`.
    Separator,
}

fn parse(src: &str, depth: u32, out: &mut Vec<Vec<String>>) -> Result<(), Unsure> {
    if depth > MAX_DEPTH {
        return Err(Unsure);
    }
    let chars: Vec<char> = src.chars().collect();
    let tokens = lex(&chars, depth, out)?;
    let mut current: Vec<Word> = Vec::new();
    for t in tokens {
        match t {
            Token::Word(w) => current.push(w),
            Token::Separator => {
                if !current.is_empty() {
                    simple(std::mem::take(&mut current), depth, out)?;
                }
            }
        }
    }
    if !current.is_empty() {
        simple(current, depth, out)?;
    }
    Ok(())
}

/// The characters `a..b` of `c` as text (empty when out of range).
fn text_of(c: &[char], a: usize, b: usize) -> String {
    c.get(a..b).unwrap_or_default().iter().collect()
}

/// Tokens of `c`; commands inside substitutions are parsed into `out` on the way.
fn lex(c: &[char], depth: u32, out: &mut Vec<Vec<String>>) -> Result<Vec<Token>, Unsure> {
    let mut tokens = Vec::new();
    let mut i = 0;
    // After a redirection operator, the next word is its target, not an argument.
    let mut skip_next_word = false;
    while let Some(&ch) = c.get(i) {
        match ch {
            ' ' | '\t' => i += 1,
            '\\' if c.get(i + 1) == Some(&'\n') => i += 2,
            '\n' | ';' | '(' | ')' => {
                tokens.push(Token::Separator);
                i += 1;
            }
            '&' | '|' => {
                // `&>` and `&>>` redirect; the rest separate.
                if ch == '&' && c.get(i + 1) == Some(&'>') {
                    i = redirection(c, i + 1)?;
                    skip_next_word = true;
                    continue;
                }
                tokens.push(Token::Separator);
                i += 1;
                while matches!(c.get(i), Some('&' | '|')) {
                    i += 1;
                }
            }
            '<' | '>' => {
                if c.get(i + 1) == Some(&'(') {
                    // Process substitution: its commands run.
                    let end = closing_paren(c, i + 2)?;
                    parse(&text_of(c, i + 2, end), depth + 1, out)?;
                    i = end + 1;
                    continue;
                }
                i = redirection(c, i)?;
                skip_next_word = true;
            }
            '#' => {
                while c.get(i).is_some_and(|&x| x != '\n') {
                    i += 1;
                }
            }
            _ => {
                let (word, next) = word(c, i, depth, out)?;
                i = next;
                // `2>file`: a word of digits directly before `<`/`>` is a descriptor.
                if matches!(c.get(i), Some('<' | '>'))
                    && !word.text.is_empty()
                    && word.text.chars().all(|d| d.is_ascii_digit())
                {
                    continue;
                }
                if skip_next_word {
                    skip_next_word = false;
                    continue;
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

/// Past the redirection operator at `i` (`>`, `>>`, `>|`, `>&`, `<`, `<>`, `<<<`).
/// A here-document (`<<`) is not read: unsure.
fn redirection(c: &[char], mut i: usize) -> Result<usize, Unsure> {
    if c.get(i) == Some(&'<') && c.get(i + 1) == Some(&'<') && c.get(i + 2) != Some(&'<') {
        return Err(Unsure);
    }
    while matches!(c.get(i), Some('<' | '>' | '|' | '&')) {
        i += 1;
    }
    Ok(i)
}

/// The index of the `)` closing a `(` whose contents start at `i`, skipping
/// quotes and nested parentheses.
fn closing_paren(c: &[char], mut i: usize) -> Result<usize, Unsure> {
    let mut level = 1;
    while let Some(&ch) = c.get(i) {
        match ch {
            '\\' => i += 1,
            '\'' => {
                i += 1;
                while c.get(i).is_some_and(|&x| x != '\'') {
                    i += 1;
                }
            }
            '"' => {
                i += 1;
                while let Some(&x) = c.get(i) {
                    if x == '"' {
                        break;
                    }
                    if x == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            '(' => level += 1,
            ')' => {
                level -= 1;
                if level == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(Unsure)
}

/// The backtick closing one opened before `i`.
fn closing_backtick(c: &[char], mut i: usize) -> Result<usize, Unsure> {
    while let Some(&ch) = c.get(i) {
        match ch {
            '\\' => i += 1,
            '`' => return Ok(i),
            _ => {}
        }
        i += 1;
    }
    Err(Unsure)
}

/// A `$…` expansion at `i` (the `$`): parse any commands inside into `out`;
/// return where it ends, or `None` when `$` is a plain character.
fn dollar(
    c: &[char],
    i: usize,
    depth: u32,
    out: &mut Vec<Vec<String>>,
) -> Result<Option<usize>, Unsure> {
    match c.get(i + 1) {
        Some('(') if c.get(i + 2) == Some(&'(') => {
            // Arithmetic: no command runs, but its value is unknown.
            let end = closing_paren(c, i + 3)?;
            match c.get(end + 1) {
                Some(')') => Ok(Some(end + 2)),
                _ => Err(Unsure),
            }
        }
        Some('(') => {
            let end = closing_paren(c, i + 2)?;
            parse(&text_of(c, i + 2, end), depth + 1, out)?;
            Ok(Some(end + 1))
        }
        Some('{') => {
            let mut j = i + 2;
            loop {
                match c.get(j) {
                    None => return Err(Unsure),
                    Some('}') => return Ok(Some(j + 1)),
                    // `${X:-$(cmd)}` and the like: not read.
                    Some('$' | '`' | '(') => return Err(Unsure),
                    Some(_) => j += 1,
                }
            }
        }
        Some('\'') => Err(Unsure),
        Some(&ch)
            if ch.is_ascii_alphanumeric()
                || matches!(ch, '_' | '@' | '*' | '#' | '?' | '-' | '$' | '!') =>
        {
            let mut j = i + 2;
            if ch.is_ascii_alphabetic() || ch == '_' {
                while c
                    .get(j)
                    .is_some_and(|x| x.is_ascii_alphanumeric() || *x == '_')
                {
                    j += 1;
                }
            }
            Ok(Some(j))
        }
        _ => Ok(None),
    }
}

/// One word starting at `i`; returns it and where it ends.
fn word(
    c: &[char],
    mut i: usize,
    depth: u32,
    out: &mut Vec<Vec<String>>,
) -> Result<(Word, usize), Unsure> {
    let mut text = String::new();
    let mut dynamic = false;
    while let Some(&ch) = c.get(i) {
        match ch {
            ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
            '\\' => {
                match c.get(i + 1) {
                    Some('\n') | None => {}
                    Some(&n) => text.push(n),
                }
                i += 2;
            }
            '\'' => {
                let start = i + 1;
                let mut j = start;
                while c.get(j).is_some_and(|&x| x != '\'') {
                    j += 1;
                }
                if j >= c.len() {
                    return Err(Unsure);
                }
                text.push_str(&text_of(c, start, j));
                i = j + 1;
            }
            '"' => {
                i += 1;
                loop {
                    match c.get(i) {
                        None => return Err(Unsure),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match c.get(i + 1) {
                                Some(&n @ ('"' | '\\' | '$' | '`')) => text.push(n),
                                Some('\n') => {}
                                Some(&n) => {
                                    text.push('\\');
                                    text.push(n);
                                }
                                None => return Err(Unsure),
                            }
                            i += 2;
                        }
                        Some('$') => match dollar(c, i, depth, out)? {
                            Some(end) => {
                                dynamic = true;
                                i = end;
                            }
                            None => {
                                text.push('$');
                                i += 1;
                            }
                        },
                        Some('`') => {
                            let end = closing_backtick(c, i + 1)?;
                            parse(&text_of(c, i + 1, end), depth + 1, out)?;
                            dynamic = true;
                            i = end + 1;
                        }
                        Some(&n) => {
                            text.push(n);
                            i += 1;
                        }
                    }
                }
            }
            '$' => match dollar(c, i, depth, out)? {
                Some(end) => {
                    dynamic = true;
                    i = end;
                }
                None => {
                    text.push('$');
                    i += 1;
                }
            },
            '`' => {
                let end = closing_backtick(c, i + 1)?;
                parse(&text_of(c, i + 1, end), depth + 1, out)?;
                dynamic = true;
                i = end + 1;
            }
            ch => {
                text.push(ch);
                i += 1;
            }
        }
    }
    Ok((Word { text, dynamic }, i))
}

/// Words that start or end a compound command; they run nothing themselves.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done", "[[", "]]",
];

/// Shells whose `-c` script is read as a command line of its own.
const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "ash", "mksh", "busybox"];

/// Record one simple command (after wrappers and assignments), and the script of
/// a `shell -c`.
fn simple(words: Vec<Word>, depth: u32, out: &mut Vec<Vec<String>>) -> Result<(), Unsure> {
    let mut w: &[Word] = &words;
    loop {
        let Some(first) = w.first() else {
            return Ok(());
        };
        if first.dynamic {
            // `$CMD args`, `$(pick) args`: what runs is decided at run time.
            return Err(Unsure);
        }
        let name = first.text.as_str();
        let rest = w.get(1..).unwrap_or_default();
        if KEYWORDS.contains(&name) || is_assignment(name) {
            w = rest;
            continue;
        }
        match name {
            "for" | "select" => return Ok(()),
            "case" | "function" | "coproc" | "eval" | "trap" => return Err(Unsure),
            _ => {}
        }
        if name.ends_with("()") {
            return Err(Unsure);
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        if base.is_empty() {
            return Err(Unsure);
        }
        if let Some(inner) = unwrap(base, rest)? {
            w = inner;
            continue;
        }
        let mut cmd: Vec<String> = Vec::with_capacity(w.len());
        cmd.push(base.to_string());
        cmd.extend(rest.iter().map(|x| x.text.clone()));
        if SHELLS.contains(&base) {
            if let Some(script) = shell_script(rest)? {
                out.push(cmd);
                return parse(&script, depth + 1, out);
            }
        }
        out.push(cmd);
        return Ok(());
    }
}

fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let name = name.strip_suffix('+').unwrap_or(name);
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// For a wrapper command (`env`, `nohup`, …), the words of the command it runs;
/// `None` when `name` is not a wrapper.
fn unwrap<'a>(name: &str, args: &'a [Word]) -> Result<Option<&'a [Word]>, Unsure> {
    // Options that take a value in the next word, per wrapper.
    let valued: &[&str] = match name {
        "env" => &["-u", "--unset", "-C", "--chdir"],
        "command" | "builtin" | "nohup" | "time" => &[],
        "exec" => &["-a"],
        "nice" => &["-n", "--adjustment"],
        "timeout" => &["-s", "--signal", "-k", "--kill-after"],
        "stdbuf" => &["-i", "-o", "-e"],
        "xargs" => &[
            "-a",
            "-d",
            "-E",
            "-e",
            "-I",
            "-i",
            "-L",
            "-l",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--replace",
        ],
        "sudo" | "doas" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"],
        _ => return Ok(None),
    };
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a.dynamic {
            return Err(Unsure);
        }
        let t = a.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if name == "env" && (t == "-S" || t.starts_with("-S") || t.starts_with("--split-string")) {
            return Err(Unsure);
        }
        if name == "env" && is_assignment(t) {
            i += 1;
            continue;
        }
        if t.starts_with('-') && t.len() > 1 {
            i += if valued.contains(&t) { 2 } else { 1 };
            continue;
        }
        break;
    }
    let mut rest = args.get(i..).unwrap_or_default();
    // `timeout 5 cmd`: the duration comes first.
    if name == "timeout" {
        rest = rest.get(1..).unwrap_or_default();
    }
    Ok(Some(rest))
}

/// The script of `sh -c SCRIPT …` (options before it, `-c` alone or in a cluster
/// such as `-ec`); `None` without `-c`.
fn shell_script(args: &[Word]) -> Result<Option<String>, Unsure> {
    let mut has_c = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if a.dynamic {
            return Err(Unsure);
        }
        if t == "--" {
            i += 1;
            break;
        }
        if let Some(flags) = t
            .strip_prefix('-')
            .filter(|f| !f.is_empty() && !f.starts_with('-'))
        {
            if flags.contains('c') {
                has_c = true;
            }
            // `-o option` takes a value.
            if flags.ends_with('o') {
                i += 1;
            }
            i += 1;
            continue;
        }
        if t.starts_with("--") || t.starts_with('+') {
            i += 1;
            continue;
        }
        break;
    }
    if !has_c {
        return Ok(None);
    }
    match args.get(i) {
        Some(w) if !w.dynamic => Ok(Some(w.text.clone())),
        _ => Err(Unsure),
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    fn cmds(line: &str) -> Vec<String> {
        let s = split(line);
        assert!(s.sure, "not sure about {line:?}");
        s.commands.iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn every_spelling_reaches_the_command() {
        assert_eq!(cmds("   git push origin"), ["git push origin"]);
        assert_eq!(cmds("env A=1 B=2 git push"), ["git push"]);
        assert_eq!(cmds("A=1 git push"), ["git push"]);
        assert_eq!(cmds("bash -c 'git push'"), ["bash -c git push", "git push"]);
        assert_eq!(cmds("sh -ec \"git push\""), ["sh -ec git push", "git push"]);
        assert_eq!(cmds("ls; git push"), ["ls", "git push"]);
        assert_eq!(cmds("ls&&git push||true"), ["ls", "git push", "true"]);
        assert_eq!(cmds("ls | git push"), ["ls", "git push"]);
        assert_eq!(cmds("echo $(git push)"), ["git push", "echo "]);
        assert_eq!(cmds("echo `git push`"), ["git push", "echo "]);
        assert_eq!(cmds("echo \"x $(git push) y\""), ["git push", "echo x  y"]);
        assert_eq!(cmds("/usr/bin/git push"), ["git push"]);
        assert_eq!(cmds("'git' \"push\""), ["git push"]);
        assert_eq!(cmds("g\\it push"), ["git push"]);
        assert_eq!(cmds("nohup nice -n 5 timeout 10 git push"), ["git push"]);
        assert_eq!(cmds("(cd x && git push)"), ["cd x", "git push"]);
        assert_eq!(cmds("if true; then git push; fi"), ["true", "git push"]);
        assert_eq!(cmds(">out 2>&1 git push"), ["git push"]);
        assert_eq!(cmds("git push > /dev/null 2>&1"), ["git push"]);
        assert_eq!(cmds("find . | xargs -n 1 rm"), ["find .", "rm"]);
        assert_eq!(cmds("cat <(git push)"), ["git push", "cat"]);
        assert_eq!(
            cmds("bash -c \"sh -c 'git push'\""),
            ["bash -c sh -c 'git push'", "sh -c git push", "git push"]
        );
        assert_eq!(cmds("echo $((1+2))"), ["echo "]);
        assert_eq!(cmds("for f in *.rs; do rm $f; done"), ["rm "]);
    }

    #[test]
    fn what_cannot_be_read_is_not_sure() {
        for line in [
            "eval 'git push'",
            "echo 'unbalanced",
            "echo \"unbalanced",
            "$CMD push",
            "$(echo git) push",
            "cat <<EOF\nx\nEOF",
            "case x in x) git push;; esac",
            "echo $'\\x41'",
            "env -S 'git push'",
            "bash -c \"$X\"",
            "echo $(unclosed",
        ] {
            assert!(!split(line).sure, "{line:?} was read as sure");
        }
    }
}
