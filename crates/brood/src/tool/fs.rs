//! File tools that read: `read_file` and `list_dir` (the writing ones are in
//! [`edit`](super::edit)).
//!
//! Every path goes through the [`super::Workspace`] jail and is opened
//! beneath the root. Output is capped with a marker that says how to read more.

use super::{
    blocking, clip, parse_args, schema_of, Capability, Tool, ToolContext, ToolError, Workspace,
};
use async_trait::async_trait;
use rustix::fs::{statat, AtFlags, Dir, FileType};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BinaryHeap;
use std::ffi::CString;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// Most lines `read_file` returns in one call.
pub(crate) const READ_MAX_LINES: usize = 2000;
/// Most bytes of text `read_file` returns in one call.
pub(crate) const READ_MAX_BYTES: usize = 256 * 1024;
/// Longer lines are cut to this many bytes.
pub(crate) const READ_MAX_LINE_BYTES: usize = 2000;
/// Most bytes `read_file` scans in one call (to reach `start_line` and count the
/// lines after the window); past it the answer says what was not scanned.
pub(crate) const READ_SCAN_MAX_BYTES: u64 = 256 << 20;
/// Most entries `list_dir` shows.
pub(crate) const LIST_MAX_ENTRIES: usize = 1000;
/// How much of a file's start is checked for NUL bytes to call it binary.
const BINARY_SNIFF_BYTES: usize = 8192;

/// Turn an I/O error on `path` (as shown to the model) into a [`ToolError`].
pub(crate) fn io_error(path: &str, e: io::Error) -> ToolError {
    if e.kind() == io::ErrorKind::NotFound {
        ToolError::NotFound { path: clip(path) }
    } else {
        ToolError::Io {
            path: clip(path),
            detail: e.to_string(),
        }
    }
}

/// The error for a path that is a FIFO, socket or device: opening it could block.
pub(crate) fn not_regular(shown: &str) -> ToolError {
    ToolError::Io {
        path: clip(shown),
        detail: "is not a regular file (a pipe, socket or device); file tools only handle \
                 regular files"
            .into(),
    }
}

/// The builtin file tools that read, fresh instances.
pub fn tools() -> Vec<std::sync::Arc<dyn Tool>> {
    vec![std::sync::Arc::new(ReadFile), std::sync::Arc::new(ListDir)]
}

// ---------------------------------------------------------------- read_file

/// `read_file`: a text file with line numbers, optionally a line range.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadFile;

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFileArgs {
    /// Relative to the workspace root.
    pub path: String,
    /// First line, 1-based.
    #[serde(default, alias = "offset", alias = "offset_line")]
    pub start_line: Option<usize>,
    /// Last line, inclusive.
    #[serde(default)]
    pub end_line: Option<usize>,
    /// Lines from start_line.
    #[serde(default)]
    pub limit: Option<usize>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a text file as numbered lines, at most 2000 lines / 256 KiB a call (a cut read names the start_line to go on from)."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<ReadFileArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: ReadFileArgs = parse_args(self.name(), args)?;
        let start = a.start_line.unwrap_or(1).max(1);
        let end = match (a.end_line, a.limit) {
            (Some(_), Some(_)) => {
                return Err(ToolError::InvalidArguments {
                    tool: self.name().into(),
                    detail: "give end_line or limit, not both".into(),
                })
            }
            (Some(e), None) if e < start => {
                return Err(ToolError::InvalidArguments {
                    tool: self.name().into(),
                    detail: format!("end_line {e} is before start_line {start}"),
                })
            }
            (Some(e), None) => Some(e),
            (None, Some(0)) => {
                return Err(ToolError::InvalidArguments {
                    tool: self.name().into(),
                    detail: "limit must be at least 1".into(),
                })
            }
            (None, Some(n)) => Some(start.saturating_add(n - 1)),
            (None, None) => None,
        };
        let ws = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        let path = a.path;
        blocking(move || {
            let abs = ws.resolve(&path)?;
            let shown = ws.display(&abs);
            read_numbered(&ws, &abs, &shown, start, end, &cancel)
        })
        .await
    }
}

