//! Shared setup of the scatter-gather tests: namespaces, workers, an attached client side.
#![allow(dead_code)]
use std::{net::SocketAddr, sync::Arc};

use inksg::{topo::Topology, worker::XdpProg, AttachOpts, Sg};

/// Skips (or fails under CI) when not root.
pub fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("these tests need root");
    }
    eprintln!("SKIP: not root");
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
