//! A loopback TCP proxy in front of the test server's Unix socket, for the tests of
//! connections that go wrong (`reconnect.rs`, `silent.rs`): it forwards both ways,
//! and on command
//!
//! - **eats a COMMIT's answer** (`armed`, after letting `pass` more through): the
//!   server commits, the client never hears — then drops the connection, or, with
//!   `eat_silently`, keeps it open and forwards nothing more (a server gone silent
//!   after the COMMIT);
//! - **goes silent** (a blackhole: a wedged or stopped server whose kernel still
//!   acknowledges, a firewall that starts dropping the traffic): bytes are read and
//!   dropped and neither side's end is passed on — every connection while `silent`
//!   is set, the last one made with [`Proxy::silence_last`], or each new one once
//!   the server said it is ready (`silent_after_connect`: the connect succeeds, the
//!   first statement is never answered; use `sslmode=disable`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What every connection of a [`Proxy`] shares.
#[derive(Clone, Default)]
struct Flags {
    armed: Arc<AtomicBool>,
    pass: Arc<AtomicUsize>,
    ate: Arc<AtomicBool>,
    eat_silently: Arc<AtomicBool>,
    silent: Arc<AtomicBool>,
    silent_after_connect: Arc<AtomicBool>,
}

/// The proxy; see the module doc.
pub struct Proxy {
    pub port: u16,
    /// Eat the next COMMIT's answer (after `pass` more).
    pub armed: Arc<AtomicBool>,
    pub pass: Arc<AtomicUsize>,
    /// A COMMIT's answer was eaten.
    pub ate: Arc<AtomicBool>,
    /// After eating, keep the connection open and silent rather than drop it.
    pub eat_silently: Arc<AtomicBool>,
    /// Every connection silent while set.
    pub silent: Arc<AtomicBool>,
    /// New connections go silent once the server said ReadyForQuery.
    pub silent_after_connect: Arc<AtomicBool>,
    /// Each connection's own silence, in the order they were made.
    conns: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Proxy {
    pub fn start(socket: PathBuf) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let flags = Flags::default();
        let conns: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let (f, c) = (flags.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = UnixStream::connect(&socket).unwrap();
                let muted = Arc::new(AtomicBool::new(false));
                c.lock().unwrap().push(muted.clone());
                pump(client, server, f.clone(), muted);
            }
        });
        Proxy {
            port,
            armed: flags.armed,
            pass: flags.pass,
            ate: flags.ate,
            eat_silently: flags.eat_silently,
            silent: flags.silent,
            silent_after_connect: flags.silent_after_connect,
            conns,
        }
    }

    /// How many connections were made through the proxy.
    pub fn connections(&self) -> usize {
        self.conns.lock().unwrap().len()
    }

    /// Silence the connection made last, for good.
    pub fn silence_last(&self) {
        let conns = self.conns.lock().unwrap();
        conns.last().unwrap().store(true, Ordering::SeqCst);
    }
}

/// Forward between `client` and `server` on two threads, plainly.
pub fn forward(client: TcpStream, server: UnixStream) {
    pump(client, server, Flags::default(), Arc::default());
}

/// Forward between `client` and `server` on two threads, as `flags` and this
/// connection's `muted` say.
fn pump(client: TcpStream, server: UnixStream, flags: Flags, muted: Arc<AtomicBool>) {
    let quiet = {
        let (silent, muted) = (flags.silent.clone(), muted.clone());
        move || silent.load(Ordering::SeqCst) || muted.load(Ordering::SeqCst)
    };
    let drop_answer = Arc::new(AtomicBool::new(false));
    let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (flag, f, q) = (drop_answer.clone(), flags.clone(), quiet.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        loop {
            let n = match c_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if q() {
                continue;
            }
            let chunk = &buf[..n];
            // A simple-protocol query ('Q') of exactly "COMMIT".
            if chunk.windows(7).any(|w| w == b"COMMIT\0") && f.armed.load(Ordering::SeqCst) {
                let let_through = f
                    .pass
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if !let_through && f.armed.swap(false, Ordering::SeqCst) {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            if s_out.write_all(chunk).is_err() {
                break;
            }
        }
        // A silent peer passes no end on: the server's side stays open.
        if !q() {
            let _ = s_out.shutdown(Shutdown::Both);
        }
    });
    let after_connect = flags.silent_after_connect.load(Ordering::SeqCst);
    let (mut s_in, mut c_out) = (server, client);
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        let mut ready = ReadyWatch::default();
        loop {
            let n = match s_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if quiet() {
                continue;
            }
            if drop_answer.load(Ordering::SeqCst) {
                flags.ate.store(true, Ordering::SeqCst);
                if flags.eat_silently.load(Ordering::SeqCst) {
                    muted.store(true, Ordering::SeqCst);
                    continue;
                }
                break;
            }
            if c_out.write_all(&buf[..n]).is_err() {
                break;
            }
            if after_connect && ready.saw_ready(&buf[..n]) {
                muted.store(true, Ordering::SeqCst);
            }
        }
        if !quiet() {
            let _ = c_out.shutdown(Shutdown::Both);
            let _ = s_in.shutdown(Shutdown::Both);
        }
    });
}

/// Follows the server's messages (a type byte, a 4-byte length) to see its first
/// ReadyForQuery ('Z'): the connect is done.
#[derive(Default)]
struct ReadyWatch {
    header: Vec<u8>,
    body_left: usize,
    in_ready: bool,
}

impl ReadyWatch {
    /// Whether a ReadyForQuery ended within `bytes`.
    fn saw_ready(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                bytes = &bytes[n..];
                if self.body_left == 0 && self.in_ready {
                    return true;
                }
                continue;
            }
            self.header.push(bytes[0]);
            bytes = &bytes[1..];
            if self.header.len() == 5 {
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]);
                self.in_ready = self.header[0] == b'Z';
                self.body_left = (len as usize).saturating_sub(4);
                self.header.clear();
                if self.body_left == 0 && self.in_ready {
                    return true;
                }
            }
        }
        false
    }
}
