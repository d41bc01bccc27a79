//! The libbpf skeletons generated from `bpf/*.bpf.c` by build.rs.
#![allow(clippy::all, missing_docs)]

pub mod xdp {
    include!(concat!(env!("OUT_DIR"), "/inkcache_xdp.skel.rs"));
}
/// The server's answers (cgroup_skb egress).
pub mod answers {
    include!(concat!(env!("OUT_DIR"), "/inkcache_answers.skel.rs"));
}
/// The requests the server receives (TCP stream verdict, UDP cgroup_skb ingress).
pub mod requests {
    include!(concat!(env!("OUT_DIR"), "/inkcache_requests.skel.rs"));
}
/// Socket iterators run at attach (connections and server sockets that already exist).
pub mod iter {
    include!(concat!(env!("OUT_DIR"), "/inkcache_iter.skel.rs"));
}
pub mod tc_ingress {
    include!(concat!(env!("OUT_DIR"), "/inkcache_tc_ingress.skel.rs"));
}
pub mod sock {
    include!(concat!(env!("OUT_DIR"), "/inkcache_sock.skel.rs"));
}
/// Cooperative mode's batch program (`bpf/inkcache_coop.bpf.c`).
pub mod coop {
    include!(concat!(env!("OUT_DIR"), "/inkcache_coop.skel.rs"));
}
pub mod pass {
    include!(concat!(env!("OUT_DIR"), "/inkcache_pass.skel.rs"));
}
/// Measurement only, never attached: the hit path's primitives (`bpf/inkcache_prims.bpf.c`,
/// timed by tests/unit/cost.rs).
pub mod prims {
    include!(concat!(env!("OUT_DIR"), "/inkcache_prims.skel.rs"));
}
/// The libxdp-format XDP dispatcher (`bpf/inkcache_dispatcher.bpf.c`).
pub mod dispatcher {
    include!(concat!(env!("OUT_DIR"), "/inkcache_dispatcher.skel.rs"));
}
