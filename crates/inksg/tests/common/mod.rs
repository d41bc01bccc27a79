//! Shared setup of the scatter-gather tests: namespaces, workers, an attached client side.
#![allow(dead_code)]
use std::{net::SocketAddr, sync::Arc};

use inksg::{topo::Topology, worker::XdpProg, AttachOpts, Sg};

/// Skips (or fails under CI) when not root.
pub fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    testkit::skip("these tests need root");
    false
}

/// `per_ns` workers in each of `nss` namespaces, ports 7000.., in the namespaces' order.
pub fn workers(t: &Topology, per_ns: usize, v6: bool) -> Vec<SocketAddr> {
    let mut out = vec![];
    for i in 0..per_ns {
        for w in &t.workers {
            out.push(SocketAddr::new(w.addr(v6), 7000 + i as u16));
        }
    }
    out
}

/// XDP workers on every worker namespace (ports 7000-7999).
pub fn xdp_workers(t: &Topology) -> Vec<XdpProg> {
    t.workers
        .iter()
        .map(|w| {
            inksg::topo::in_netns(&w.ns, || XdpProg::worker(&w.iface, 7000, 7999))
                .unwrap()
                .unwrap()
        })
        .collect()
}

/// scatter-gather attached to the client's interfaces (call inside the client namespace).
pub fn attach(t: &Topology) -> Arc<Sg> {
    Arc::new(
        Sg::attach(&AttachOpts {
            ifaces: t.client_ifaces(),
            clients: 4,
            slots_per_client: 64,
            groups: 4,
            ..Default::default()
        })
        .expect("attach"),
    )
}

/// The request's data: `n` big-endian u64s `base + i`.
pub fn vec_u64(n: usize, base: u64) -> Vec<u8> {
    (0..n as u64)
        .flat_map(|i| (base + i).to_be_bytes())
        .collect()
}

/// A memcached-protocol server (stock memcached, or `prog`) with TCP and UDP on `port` inside
/// namespace `ns`; killed on drop.
pub struct Memcached {
    child: Option<std::process::Child>,
    pub addr: SocketAddr,
}

impl Memcached {
    pub fn start(ns: &str, ip: std::net::IpAddr, port: u16, prog: &str) -> Memcached {
        let p = port.to_string();
        let child = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, prog, "-u", "root", "-p", &p, "-U", &p, "-t", "1", "-m", "32",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting the server");
        let addr = SocketAddr::new(ip, port);
        let m = Memcached {
            child: Some(child),
            addr,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while inksg::topo::in_netns(ns, || {
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200))
                .is_err()
        })
        .unwrap()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{prog} did not start on {addr}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        m
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One text-protocol exchange over TCP (call inside a namespace that reaches `addr`): sends
/// `req`, reads until the reply ends with `end`.
pub fn tcp_exchange(addr: SocketAddr, req: &[u8], end: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    s.write_all(req).unwrap();
    let mut out = vec![];
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        out.extend_from_slice(&buf[..n]);
    }
    out
}
