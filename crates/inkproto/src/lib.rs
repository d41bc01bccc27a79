//! The memcached protocol, shared by everything in inkcache: the kernel cache's control plane and
//! tests, the bench, the server and scatter-gather.
//!
//! - [`udp`]: the 8-byte UDP frame header and reassembly of multi-datagram replies.
//! - [`client`]: requests as a client writes them and responses as a client reads them.
//! - [`request`]: the server side: an incremental zero-copy request parser (text and meta).
//! - [`meta`]: meta command flags as memcached checks them; base64 keys.
//! - [`num`]: numbers in tokens, parsed exactly as memcached parses them.
//! - [`response`]: the server side: composing responses.
//! - [`binary`]: the binary protocol (header, opcodes, status codes, compose and split).
//!
//! `doc/protocol.txt` of memcached is the contract; names follow it.

pub mod binary;
pub mod client;
pub mod meta;
pub mod num;
pub mod request;
pub mod response;
pub mod udp;

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX_LEN: usize = 250;

/// True if `key` is a key memcached's text protocol accepts: 1..=250 bytes, no control
/// characters or spaces.
pub fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= KEY_MAX_LEN && key.iter().all(|&b| b > b' ' && b != 0x7f)
}
