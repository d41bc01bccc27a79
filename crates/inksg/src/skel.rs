//! The libbpf skeletons generated from `bpf/sg/*.bpf.c` by build.rs (for their types: the
//! layouts shared with the eBPF programs) and the compiled objects.
#![allow(clippy::all, missing_docs, dead_code, non_camel_case_types)]

pub mod sg {
    include!(concat!(env!("OUT_DIR"), "/sg.skel.rs"));
}
pub mod worker {
    include!(concat!(env!("OUT_DIR"), "/sg_worker.skel.rs"));
}
pub mod argmax {
    include!(concat!(env!("OUT_DIR"), "/sg_argmax.skel.rs"));
}

/// The gather/scatter object (`bpf/sg/sg.bpf.c`).
pub const SG_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sg.bpf.o"));
/// The XDP worker (`bpf/sg/sg_worker.bpf.c`).
pub const WORKER_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sg_worker.bpf.o"));
/// The example aggregation program (`bpf/sg/sg_argmax.bpf.c`).
pub const ARGMAX_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sg_argmax.bpf.o"));
