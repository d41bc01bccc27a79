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
/// inkbench's XDP echo floor (`bpf/inkbench_echo.bpf.c`), built here with every other program.
pub mod echo {
    include!(concat!(env!("OUT_DIR"), "/inkbench_echo.skel.rs"));
}
/// Cooperative mode's batch program (`bpf/inkcache_coop.bpf.c`).
pub mod coop {
    include!(concat!(env!("OUT_DIR"), "/inkcache_coop.skel.rs"));
}
pub mod pass {
    include!(concat!(env!("OUT_DIR"), "/inkcache_pass.skel.rs"));
}