/// Lines `start..=end` of the file at `abs`, numbered, within the caps.
fn read_numbered(
    ws: &Workspace,
    abs: &Path,
    shown: &str,
    start: usize,
    end: Option<usize>,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    let opened = ws.open_read(abs, shown)?;
    if opened.kind == FileType::Directory {
        return Err(ToolError::Io {
            path: clip(shown),
            detail: "is a directory; use list_dir to see its entries".into(),
        });
    }
    if opened.kind != FileType::RegularFile {
        return Err(not_regular(shown));
    }
    let file_len = opened.len;
    let mut reader = BufReader::with_capacity(64 * 1024, opened.file);
    {
        let mut sniff = Vec::with_capacity(BINARY_SNIFF_BYTES);
        reader
            .get_mut()
            .take(BINARY_SNIFF_BYTES as u64)
            .read_to_end(&mut sniff)
            .map_err(|e| io_error(shown, e))?;
        if sniff.contains(&0) {
            return Err(ToolError::BinaryFile {
                path: shown.to_string(),
                bytes: file_len,
            });
        }
        // Start over from the beginning for the real read.
        use std::io::Seek;
        reader
            .seek(io::SeekFrom::Start(0))
            .map_err(|e| io_error(shown, e))?;
    }

    let last_wanted = end.unwrap_or(usize::MAX);
    let cap_last = start.saturating_add(READ_MAX_LINES - 1);
    let mut out = String::new();
    let mut shown_last = 0usize; // last line number written to `out`
    let mut full = false; // a cap was hit; later lines are only counted
    let mut line_no = 1usize;
    let mut cur: Vec<u8> = Vec::new();
    let mut cur_cut = false;
    let mut cur_nonempty = false;

    let mut finish = |line_no: usize, cur: &mut Vec<u8>, cut: bool, out: &mut String| {
        if !full && line_no >= start && line_no <= last_wanted {
            if line_no > cap_last || out.len() >= READ_MAX_BYTES {
                full = true;
            } else {
                if cur.last() == Some(&b'\r') {
                    cur.pop();
                }
                let text = String::from_utf8_lossy(cur);
                out.push_str(&format!("{line_no:>6}\t{text}"));
                if cut {
                    out.push_str(" [line cut]");
                }
                out.push('\n');
                shown_last = line_no;
            }
        }
        cur.clear();
    };

    let mut scanned = 0u64;
    let mut scan_cut = false; // stopped at READ_SCAN_MAX_BYTES before the end
    loop {
        if cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        if scanned >= READ_SCAN_MAX_BYTES {
            scan_cut = true;
            break;
        }
        let chunk = reader.fill_buf().map_err(|e| io_error(shown, e))?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        scanned += n as u64;
        let mut i = 0;
        while let Some(rest) = chunk.get(i..).filter(|r| !r.is_empty()) {
            let (piece, newline) = match rest.split(|&b| b == b'\n').next() {
                Some(piece) if piece.len() < rest.len() => (piece, true),
                _ => (rest, false),
            };
            let in_window = line_no >= start && line_no <= last_wanted;
            if in_window && !piece.is_empty() {
                let room = READ_MAX_LINE_BYTES.saturating_sub(cur.len());
                if piece.len() > room {
                    cur_cut = true;
                }
                cur.extend_from_slice(piece.get(..room).unwrap_or(piece));
            }
            cur_nonempty |= !piece.is_empty();
            i += piece.len();
            if newline {
                i += 1;
                finish(line_no, &mut cur, cur_cut, &mut out);
                line_no += 1;
                cur_cut = false;
                cur_nonempty = false;
            }
        }
        reader.consume(n);
    }
    if scan_cut {
        if cur_nonempty {
            // The line goes on past the scan: show what was read of it, as cut.
            finish(line_no, &mut cur, true, &mut out);
        }
        return scan_cut_answer(out, shown, start, line_no, shown_last, file_len);
    }
    // A last line without a trailing newline.
    let total = if cur_nonempty {
        finish(line_no, &mut cur, cur_cut, &mut out);
        line_no
    } else {
        line_no - 1
    };

    if total == 0 {
        return Ok(format!("({shown} is empty)"));
    }
    if start > total {
        return Err(ToolError::InvalidArguments {
            tool: "read_file".into(),
            detail: format!("start_line {start} is past the end of {shown} ({total} lines)"),
        });
    }
    let window_end = last_wanted.min(total);
    if shown_last < window_end {
        out.push_str(&format!(
            "[output cut at {} lines / {} KiB: showing lines {start}-{shown_last} of {total}; \
             call read_file with start_line={} to read more]\n",
            READ_MAX_LINES,
            READ_MAX_BYTES / 1024,
            shown_last + 1
        ));
    } else if start > 1 || window_end < total {
        out.push_str(&format!(
            "[showing lines {start}-{window_end} of {total}]\n"
        ));
    }
    Ok(out)
}

