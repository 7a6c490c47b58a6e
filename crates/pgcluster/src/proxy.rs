//! A TCP fault proxy the tests drive (issue #22): it forwards connections to the
//! server and, when told, drops them all, black-holes them (accepts and reads, answers
//! nothing), cuts a connection after some bytes, or breaks one around a chosen client message
//! (before it reaches the server, or after the server has answered it, swallowing the answer).
//!
//! Every fault is a plain state change the test makes; nothing is timed, so a test that waits
//! on the proxy's counters ([`FaultProxy::faults`], [`FaultProxy::accepted`]) is deterministic.

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// How often a blocked pump looks at the proxy's state again.
const POLL: Duration = Duration::from_millis(20);

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forwards both ways.
    Pass,
    /// Accepts connections and reads what they send; forwards and answers nothing (a partition
    /// that neither refuses nor resets).
    BlackHole,
}

/// A one-shot fault armed on the next client message containing a pattern.
#[derive(Clone, Debug)]
enum Trap {
    /// Drop the connection before the message reaches the server.
    DropBefore(Vec<u8>),
    /// Forward the message, swallow the server's answer, then drop the connection.
    LoseReply(Vec<u8>),
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    trap: Option<Trap>,
    /// The mode the proxy switches to once the trap fires (the server gone right after it).
    after_trap: Option<Mode>,
    cut_after: Option<u64>,
    /// A connection that sends a message containing this goes silent (`hang_at`).
    hang_at: Option<Vec<u8>>,
    /// Each open connection's two streams and whether it was faulted already (a connection
    /// counts once in `faults`, however many of its pumps then fail).
    conns: Vec<(TcpStream, TcpStream, Arc<AtomicBool>)>,
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    stop: AtomicBool,
    accepted: AtomicU64,
    faults: AtomicU64,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared
        .state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running proxy on a free port of 127.0.0.1. Dropping it stops accepting and drops every
/// connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Starts a proxy forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            faults: AtomicU64::new(0),
        });
        let accept = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(client) = stream {
                    accept.accepted.fetch_add(1, Ordering::SeqCst);
                    let shared = Arc::clone(&accept);
                    thread::spawn(move || serve(&shared, client));
                }
            }
        });
        Ok(FaultProxy { addr, shared })
    }

    /// Starts a proxy in front of the server a `postgres://` URL names, and returns it with the
    /// same URL pointing at the proxy instead.
    pub fn in_front_of(url: &str) -> io::Result<(FaultProxy, String)> {
        let invalid = || io::Error::new(io::ErrorKind::InvalidInput, "not a host:port URL");
        let (head, rest) = url.split_once('@').ok_or_else(invalid)?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let upstream: SocketAddr = rest[..end].parse().map_err(|_| invalid())?;
        let proxy = FaultProxy::start(upstream)?;
        let via = format!("{head}@{}{}", proxy.addr, &rest[end..]);
        Ok((proxy, via))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Faults applied so far (connections dropped by a trap, a cut or [`FaultProxy::drop_all`]).
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::SeqCst)
    }

    /// Forwards everything again (new and existing connections).
    pub fn pass(&self) {
        let mut state = lock(&self.shared);
        state.mode = Some(Mode::Pass);
        state.cut_after = None;
        state.after_trap = None;
        state.hang_at = None;
    }

    /// Black-holes every connection, new and existing, until [`FaultProxy::pass`].
    pub fn black_hole(&self) {
        lock(&self.shared).mode = Some(Mode::BlackHole);
    }

    /// Every connection that sends a message containing `pattern` goes silent from that
    /// message on, until [`FaultProxy::pass`]: it and all that follow are swallowed, nothing is
    /// answered, and the connection stays open (a server that hung mid-session, after the
    /// login went through). Each such connection counts once in `faults`.
    pub fn hang_at(&self, pattern: &[u8]) {
        lock(&self.shared).hang_at = Some(pattern.to_vec());
    }

    /// Drops every open connection now (later ones are served as the mode says).
    pub fn drop_all(&self) {
        let conns = std::mem::take(&mut lock(&self.shared).conns);
        for (client, server, faulted) in conns {
            cut(&self.shared, &faulted, &client, &server);
        }
    }

    /// Cuts each connection once it has sent `bytes` bytes towards the server, until
    /// [`FaultProxy::pass`].
    pub fn cut_after(&self, bytes: u64) {
        lock(&self.shared).cut_after = Some(bytes);
    }

    /// Drops the connection that next sends a message containing `pattern`, before the server
    /// sees it (once).
    pub fn drop_before(&self, pattern: &[u8]) {
        lock(&self.shared).trap = Some(Trap::DropBefore(pattern.to_vec()));
    }

    /// Lets the next message containing `pattern` reach the server, swallows the server's
    /// answer and drops that connection (once): the client cannot know whether it took effect.
    pub fn lose_reply_to(&self, pattern: &[u8]) {
        lock(&self.shared).trap = Some(Trap::LoseReply(pattern.to_vec()));
    }

    /// Once the armed trap fires, black-holes every connection until [`FaultProxy::pass`]: the
    /// server is unreachable from the moment of the fault, so a client's retries fail too.
    pub fn then_black_hole(&self) {
        lock(&self.shared).after_trap = Some(Mode::BlackHole);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the stop.
        let _ = TcpStream::connect(self.addr);
        self.drop_all();
    }
}

