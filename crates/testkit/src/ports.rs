//! Free ports for the servers that tests start, found without ever listening on them.
//!
//! A port is tried by binding a UDP and a TCP socket to it, and the TCP socket is never put in the
//! listening state. A listening socket, even one closed a moment later, is inherited by every child
//! that another test thread spawns in that instant, and lives on in the child until its exec
//! closes it. Meanwhile it accepts connections: a readiness probe for the server about to take the
//! port is accepted by it and reports that server ready, while the server itself fails to bind
//! the port and exits. The test's next connect is then refused, or its connection reset when the
//! child's exec closes the stray listener. (Seen once in `make test`, and in about one run of
//! twenty of inkcached's robustness tests by hand; `free_port_is_never_a_listener` below
//! reproduces it in a second.)

use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, SockaddrStorage};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// A port on `ip` free for both TCP and UDP right now (an ephemeral one, picked by the kernel).
pub fn free_port(ip: IpAddr) -> u16 {
    loop {
        let u = UdpSocket::bind((ip, 0)).expect("binding a UDP socket to a kernel-picked port");
        let port = u.local_addr().expect("a bound socket's address").port();
        if tcp_bindable(ip, port) {
            return port;
        }
    }
}

/// Whether a TCP socket can bind `ip`:`port` now. The socket is bound, never listening, and closed
/// at once (close-on-exec meanwhile).
pub fn tcp_bindable(ip: IpAddr, port: u16) -> bool {
    let family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let Ok(fd) = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) else {
        return false;
    };
    let addr = SockaddrStorage::from(SocketAddr::new(ip, port));
    bind(fd.as_raw_fd(), &addr).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::process::Command;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// Connects to every port `free_port` returns while another thread spawns children without
    /// pause: nothing may accept. With a listening check (`TcpListener::bind`) instead of
    /// `tcp_bindable`, hundreds of these connects a second were accepted by the check's listener
    /// living on in a child.
    #[test]
    fn free_port_is_never_a_listener() {
        let stop = Arc::new(AtomicBool::new(false));
        let spawner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let _ = Command::new("/bin/true").status();
                    n += 1;
                }
                n
            })
        };
        let t = Instant::now();
        let (mut tries, mut accepted) = (0u32, 0u32);
        while t.elapsed() < Duration::from_secs(1) {
            let port = free_port(LO);
            tries += 1;
            // a connect to a port nothing listens on can meet itself (TCP's simultaneous open)
            if TcpStream::connect((LO, port))
                .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
            {
                accepted += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let spawned = spawner.join().unwrap();
        assert!(spawned > 0 && tries > 0);
        assert_eq!(
            accepted, 0,
            "{accepted} of {tries} connects accepted ({spawned} spawns)"
        );
    }

    #[test]
    fn a_port_in_use_is_not_bindable() {
        let l = TcpListener::bind((LO, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(!tcp_bindable(LO, port));
        drop(l);
        assert!(tcp_bindable(LO, port));
        let p = free_port(LO);
        assert!(UdpSocket::bind((LO, p)).is_ok() && tcp_bindable(LO, p));
    }
}
