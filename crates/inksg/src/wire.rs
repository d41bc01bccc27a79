//! The datagrams a client sends: `struct sg_scatter_hdr`, a section table, the sections
//! (`bpf/sg/sg_common.h`; big-endian on the wire).
use anyhow::{bail, Result};

use crate::skel::sg::types;

pub const MAGIC_SCATTER: u32 = types::sg_magic::SG_MAGIC_SCATTER.0;
pub const MAGIC_REQ: u32 = types::sg_magic::SG_MAGIC_REQ.0;
pub const MAGIC_ANS: u32 = types::sg_magic::SG_MAGIC_ANS.0;
pub const F_INIT: u8 = types::sg_flags::SG_F_INIT.0 as u8;
pub const F_SECTIONS: u8 = types::sg_flags::SG_F_SECTIONS.0 as u8;
pub const F_PATCH_WORKER: u8 = types::sg_flags::SG_F_PATCH_WORKER.0 as u8;
pub const F_NO_WAKEUP: u8 = types::sg_flags::SG_F_NO_WAKEUP.0 as u8;
pub const HDR: usize = std::mem::size_of::<types::sg_scatter_hdr>();
pub const SECTION: usize = 6;
pub const REQ_HDR: usize = std::mem::size_of::<types::sg_req_hdr>();
pub const ANS_HDR: usize = std::mem::size_of::<types::sg_ans_hdr>();

/// The request-wide fields of `struct sg_scatter_hdr`.
pub struct Header {
    pub req_id: u32,
    pub group: u16,
    pub need: u16,
    pub timeout_us: u32,
    pub flags: u8,
    pub reducer: u8,
    pub vec_len: u16,
    pub asked: u16,
    pub elem: u16,
}

/// What the workers get.
pub enum Body {
    /// The same bytes for every worker (its index patched in at offset 8).
    Broadcast(Vec<u8>),
    /// Each worker its own bytes.
    Sections(Vec<(u16, Vec<u8>)>),
}

