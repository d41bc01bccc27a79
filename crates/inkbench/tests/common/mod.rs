//! Test helpers: a real memcached on a free loopback port (killed on drop, panics included) and
//! small UDP proxies that misbehave on purpose.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const MEMCACHED: &str = "/usr/bin/memcached";

/// A memcached with TCP and UDP on the same port; killed when dropped.
pub struct Memcached {
    child: Child,
    pub addr: SocketAddr,
}

/// A port free for both TCP and UDP on `ip` right now, found without listening on it
/// (`testkit::ports`).
pub fn free_port(ip: &str) -> u16 {
    testkit::ports::free_port(ip.parse().expect("an IP address"))
}

impl Memcached {
    pub fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// Starts memcached on `ip` (e.g. "127.0.0.1" or "::1").
    pub fn start_on(ip: &str) -> Self {
        for _ in 0..10 {
            let port = free_port(ip);
            let mut child = Command::new(MEMCACHED)
                .args(["-l", ip, "-p", &port.to_string(), "-U", &port.to_string()])
                .args(["-t", "1", "-m", "64", "-u", "root"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn /usr/bin/memcached");
            let addr: SocketAddr = if ip.contains(':') {
                format!("[{ip}]:{port}").parse().unwrap()
            } else {
                format!("{ip}:{port}").parse().unwrap()
            };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: port taken meanwhile, try another
                }
                // up once it answers, and still running after: a connect alone could reach
                // another listener that took the port while this memcached failed to bind it
                if answers_version(&addr) && matches!(child.try_wait(), Ok(None)) {
                    return Memcached { child, addr };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start memcached");
    }
}

/// Whether a memcached answers `version` at `addr` over TCP.
fn answers_version(addr: &SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = TcpStream::connect_timeout(addr, Duration::from_millis(100)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 64];
    c.write_all(b"version\r\n").is_ok()
        && matches!(c.read(&mut buf), Ok(n) if buf[..n].starts_with(b"VERSION "))
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a [`UdpProxy`] does to the traffic.
#[derive(Clone, Copy, Debug)]
pub enum Misbehave {
    /// Drop every other request (the 2nd, 4th, ...).
    DropEveryOther,
    /// After each of the first `n` replies, also send a datagram with an id nobody used and
    /// a duplicate of the reply (a stale id): 2n stray datagrams in all.
    InjectStrays(u64),
}

/// A UDP proxy in front of a server, for one client socket; stops when dropped.
pub struct UdpProxy {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests seen, requests dropped, stray datagrams injected.
    pub seen: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    pub injected: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl UdpProxy {
    pub fn start(upstream: SocketAddr, mode: Misbehave) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        back.connect(upstream).unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, dropped, injected) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (st, se, dr, inj) = (
            stop.clone(),
            seen.clone(),
            dropped.clone(),
            injected.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut client: Option<SocketAddr> = None;
            let mut buf = vec![0u8; 65536];
            let mut replies = 0u64;
            while !st.load(Ordering::Relaxed) {
                let mut idle = true;
                while let Ok((n, from)) = front.recv_from(&mut buf) {
                    idle = false;
                    client = Some(from);
                    let i = se.fetch_add(1, Ordering::Relaxed);
                    if matches!(mode, Misbehave::DropEveryOther) && i % 2 == 1 {
                        dr.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let _ = back.send(&buf[..n]);
                }
                while let Ok(n) = back.recv(&mut buf) {
                    idle = false;
                    let Some(c) = client else { continue };
                    let _ = front.send_to(&buf[..n], c);
                    if let Misbehave::InjectStrays(k) = mode {
                        if replies < k && n >= 8 {
                            let mut stray = buf[..n].to_vec();
                            stray[0] ^= 0x80; // an id far from any in flight
                            let _ = front.send_to(&stray, c);
                            let _ = front.send_to(&buf[..n], c); // stale duplicate
                            inj.fetch_add(2, Ordering::Relaxed);
                        }
                    }
                    replies += 1;
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        });
        UdpProxy {
            addr,
            stop,
            seen,
            dropped,
            injected,
            thread: Some(thread),
        }
    }
}

impl Drop for UdpProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
