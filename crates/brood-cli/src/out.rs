//! Writing to stdout and stderr without dying when nobody reads them. `println!`
//! and `eprintln!` panic when a write fails — a reader that closed its end (`brood
//! run … | head -c0`, a closed terminal) would crash brood mid-run and leave the run
//! `interrupted`. Here a closed reader only ends the output: the run goes on and is
//! recorded as usual, and the exit code is the run's.
//!
//! Every other write error is dropped as well: there is no better place to report
//! a failing stdout or stderr than stdout or stderr.

use std::fmt;
use std::io::{self, Write};

/// One line to stdout (flushed).
pub fn stdout_line(args: fmt::Arguments<'_>) {
    let _ = line(&mut io::stdout().lock(), args);
}

/// One line to stderr.
pub fn stderr_line(args: fmt::Arguments<'_>) {
    let _ = line(&mut io::stderr().lock(), args);
}

/// Bytes to stdout as they come (a streamed answer), flushed.
pub fn stdout_bytes(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(bytes).and_then(|()| out.flush());
}

/// Bytes to stderr (an input prompt), flushed.
pub fn stderr_bytes(bytes: &[u8]) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(bytes).and_then(|()| err.flush());
}

fn line(w: &mut impl Write, args: fmt::Arguments<'_>) -> io::Result<()> {
    w.write_fmt(args)?;
    w.write_all(b"\n")?;
    w.flush()
}

/// `println!` that a closed stdout cannot crash.
macro_rules! outln {
    () => { $crate::out::stdout_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::stdout_line(format_args!($($arg)*)) };
}

/// `eprintln!` that a closed stderr cannot crash.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::stderr_line(format_args!($($arg)*)) };
}
