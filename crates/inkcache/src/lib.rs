//! inkcache's control plane: loads the eBPF programs, attaches them to interfaces, pins everything
//! under `/sys/fs/bpf/inkcache/<iface>/` so the data path outlives the CLI, and reads it back for
//! `stats`, `status` and `detach`.

pub mod abi;
pub mod attach;
pub mod coop;
pub mod error;
pub mod host;
pub mod layout;
pub mod lost;
pub mod metrics;
pub mod ns;
pub mod opts;
pub mod pins;
pub mod reply_write;
pub mod servers;
pub mod skel;
pub mod stats;
pub mod status;
pub mod sys;
pub mod tc;
pub mod top;
pub mod xdp;

pub use attach::{attach, detach, AttachOpts, ReplyWrite, TcMode, XdpAttach, XdpMode};
pub use error::Error;
pub use layout::Layout;
pub use pins::AttachInfo;
pub use stats::Stats;

/// The key hash the eBPF programs use (`key_hash` in `bpf/proto.h`) with the attachment's secret
/// `seed` (random per attach): eight little-endian bytes at a time (the last word zero-padded), a
/// multiply-xorshift mix per word, seeded with the seed and the length.
pub fn key_hash(seed: u64, key: &[u8]) -> u64 {
    let mut h: u64 = 0x9E3779B97F4A7C15 ^ seed ^ key.len() as u64;
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
    fn hash_depends_on_every_byte_the_length_and_the_seed() {
        assert_ne!(key_hash(0, b"a"), key_hash(0, b"a\0"));
        assert_ne!(key_hash(0, b"12345678"), key_hash(0, b"12345679"));
        assert_ne!(key_hash(0, b"123456789"), key_hash(0, b"123456788"));
        assert_eq!(key_hash(7, b"foo"), key_hash(7, b"foo"));
        assert_ne!(key_hash(7, b"foo"), key_hash(8, b"foo"));
    }

    #[test]
    fn library_defaults_are_the_cli_defaults() {
        let o = crate::AttachOpts::default();
        assert!(o.ifaces.is_empty());
        assert_eq!(o.ports, [11211]);
        assert_eq!(
            (o.cache_mb, o.max_age_secs, o.quarantine_ms),
            (64, 60, 1000)
        );
        assert_eq!(
            (o.max_conns, o.pending_entries, o.ttl_hints),
            (4096, 65536, 262144)
        );
        assert_eq!(o.xdp_mode, crate::XdpMode::Auto);
        assert_eq!(o.reply_write, crate::ReplyWrite::Auto);
        assert!(!o.debug_no_invalidation && !o.debug_no_split && !o.debug_quarantine_only);
    }
}
