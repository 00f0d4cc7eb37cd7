//! The prompt editor: multi-line text with a cursor, the history of what was
//! sent this chat, and completion of slash command names.

use crate::chat::slash;

/// The text being typed, one `Vec<char>` per line (never empty).
#[derive(Debug)]
pub struct Input {
    lines: Vec<Vec<char>>,
    row: usize,
    col: usize,
    history: Vec<String>,
    /// Where `Up`/`Down` are in the history; `None`: editing a new text.
    browsing: Option<usize>,
    /// The new text put aside while browsing.
    draft: String,
}

impl Default for Input {
    fn default() -> Input {
        Input {
            lines: vec![Vec::new()],
            row: 0,
            col: 0,
            history: Vec::new(),
            browsing: None,
            draft: String::new(),
        }
    }
}

impl Input {
    pub fn text(&self) -> String {
        self.lines
            .iter()
            .map(|l| l.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn is_empty(&self) -> bool {
        self.lines.len() == 1 && self.lines[0].is_empty()
    }

    /// The lines, for drawing.
    pub fn lines(&self) -> Vec<String> {
        self.lines.iter().map(|l| l.iter().collect()).collect()
    }

    /// The cursor: line, and the text before it on that line.
    pub fn cursor(&self) -> (usize, String) {
        (self.row, self.line()[..self.col].iter().collect())
    }

    fn line(&self) -> &Vec<char> {
        &self.lines[self.row]
    }

    fn line_mut(&mut self) -> &mut Vec<char> {
        &mut self.lines[self.row]
    }

    /// Replace the whole text; the cursor goes to its end.
    pub fn set(&mut self, text: &str) {
        self.lines = text.split('\n').map(|l| l.chars().collect()).collect();
        self.row = self.lines.len() - 1;
        self.col = self.line().len();
    }

    pub fn insert(&mut self, c: char) {
        if c == '\n' {
            return self.newline();
        }
        let col = self.col;
        self.line_mut().insert(col, c);
        self.col += 1;
    }

    /// Pasted text: newlines become lines; other control characters are dropped
    /// (a paste may carry escapes).
    pub fn paste(&mut self, text: &str) {
        for c in text.chars() {
            match c {
                '\r' => {}
                '\t' => self.insert(' '),
                c if c == '\n' || !c.is_control() => self.insert(c),
                _ => {}
            }
        }
    }

    pub fn newline(&mut self) {
        let col = self.col;
        let rest = self.line_mut().split_off(col);
        self.row += 1;
        self.lines.insert(self.row, rest);
        self.col = 0;
    }

    pub fn backspace(&mut self) {
        if self.col > 0 {
            self.col -= 1;
            let col = self.col;
            self.line_mut().remove(col);
        } else if self.row > 0 {
            let line = self.lines.remove(self.row);
            self.row -= 1;
            self.col = self.line().len();
            self.line_mut().extend(line);
        }
    }

    pub fn delete(&mut self) {
        if self.col < self.line().len() {
            let col = self.col;
            self.line_mut().remove(col);
        } else if self.row + 1 < self.lines.len() {
            let next = self.lines.remove(self.row + 1);
            self.line_mut().extend(next);
        }
    }

    /// Delete the word before the cursor (`Ctrl-W`).
    pub fn delete_word(&mut self) {
        let line = self.line();
        let mut start = self.col;
        while start > 0 && line[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !line[start - 1].is_whitespace() {
            start -= 1;
        }
        let col = self.col;
        self.line_mut().drain(start..col);
        self.col = start;
    }

    /// Delete from the line's start to the cursor (`Ctrl-U`).
    pub fn delete_to_start(&mut self) {
        let col = self.col;
        self.line_mut().drain(..col);
        self.col = 0;
    }

    pub fn left(&mut self) {
        if self.col > 0 {
            self.col -= 1;
        } else if self.row > 0 {
            self.row -= 1;
            self.col = self.line().len();
        }
    }

    pub fn right(&mut self) {
        if self.col < self.line().len() {
            self.col += 1;
        } else if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = 0;
        }
    }

    pub fn home(&mut self) {
        self.col = 0;
    }

    pub fn end(&mut self) {
        self.col = self.line().len();
    }

    /// `Up`: the line above, or (on the first line) the previous history entry.
    pub fn up(&mut self) {
        if self.row > 0 {
            self.row -= 1;
            self.col = self.col.min(self.line().len());
            return;
        }
        let at = match self.browsing {
            Some(0) => return,
            Some(i) => i - 1,
            None if self.history.is_empty() => return,
            None => {
                self.draft = self.text();
                self.history.len() - 1
            }
        };
        self.browsing = Some(at);
        let text = self.history[at].clone();
        self.set(&text);
    }

    /// `Down`: the line below, or (on the last line) the next history entry and
    /// finally the text being written before browsing.
    pub fn down(&mut self) {
        if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = self.col.min(self.line().len());
            return;
        }
        let Some(i) = self.browsing else { return };
        if i + 1 < self.history.len() {
            self.browsing = Some(i + 1);
            let text = self.history[i + 1].clone();
            self.set(&text);
        } else {
            self.browsing = None;
            let draft = std::mem::take(&mut self.draft);
            self.set(&draft);
        }
    }

    /// Take the text to send: it joins the history (unless it repeats the last
    /// entry) and the editor empties.
    pub fn take(&mut self) -> String {
        let text = self.text();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        self.lines = vec![Vec::new()];
        self.row = 0;
        self.col = 0;
        self.browsing = None;
        self.draft.clear();
        text
    }

    /// The slash commands the text could become: it is one word starting with `/`.
    pub fn completions(&self) -> Vec<&'static str> {
        let text = self.text();
        if !text.starts_with('/') || text.contains(char::is_whitespace) {
            return Vec::new();
        }
        slash::names()
            .into_iter()
            .filter(|n| n.starts_with(text.as_str()))
            .collect()
    }

