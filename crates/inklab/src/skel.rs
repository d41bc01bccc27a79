//! The libbpf skeleton generated from `bpf/lab/echo.bpf.c` by build.rs: generated code, the one
//! place in this crate allowed to be unsafe.
#![allow(unsafe_code, clippy::all, missing_docs)]

pub mod echo {
    include!(concat!(env!("OUT_DIR"), "/echo.skel.rs"));
}

pub mod pagewalk {
    include!(concat!(env!("OUT_DIR"), "/pagewalk.skel.rs"));
}