/// One client connection: its server connection and the two pumps between them.
fn serve(shared: &Arc<Shared>, client: TcpStream) {
    let Ok(server) = TcpStream::connect(shared.upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_copy), Ok(server_copy), Ok(c), Ok(s)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return cut(shared, &AtomicBool::new(false), &client, &server);
    };
    let faulted = Arc::new(AtomicBool::new(false));
    lock(shared).conns.push((c, s, Arc::clone(&faulted)));
    let lose_reply = Arc::new(AtomicBool::new(false));
    let hung = Arc::new(AtomicBool::new(false));
    let up = {
        let shared = Arc::clone(shared);
        let (lose_reply, faulted) = (Arc::clone(&lose_reply), Arc::clone(&faulted));
        let hung = Arc::clone(&hung);
        let (from, to) = (client_copy, server_copy);
        thread::spawn(move || pump_up(&shared, &faulted, from, to, (&lose_reply, &hung)))
    };
    pump_down(shared, &faulted, server, client, (&lose_reply, &hung));
    let _ = up.join();
    // Ended: a later `drop_all` neither holds its streams open nor counts it as a fault.
    lock(shared)
        .conns
        .retain(|(_, _, other)| !Arc::ptr_eq(other, &faulted));
}

/// Drops a connection, counting it in `faults` unless it was faulted before.
fn cut(shared: &Shared, faulted: &AtomicBool, a: &TcpStream, b: &TcpStream) {
    if !faulted.swap(true, Ordering::SeqCst) {
        shared.faults.fetch_add(1, Ordering::SeqCst);
    }
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// Client to server: applies the traps, the cut and the black hole.
fn pump_up(
    shared: &Shared,
    faulted: &AtomicBool,
    mut from: TcpStream,
    mut to: TcpStream,
    (lose_reply, hung): (&AtomicBool, &AtomicBool),
) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; 16 * 1024];
    let mut window: Vec<u8> = Vec::new();
    let mut sent = 0u64;
    loop {
        let n = match read_some(shared, faulted, &mut from, &to, &mut buf) {
            ControlFlow::Break(()) => return,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Continue(Some(n)) => n,
        };
        let data = &buf[..n];
        let mut state = lock(shared);
        if state.mode == Some(Mode::BlackHole) {
            continue;
        }
        // The last bytes of the previous reads, so a pattern split over two reads is seen; a
        // match must end in this read's bytes (older ones were matched against older traps).
        let old = window.len();
        window.extend_from_slice(data);
        let hit = match &state.trap {
            Some(Trap::DropBefore(p) | Trap::LoseReply(p)) => ends_after(&window, p, old),
            None => false,
        };
        let hangs = state
            .hang_at
            .as_ref()
            .is_some_and(|pattern| ends_after(&window, pattern, old));
        let keep = window.len().saturating_sub(64);
        window.drain(..keep);
        if hangs && !hung.swap(true, Ordering::SeqCst) && !faulted.swap(true, Ordering::SeqCst) {
            shared.faults.fetch_add(1, Ordering::SeqCst);
        }
        if hung.load(Ordering::SeqCst) && state.hang_at.is_some() {
            continue;
        }
        if hit {
            if let Some(mode) = state.after_trap.take() {
                state.mode = Some(mode);
            }
            match state.trap.take() {
                Some(Trap::DropBefore(_)) => {
                    drop(state);
                    return cut(shared, faulted, &from, &to);
                }
                _ => lose_reply.store(true, Ordering::SeqCst),
            }
        }
        sent += n as u64;
        if state.cut_after.is_some_and(|limit| sent > limit) {
            drop(state);
            return cut(shared, faulted, &from, &to);
        }
        drop(state);
        if to.write_all(data).is_err() {
            return cut(shared, faulted, &from, &to);
        }
    }
}