    /// `Tab`: complete a command name — the whole name (and a space when it takes
    /// arguments) when one matches, else as far as all matches agree.
    pub fn complete(&mut self) {
        let options = self.completions();
        let Some(first) = options.first() else { return };
        if let [only] = options.as_slice() {
            let space = if slash::takes_arguments(only) {
                " "
            } else {
                ""
            };
            self.set(&format!("{only}{space}"));
            return;
        }
        let mut common = first.to_string();
        for o in &options[1..] {
            let n = common
                .chars()
                .zip(o.chars())
                .take_while(|(a, b)| a == b)
                .count();
            common = common.chars().take(n).collect();
        }
        if common.chars().count() > self.text().chars().count() {
            self.set(&common);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(s: &str) -> Input {
        let mut i = Input::default();
        i.paste(s);
        i
    }

    #[test]
    fn lines_edit_and_join() {
        let mut i = typed("ab\ncd");
        assert_eq!(i.cursor(), (1, "cd".into()));
        i.home();
        i.backspace();
        assert_eq!(i.text(), "abcd");
        i.newline();
        i.insert('x');
        assert_eq!(i.text(), "ab\nxcd");
        i.delete_word();
        assert_eq!(i.text(), "ab\ncd");
        i.up();
        i.end();
        i.delete();
        assert_eq!(i.text(), "abcd");
    }

    #[test]
    fn history_browses_and_restores_the_draft() {
        let mut i = typed("one");
        i.take();
        i.paste("two");
        i.take();
        i.paste("dra");
        i.up();
        assert_eq!(i.text(), "two");
        i.up();
        i.up();
        assert_eq!(i.text(), "one");
        i.down();
        i.down();
        assert_eq!(i.text(), "dra");
    }

    #[test]
    fn tab_completes_command_names() {
        let mut i = typed("/he");
        i.complete();
        assert_eq!(i.text(), "/help");
        let mut i = typed("/mod");
        assert!(i.completions().len() >= 3);
        i.complete();
        assert_eq!(i.text(), "/model");
        let mut i = typed("/model-s");
        i.complete();
        assert_eq!(i.text(), "/model-subagent ");
        assert!(typed("hello /he").completions().is_empty());
    }
}
