//! Key steering (`--steer`): one worker owns each key.
//!
//! The owner of a request is `first-key hash % workers`, the hash being `xsk_key_hash` in
//! `bpf/xsk.h` (FNV-1a over the token after the command word). For UDP sockets an sk_reuseport
//! program (`bpf/inkcached/inkcached_steer.bpf.c`) picks the owner's socket of the reuseport
//! group; the AF_XDP path picks the owner's socket in the XDP program; in cpumap mode the XDP
//! program also moves the request to the owner's CPU first. [`owner`] is the same function in
//! Rust: workers count the requests they own and those they do not (`steer_owned`,
//! `steer_foreign` in `stats`), which is how the tests check the ownership.
//!
//! The store stays shared and locked per shard, so a multi-key get whose keys have several
//! owners is still answered whole by the worker that got it; steering only makes each shard's
//! lock (and its cache lines) stay with one core, so it is uncontended.

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use socket2::Socket;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};

mod skel {
    #![allow(clippy::all, missing_docs, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/inkcached_steer.skel.rs"));
}

/// `xsk_key_hash` of bpf/xsk.h over a request datagram's payload (after the 8-byte frame
/// header): 0 when it has no key.
pub fn key_hash(req: &[u8]) -> u32 {
    const SCAN: usize = 272;
    let mut h: u32 = 2166136261;
    let (mut state, mut n) = (0, 0);
    for &c in req.iter().take(SCAN) {
        match state {
            0 => {
                if c == b' ' {
                    state = 1;
                } else if c == b'\r' || c == b'\n' {
                    return 0;
                }
            }
            1 => {
                if c == b'\r' || c == b'\n' {
                    return 0;
                }
                if c != b' ' {
                    state = 2;
                    h = (h ^ u32::from(c)).wrapping_mul(16777619);
                    n += 1;
                }
            }
            _ => {
                if c == b' ' || c == b'\r' || c == b'\n' {
                    break;
                }
                h = (h ^ u32::from(c)).wrapping_mul(16777619);
                n += 1;
            }
        }
    }
    if n > 0 {
        h | 1
    } else {
        0
    }
}

/// The worker owning the request (payload after the frame header), None if it has no key.
pub fn owner(req: &[u8], workers: usize) -> Option<usize> {
    match key_hash(req) {
        0 => None,
        h => Some(h as usize % workers),
    }
}

/// Loads the sk_reuseport program and attaches it to the UDP reuseport groups: `groups[g][w]`
/// is worker w's socket of group g (at most one IPv4 and one IPv6 group).
pub fn attach_reuseport(groups: &[Vec<&Socket>], workers: usize) -> Result<()> {
    let mut families = [false; 2];
    // The object lives as long as the process (the programs stay attached to the sockets).
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::InkcachedSteerSkelBuilder::default()
        .open(storage)
        .context("opening the steering program")?;
    open.maps
        .rodata_data
        .as_deref_mut()
        .context("steering object has no rodata")?
        .n_workers = workers as u32;
    let sk = open.load().context("loading the steering program")?;
    let prog_fd = sk.progs.inkcached_steer.as_fd().as_raw_fd();
    for g in groups {
        let Some(first) = g.first() else { continue };
        let fam = match first.local_addr().ok().and_then(|a| a.as_socket()) {
            Some(a) if a.is_ipv6() => 1,
            _ => 0,
        };
        if families[fam] {
            bail!("--steer takes one listen address per IP version");
        }
        families[fam] = true;
        for (w, s) in g.iter().enumerate() {
            let key = ((fam * workers + w) as u32).to_ne_bytes();
            let fd = (s.as_raw_fd() as u64).to_ne_bytes();
            sk.maps
                .workers
                .update(&key, &fd, MapFlags::ANY)
                .context("adding a socket to the steering map")?;
        }
        // SAFETY: setsockopt with an int option value (the program fd) of the size given.
        let r = unsafe {
            libc::setsockopt(
                first.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_REUSEPORT_EBPF,
                (&prog_fd as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .context("attaching the steering program (SO_ATTACH_REUSEPORT_EBPF)");
        }
    }
    // the sockets hold the program; the skeleton's maps stay referenced by it
    std::mem::forget(sk);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_key_decides() {
        assert_eq!(key_hash(b"get foo\r\n"), key_hash(b"get foo bar\r\n"));
        assert_eq!(
            key_hash(b"get  foo\r\n"),
            key_hash(b"set foo 0 0 1\r\nx\r\n")
        );
        assert_ne!(key_hash(b"get foo\r\n"), key_hash(b"get fop\r\n"));
        assert_eq!(key_hash(b"stats\r\n"), 0);
        assert_eq!(key_hash(b"get \r\n"), 0);
        assert_ne!(key_hash(b"get a"), 0);
    }
}
