//! inkcache's control plane: loads the eBPF programs, attaches them to interfaces, pins everything
//! under `/sys/fs/bpf/inkcache/<iface>/` so the data path outlives the CLI, and reads it back for
//! `stats`, `status` and `detach`.

pub mod abi;
pub mod attach;
pub mod coop;
pub mod error;
pub mod layout;
pub mod pins;
pub mod skel;
pub mod stats;
pub mod sys;

pub use attach::{attach, detach, AttachOpts, XdpMode};
pub use error::Error;
pub use layout::Layout;
pub use pins::AttachInfo;
pub use stats::Stats;

/// The key hash the eBPF programs use (`key_hash` in `bpf/proto.h`): eight little-endian bytes at
/// a time (the last word zero-padded), a multiply-xorshift mix per word, seeded with the length.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0x9E3779B97F4A7C15 ^ key.len() as u64;
    for chunk in key.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h ^= u64::from_le_bytes(w);
        h = h.wrapping_mul(0xff51afd7ed558ccd);
        h ^= h >> 33;
    }
    h = h.wrapping_mul(0xc4ceb9fe1a85ec53);
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::key_hash;

    #[test]
    fn hash_depends_on_every_byte_and_the_length() {
        assert_ne!(key_hash(b"a"), key_hash(b"a\0"));
        assert_ne!(key_hash(b"12345678"), key_hash(b"12345679"));
        assert_ne!(key_hash(b"123456789"), key_hash(b"123456788"));
        assert_eq!(key_hash(b"foo"), key_hash(b"foo"));
    }
}
