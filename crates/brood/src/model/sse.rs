//! An incremental Server-Sent Events parser: feed it body bytes as they arrive, get the
//! `data` payloads of completed events. Handles LF, CRLF and CR line endings split
//! anywhere across reads, comments (`: keep-alive`), multi-line data and `data:` with
//! or without the space. Other fields (`event`, `id`, `retry`) are ignored.

/// Parser state between reads.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// Bytes of the line being read (a partial line after each `feed`).
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no line end: the next scan starts there,
    /// so a long line arriving in many reads is scanned once, not once per read.
    scanned: usize,
    /// The longest line accepted.
    line_cap: usize,
    data: String,
    has_data: bool,
}

impl Default for SseParser {
    fn default() -> SseParser {
        SseParser::with_line_cap(usize::MAX)
    }
}

/// Why the stream cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseError {
    /// The stream's bytes were not UTF-8.
    NotUtf8(String),
    /// A line grew past the cap; the size reached when it was dropped.
    LineTooLong(usize),
}

impl SseParser {
    #[cfg(test)]
    pub(crate) fn new() -> SseParser {
        SseParser::default()
    }

    /// A parser refusing any line longer than `line_cap` bytes.
    pub(crate) fn with_line_cap(line_cap: usize) -> SseParser {
        SseParser {
            buf: Vec::new(),
            scanned: 0,
            line_cap,
            data: String::new(),
            has_data: false,
        }
    }

    /// Add bytes; return the data of every event completed by them.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = self.scanned;
        while let Some(off) = self
            .buf
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n' || b == b'\r'))
        {
            let end = i + off;
            let is_cr = self.buf.get(end) == Some(&b'\r');
            // A CR at the very end may be the first half of a CRLF: wait for more.
            if is_cr && end + 1 == self.buf.len() {
                i = end;
                break;
            }
            if end - start > self.line_cap {
                return Err(SseError::LineTooLong(end - start));
            }
            let line = std::str::from_utf8(self.buf.get(start..end).unwrap_or_default())
                .map_err(|e| SseError::NotUtf8(format!("stream is not UTF-8: {e}")))?
                .to_string();
            self.line(&line, &mut out);
            i = if is_cr && self.buf.get(end + 1) == Some(&b'\n') {
                end + 2
            } else {
                end + 1
            };
            start = i;
        }
        if !self.buf.get(i..).is_some_and(|r| r.contains(&b'\r')) {
            i = self.buf.len().max(start);
        }
        self.buf.drain(..start);
        self.scanned = i - start;
        if self.buf.len() > self.line_cap {
            return Err(SseError::LineTooLong(self.buf.len()));
        }
        Ok(out)
    }

    /// The body ended: flush a last line and event that lacked their terminators.
    pub(crate) fn finish(&mut self) -> Result<Vec<String>, SseError> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.scanned = 0;
            let line = std::str::from_utf8(&rest)
                .map_err(|e| SseError::NotUtf8(format!("stream is not UTF-8: {e}")))?;
            let line = line.trim_end_matches(['\r', '\n']).to_string();
            self.line(&line, &mut out);
        }
        self.line("", &mut out);
        Ok(out)
    }

    fn line(&mut self, line: &str, out: &mut Vec<String>) {
        if line.is_empty() {
            if self.has_data {
                out.push(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, v)) => (field, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for part in parts {
            out.extend(p.feed(part).unwrap());
        }
        out.extend(p.finish().unwrap());
        out
    }

    #[test]
    fn events_split_at_every_byte_are_reassembled() {
        let body =
            b"data: {\"a\":1}\r\n\r\n: keep-alive\n\ndata:{\"b\":\"\xc3\xa9\"}\r\rdata: [DONE]\n\n";
        let whole = feed_all(&[body]);
        assert_eq!(whole, vec!["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"]);
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(feed_all(&pieces), whole);
    }

    #[test]
    fn multi_line_data_and_other_fields() {
        let out = feed_all(&[b"event: message\nid: 7\ndata: one\ndata: two\n\n"]);
        assert_eq!(out, vec!["one\ntwo"]);
    }

    #[test]
    fn unterminated_last_event_is_flushed_at_end() {
        assert_eq!(feed_all(&[b"data: x\n\ndata: tail"]), vec!["x", "tail"]);
        // Without finish() the tail is not an event yet.
        let mut p = SseParser::new();
        assert_eq!(p.feed(b"data: tail").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_long_line_in_many_reads_is_scanned_once_and_capped() {
        let mut p = SseParser::with_line_cap(2000);
        for _ in 0..99 {
            assert_eq!(p.feed(b"data: xxxxx").unwrap(), Vec::<String>::new());
        }
        // Only the newly arrived bytes were scanned each time.
        assert_eq!(p.scanned, p.buf.len());
        let out = p.feed(b"\n\n").unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), 5 + 98 * 11);
        let mut p = SseParser::with_line_cap(1000);
        let mut err = None;
        for _ in 0..300 {
            if let Err(e) = p.feed(b"data: xxxxx") {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(SseError::LineTooLong(n)) if n > 1000 && n < 1100));
        // A complete line past the cap, in one read, is refused too.
        let mut p = SseParser::with_line_cap(10);
        assert!(matches!(
            p.feed(b"data: 0123456789\n\n"),
            Err(SseError::LineTooLong(16))
        ));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }
}