/// The answer when the scan stopped at [`READ_SCAN_MAX_BYTES`], in line `line_no`,
/// having shown lines up to `shown_last` (0: none).
fn scan_cut_answer(
    mut out: String,
    shown: &str,
    start: usize,
    line_no: usize,
    shown_last: usize,
    len: u64,
) -> Result<String, ToolError> {
    let mib = READ_SCAN_MAX_BYTES >> 20;
    if shown_last == 0 {
        return Err(ToolError::InvalidArguments {
            tool: "read_file".into(),
            detail: format!(
                "start_line {start} is not within the first {mib} MiB of {shown} ({len} bytes, \
                 {} lines in them); use grep to find the place, or bash (e.g. tail -c)",
                line_no - 1
            ),
        });
    }
    out.push_str(&format!(
        "[showing lines {start}-{shown_last}; stopped scanning {shown} ({len} bytes) after \
         {mib} MiB, in line {line_no}, so its lines were not all counted; call read_file with \
         start_line={} to read on]\n",
        shown_last + 1
    ));
    Ok(out)
}

// ---------------------------------------------------------------- list_dir

/// `list_dir`: the entries of one directory.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ListDir;

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListDirArgs {
    /// Default: the workspace root.
    #[serde(default)]
    pub path: Option<String>,
}

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }
    fn description(&self) -> &str {
        "List one directory (not recursive); directories end with '/'."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<ListDirArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: ListDirArgs = parse_args(self.name(), args)?;
        let ws = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let path = a.path.unwrap_or_default();
            let abs = ws.resolve(&path)?;
            let shown = ws.display(&abs);
            list(&ws, &abs, &shown, &cancel)
        })
        .await
    }
}

fn list(
    ws: &Workspace,
    abs: &Path,
    shown: &str,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    let opened = ws.open_read(abs, shown)?;
    if opened.kind != FileType::Directory {
        return Err(ToolError::Io {
            path: clip(shown),
            detail: "is a file, not a directory; use read_file to read it".into(),
        });
    }
    let fd = opened.file.as_fd();
    let dir = Dir::read_from(fd).map_err(|e| io_error(shown, e.into()))?;
    // The first LIST_MAX_ENTRIES names in order, kept in a bounded max-heap: a
    // directory of millions of entries costs no more memory than one of a thousand.
    // The file type rides along as its raw mode bits (FileType is not Ord).
    let mut kept: BinaryHeap<(String, CString, u32)> = BinaryHeap::new();
    let mut total = 0usize;
    for entry in dir {
        if cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let entry = entry.map_err(|e| io_error(shown, e.into()))?;
        let raw = entry.file_name();
        if raw.to_bytes() == b"." || raw.to_bytes() == b".." {
            continue;
        }
        total += 1;
        kept.push((
            raw.to_string_lossy().into_owned(),
            raw.to_owned(),
            entry.file_type().as_raw_mode(),
        ));
        if kept.len() > LIST_MAX_ENTRIES {
            kept.pop();
        }
    }
    if total == 0 {
        return Ok(format!("({shown} is empty)"));
    }
    let mut out = String::new();
    for (name, raw, mode) in kept.into_sorted_vec() {
        let kind = match FileType::from_raw_mode(mode) {
            FileType::Unknown => statat(fd, &raw, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileType::from_raw_mode(st.st_mode))
                .unwrap_or(FileType::Unknown),
            k => k,
        };
        // A symlink counts as a directory when its target is one (as `ls -F`).
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::Symlink => statat(fd, &raw, AtFlags::empty())
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            _ => false,
        };
        out.push_str(&name);
        if is_dir {
            out.push('/');
        }
        if kind == FileType::Symlink {
            if let Ok(target) = rustix::fs::readlinkat(fd, &raw, Vec::new()) {
                out.push_str(&format!(" -> {}", target.to_string_lossy()));
            }
        }
        out.push('\n');
    }
    if total > LIST_MAX_ENTRIES {
        out.push_str(&format!(
            "[{} more entries not shown ({total} in all); use find_files with a pattern to narrow]\n",
            total - LIST_MAX_ENTRIES
        ));
    }
    Ok(out)
}