/// Server to client: honours the black hole and a swallowed answer.
fn pump_down(
    shared: &Shared,
    faulted: &AtomicBool,
    mut from: TcpStream,
    mut to: TcpStream,
    (lose_reply, hung): (&AtomicBool, &AtomicBool),
) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match read_some(shared, faulted, &mut from, &to, &mut buf) {
            ControlFlow::Break(()) => return,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Continue(Some(n)) => n,
        };
        if lose_reply.load(Ordering::SeqCst) {
            // The server answered the trapped message: the client never hears it.
            return cut(shared, faulted, &from, &to);
        }
        let state = lock(shared);
        if state.mode == Some(Mode::BlackHole)
            || hung.load(Ordering::SeqCst) && state.hang_at.is_some()
        {
            continue;
        }
        drop(state);
        if to.write_all(&buf[..n]).is_err() {
            return cut(shared, faulted, &from, &to);
        }
    }
}

/// One read of a pump from `from` into `buf`: `Some(n)` bytes, `None` nothing yet (poll again),
/// or `Break` when the pump ends — a stop asked for or a failed read cut both streams, the end of
/// `from` closes that half.
fn read_some(
    shared: &Shared,
    faulted: &AtomicBool,
    from: &mut TcpStream,
    to: &TcpStream,
    buf: &mut [u8],
) -> ControlFlow<(), Option<usize>> {
    if shared.stop.load(Ordering::SeqCst) {
        cut(shared, faulted, from, to);
        return ControlFlow::Break(());
    }
    match from.read(buf) {
        Ok(0) => {
            let _ = (to.shutdown(Shutdown::Write), from.shutdown(Shutdown::Read));
            ControlFlow::Break(())
        }
        Ok(n) => ControlFlow::Continue(Some(n)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            ControlFlow::Continue(None)
        }
        Err(_) => {
            cut(shared, faulted, from, to);
            ControlFlow::Break(())
        }
    }
}

/// Whether `needle` occurs in `haystack` ending past its first `old` bytes.
fn ends_after(haystack: &[u8], needle: &[u8], old: usize) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .enumerate()
            .any(|(at, w)| w == needle && at + needle.len() > old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_connection_that_ended_by_itself_is_not_dropped_again() {
        let proxy = FaultProxy::start(echo_server()).expect("starts");
        for _ in 0..3 {
            let mut a = TcpStream::connect(proxy.addr()).expect("connects");
            a.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            assert_eq!(roundtrip(&mut a, b"hello").expect("echo"), b"hello");
            a.shutdown(Shutdown::Both).expect("closes");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&proxy.shared).conns.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "ended connections are forgotten"
            );
            thread::sleep(Duration::from_millis(10));
        }
        proxy.drop_all();
        assert_eq!(proxy.faults(), 0, "nothing was dropped: all had ended");
    }

    fn roundtrip(stream: &mut TcpStream, data: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(data)?;
        let mut back = vec![0u8; data.len()];
        stream.read_exact(&mut back)?;
        Ok(back)
    }

    #[test]
    fn it_passes_then_drops_and_loses_a_reply_when_told() {
        let proxy = FaultProxy::start(echo_server()).expect("starts");
        let mut a = TcpStream::connect(proxy.addr()).expect("connects");
        a.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        assert_eq!(roundtrip(&mut a, b"hello").expect("echo"), b"hello");
        proxy.drop_all();
        assert!(roundtrip(&mut a, b"again").is_err(), "dropped");
        assert_eq!(proxy.faults(), 1);

        let mut b = TcpStream::connect(proxy.addr()).expect("connects");
        b.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        assert_eq!(roundtrip(&mut b, b"one").expect("echo"), b"one");
        proxy.lose_reply_to(b"COMMIT");
        assert!(roundtrip(&mut b, b"COMMIT").is_err(), "the reply is lost");

        let mut c = TcpStream::connect(proxy.addr()).expect("connects");
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        proxy.black_hole();
        assert!(roundtrip(&mut c, b"anyone").is_err(), "nothing answers");
        proxy.pass();
        assert_eq!(proxy.accepted(), 3);
    }

    #[test]
    fn it_black_holes_everything_from_the_moment_a_trap_fires_when_told() {
        let proxy = FaultProxy::start(echo_server()).expect("starts");
        proxy.lose_reply_to(b"COMMIT");
        proxy.then_black_hole();
        let mut a = TcpStream::connect(proxy.addr()).expect("connects");
        a.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        assert_eq!(roundtrip(&mut a, b"first").expect("echo"), b"first");
        assert!(roundtrip(&mut a, b"COMMIT").is_err(), "the reply is lost");
        let mut b = TcpStream::connect(proxy.addr()).expect("connects");
        b.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        assert!(roundtrip(&mut b, b"after").is_err(), "nothing answers");
        proxy.pass();
        let mut c = TcpStream::connect(proxy.addr()).expect("connects");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        assert_eq!(roundtrip(&mut c, b"back").expect("echo"), b"back");
    }
}
