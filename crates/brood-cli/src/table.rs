//! Plain-text tables for `brood agents list`: every column as wide as its widest cell
//! (in characters) plus two spaces, the last column unpadded, trailing blanks trimmed.
//!
//! Cells are written straight into one buffer and remembered as (end, width) pairs, so
//! a table of 10 000 rows costs a few allocations rather than one `String` per cell.

use std::fmt::Write as _;

/// A table being filled row by row, cell by cell; [`Table::render`] prints it.
pub struct Table {
    cols: usize,
    /// Every cell's text, one after another.
    text: String,
    /// Where each cell ends in `text`, and its width in characters.
    cells: Vec<(usize, usize)>,
    widths: Vec<usize>,
}

impl Table {
    /// A table whose first row is `header` (which sets the number of columns), with
    /// room for about `rows` more rows.
    pub fn new(header: &[&str], rows: usize) -> Self {
        let cols = header.len();
        let mut table = Table {
            cols,
            // ~60 bytes of cells a row for `brood agents list`.
            text: String::with_capacity(rows.saturating_add(1).saturating_mul(64)),
            cells: Vec::with_capacity(rows.saturating_add(1).saturating_mul(cols)),
            widths: vec![0; cols],
        };
        for h in header {
            table.cell(h);
        }
        table
    }

    /// The next cell (rows fill left to right, then wrap).
    pub fn cell(&mut self, text: &str) {
        self.cell_with(|s| s.push_str(text));
    }

    /// The next cell, written by `write` into the table's buffer.
    pub fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let width = self.text[start..].chars().count();
        let col = self.cells.len() % self.cols.max(1);
        if let Some(w) = self.widths.get_mut(col) {
            *w = (*w).max(width);
        }
        self.cells.push((self.text.len(), width));
    }

    /// The next cell, formatted (`format_args!`).
    pub fn cell_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        self.cell_with(|s| {
            let _ = s.write_fmt(args);
        });
    }

    /// Append the table to `out`, one line per row.
    pub fn render(&self, out: &mut String) {
        let line_width: usize = self.widths.iter().map(|w| w + 2).sum();
        out.reserve((self.cells.len() / self.cols.max(1) + 1) * line_width);
        let mut start = 0;
        let mut line_start = out.len();
        for (i, &(end, width)) in self.cells.iter().enumerate() {
            let col = i % self.cols.max(1);
            out.push_str(&self.text[start..end]);
            start = end;
            if col + 1 < self.cols {
                let pad = self.widths[col] - width + 2;
                for _ in 0..pad {
                    out.push(' ');
                }
            } else {
                let kept = out[line_start..].trim_end().len();
                out.truncate(line_start + kept);
                out.push('\n');
                line_start = out.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_in_characters() {
        let mut t = Table::new(&["ID", "NAME", "N"], 2);
        for cell in ["a", "ünïcödé", "1", "bbbb", "x ", "22"] {
            t.cell(cell);
        }
        let mut out = String::from("before\n");
        t.render(&mut out);
        assert_eq!(
            out,
            "before\nID    NAME     N\na     ünïcödé  1\nbbbb  x        22\n"
        );
    }

    #[test]
    fn trailing_blanks_of_a_line_are_trimmed() {
        let mut t = Table::new(&["A", "B"], 1);
        t.cell("x");
        t.cell_fmt(format_args!("{}  ", ""));
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(out, "A  B\nx\n");
    }
}
