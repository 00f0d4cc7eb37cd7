//! An incremental Server-Sent Events parser: feed it body bytes as they arrive, get the
//! `data` payloads of completed events. Handles LF, CRLF and CR line endings split
//! anywhere across reads, comments (`: keep-alive`), multi-line data and `data:` with
//! or without the space. Other fields (`event`, `id`, `retry`) are ignored.

/// Parser state between reads.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    data: String,
    has_data: bool,
}

/// The stream's bytes were not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseError(pub String);

impl SseParser {
    pub(crate) fn new() -> SseParser {
        SseParser::default()
    }

    /// Add bytes; return the data of every event completed by them.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A CR at the very end may be the first half of a CRLF: wait for more.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = std::str::from_utf8(&self.buf[start..i])
                    .map_err(|e| SseError(format!("stream is not UTF-8: {e}")))?
                    .to_string();
                self.line(&line, &mut out);
                i += if b == b'\r' && self.buf[i + 1] == b'\n' {
                    2
                } else {
                    1
                };
                start = i;
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        Ok(out)
    }

    /// The body ended: flush a last line and event that lacked their terminators.
    pub(crate) fn finish(&mut self) -> Result<Vec<String>, SseError> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = std::str::from_utf8(&rest)
                .map_err(|e| SseError(format!("stream is not UTF-8: {e}")))?;
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
        let (field, value) = match line.find(':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(' ').unwrap_or(v))
            }
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
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }
}