/// `struct sg_req_hdr` (worker index 0) followed by `payload`.
pub fn req_section(req_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(REQ_HDR + payload.len());
    s.extend_from_slice(&MAGIC_REQ.to_be_bytes());
    s.extend_from_slice(&req_id.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(payload);
    s
}

fn put_header(out: &mut Vec<u8>, h: &Header, first: u16, count: u16, flags: u8) {
    out.extend_from_slice(&MAGIC_SCATTER.to_be_bytes());
    out.extend_from_slice(&h.req_id.to_be_bytes());
    out.extend_from_slice(&h.group.to_be_bytes());
    out.extend_from_slice(&first.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&h.need.to_be_bytes());
    out.extend_from_slice(&h.timeout_us.to_be_bytes());
    out.push(flags);
    out.push(h.reducer);
    out.extend_from_slice(&h.vec_len.to_be_bytes());
    out.extend_from_slice(&h.asked.to_be_bytes());
    out.extend_from_slice(&h.elem.to_be_bytes());
}

/// Builds the request's datagrams into `bufs` (reused between calls); returns how many. Each
/// serves at most `batch` workers and is at most `max` bytes; the first arms the request.
pub fn datagrams(
    h: &Header,
    workers: &[u16],
    body: Body,
    max: usize,
    batch: usize,
    bufs: &mut Vec<Vec<u8>>,
) -> Result<usize> {
    let mut n = 0;
    let mut next = |bufs: &mut Vec<Vec<u8>>| -> usize {
        if bufs.len() <= n {
            bufs.push(Vec::with_capacity(max));
        }
        bufs[n].clear();
        n += 1;
        n - 1
    };
    match body {
        Body::Broadcast(section) => {
            if HDR + SECTION + section.len() > max {
                bail!(
                    "payload of {} bytes does not fit a datagram of {max} bytes",
                    section.len()
                );
            }
            // Broadcast datagrams serve consecutive workers.
            let mut i = 0;
            while i < workers.len() {
                let first = workers[i];
                let mut count = 1;
                while i + count < workers.len()
                    && count < batch
                    && workers[i + count] == first + count as u16
                {
                    count += 1;
                }
                let b = next(bufs);
                let mut flags = h.flags | F_PATCH_WORKER;
                if b == 0 {
                    flags |= F_INIT;
                }
                let out = &mut bufs[b];
                put_header(out, h, first, count as u16, flags);
                let off = (HDR + SECTION) as u16;
                out.extend_from_slice(&0u16.to_be_bytes());
                out.extend_from_slice(&off.to_be_bytes());
                out.extend_from_slice(&(section.len() as u16).to_be_bytes());
                out.extend_from_slice(&section);
                i += count;
            }
        }
        Body::Sections(sections) => {
            let mut i = 0;
            while i < sections.len() {
                // as many sections as fit
                let mut count = 0;
                let mut size = HDR;
                while i + count < sections.len() && count < batch {
                    let s = SECTION + sections[i + count].1.len();
                    if size + s > max {
                        break;
                    }
                    size += s;
                    count += 1;
                }
                if count == 0 {
                    bail!(
                        "the request for worker {} ({} bytes) does not fit a datagram of {max} bytes",
                        sections[i].0,
                        sections[i].1.len()
                    );
                }
                let b = next(bufs);
                let mut flags = h.flags | F_SECTIONS;
                if b == 0 {
                    flags |= F_INIT;
                }
                let out = &mut bufs[b];
                put_header(out, h, 0, count as u16, flags);
                let mut off = HDR + SECTION * count;
                for (w, s) in &sections[i..i + count] {
                    out.extend_from_slice(&w.to_be_bytes());
                    out.extend_from_slice(&(off as u16).to_be_bytes());
                    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
                    off += s.len();
                }
                for (_, s) in &sections[i..i + count] {
                    out.extend_from_slice(s);
                }
                i += count;
            }
            let _ = workers;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_the_c_layout() {
        assert_eq!(HDR, 28);
        let h = Header {
            req_id: 7,
            group: 1,
            need: 3,
            timeout_us: 1000,
            flags: 0,
            reducer: 0,
            vec_len: 8,
            asked: 3,
            elem: 8,
        };
        let mut out = vec![];
        put_header(&mut out, &h, 0, 3, F_INIT);
        assert_eq!(out.len(), HDR);
        assert_eq!(REQ_HDR, 12);
        assert_eq!(ANS_HDR, 12);
    }

    #[test]
    fn broadcast_is_split_in_batches_and_only_the_first_arms() {
        let h = Header {
            req_id: 1,
            group: 0,
            need: 300,
            timeout_us: 1,
            flags: 0,
            reducer: 0,
            vec_len: 8,
            asked: 300,
            elem: 8,
        };
        let workers: Vec<u16> = (0..300).collect();
        let mut bufs = vec![];
        let n = datagrams(
            &h,
            &workers,
            Body::Broadcast(req_section(1, &[0; 8])),
            1472,
            128,
            &mut bufs,
        )
        .unwrap();
        assert_eq!(n, 3);
        let count = |b: &[u8]| u16::from_be_bytes([b[12], b[13]]);
        let first = |b: &[u8]| u16::from_be_bytes([b[10], b[11]]);
        assert_eq!(
            (0..3).map(|i| count(&bufs[i])).collect::<Vec<_>>(),
            [128, 128, 44]
        );
        assert_eq!(
            (0..3).map(|i| first(&bufs[i])).collect::<Vec<_>>(),
            [0, 128, 256]
        );
        assert_ne!(bufs[0][20] & F_INIT, 0);
        assert_eq!(bufs[1][20] & F_INIT, 0);
    }

    #[test]
    fn sections_fill_datagrams_and_refuse_what_cannot_fit() {
        let h = Header {
            req_id: 1,
            group: 0,
            need: 1,
            timeout_us: 1,
            flags: 0,
            reducer: 4,
            vec_len: 0,
            asked: 3,
            elem: 0,
        };
        let secs: Vec<(u16, Vec<u8>)> = (0..3).map(|w| (w, vec![b'x'; 600])).collect();
        let mut bufs = vec![];
        let n = datagrams(&h, &[0, 1, 2], Body::Sections(secs), 1472, 128, &mut bufs).unwrap();
        assert_eq!(n, 2);
        assert!(bufs[..n].iter().all(|b| b.len() <= 1472));
        let big = vec![(0u16, vec![0u8; 1500])];
        assert!(datagrams(&h, &[0], Body::Sections(big), 1472, 128, &mut bufs).is_err());
    }
}
