//! The libbpf skeletons generated from `bpf/*.bpf.c` by build.rs.
#![allow(clippy::all, missing_docs)]

pub mod xdp {
    include!(concat!(env!("OUT_DIR"), "/inkcache_xdp.skel.rs"));
}
pub mod tc {
    include!(concat!(env!("OUT_DIR"), "/inkcache_tc.skel.rs"));
}
pub mod tc_ingress {
    include!(concat!(env!("OUT_DIR"), "/inkcache_tc_ingress.skel.rs"));
}
pub mod sock {
    include!(concat!(env!("OUT_DIR"), "/inkcache_sock.skel.rs"));
}
pub mod pass {
    include!(concat!(env!("OUT_DIR"), "/inkcache_pass.skel.rs"));
}
