//! inkcache's control plane: loads the eBPF programs, attaches them to interfaces, pins everything
//! under `/sys/fs/bpf/inkcache/<iface>/` so the data path outlives the CLI, and reads it back for
//! `stats`, `status` and `detach`.

pub mod attach;
pub mod error;
pub mod pins;
pub mod skel;
pub mod stats;
pub mod sys;

pub use attach::{attach, detach, AttachOpts, XdpMode};
pub use error::Error;
pub use pins::AttachInfo;
pub use stats::Stats;

/// 64-bit FNV-1a: the hash the eBPF programs use for keys (see `bpf/proto.h`).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_known_values() {
        assert_eq!(super::key_hash(b""), 0xcbf29ce484222325);
        assert_eq!(super::key_hash(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(super::key_hash(b"foobar"), 0x85944171f73967e8);
    }
}
