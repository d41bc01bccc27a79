//! memcached's UDP framing: every datagram starts with 8 bytes, big-endian u16 each:
//! request id, sequence number, total datagrams in this message, reserved (0).

/// Size of the frame header that precedes every UDP payload.
pub const HEADER_LEN: usize = 8;
/// Largest datagram memcached sends (header included).
pub const MAX_DATAGRAM: usize = 1400;
/// Largest payload per datagram.
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - HEADER_LEN;

/// The frame header of one datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    pub request_id: u16,
    pub seq: u16,
    pub total: u16,
    pub reserved: u16,
}

impl FrameHeader {
    /// Header of a request that fits one datagram.
    pub fn request(request_id: u16) -> Self {
        FrameHeader {
            request_id,
            seq: 0,
            total: 1,
            reserved: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.request_id.to_be_bytes());
        b[2..4].copy_from_slice(&self.seq.to_be_bytes());
        b[4..6].copy_from_slice(&self.total.to_be_bytes());
        b[6..8].copy_from_slice(&self.reserved.to_be_bytes());
        b
    }

    /// Decodes the header at the start of `datagram`; `None` if it is shorter than 8 bytes.
    pub fn decode(datagram: &[u8]) -> Option<Self> {
        if datagram.len() < HEADER_LEN {
            return None;
        }
        let u = |i: usize| u16::from_be_bytes([datagram[i], datagram[i + 1]]);
        Some(FrameHeader {
            request_id: u(0),
            seq: u(2),
            total: u(4),
            reserved: u(6),
        })
    }
}

/// Frames `payload` as a one-datagram request.
pub fn frame_request(request_id: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&FrameHeader::request(request_id).encode());
    v.extend_from_slice(payload);
    v
}

/// Cuts a reply payload into datagrams the way memcached does: at most [`MAX_PAYLOAD`] bytes each,
/// sequence numbers from 0, `total` set on every datagram.
pub fn frame_reply(request_id: u16, payload: &[u8]) -> Vec<Vec<u8>> {
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![&[][..]]
    } else {
        payload.chunks(MAX_PAYLOAD).collect()
    };
    let total = chunks.len() as u16;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = Vec::with_capacity(HEADER_LEN + c.len());
            v.extend_from_slice(
                &FrameHeader {
                    request_id,
                    seq: i as u16,
                    total,
                    reserved: 0,
                }
                .encode(),
            );
            v.extend_from_slice(c);
            v
        })
        .collect()
}

/// Reassembles the datagrams of one reply message (same request id, any arrival order).
///
/// Feed datagrams with [`Reassembly::push`]; once every sequence number in `0..total` has arrived,
/// [`Reassembly::finish`] returns the payload in order.
#[derive(Debug, Default)]
pub struct Reassembly {
    total: u16,
    parts: Vec<Option<Vec<u8>>>,
    have: usize,
}

impl Reassembly {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one datagram; returns false (and ignores it) when it does not belong to this message
    /// (a `total` different from earlier datagrams, or a sequence number out of range).
    pub fn push(&mut self, hdr: FrameHeader, data: &[u8]) -> bool {
        if hdr.total == 0 || hdr.seq >= hdr.total {
            return false;
        }
        if self.parts.is_empty() {
            self.total = hdr.total;
            self.parts = vec![None; hdr.total as usize];
        } else if hdr.total != self.total {
            return false;
        }
        let slot = &mut self.parts[hdr.seq as usize];
        if slot.is_none() {
            *slot = Some(data.to_vec());
            self.have += 1;
        }
        true
    }

    pub fn is_complete(&self) -> bool {
        !self.parts.is_empty() && self.have == self.parts.len()
    }

    /// The payload in sequence order, if complete.
    pub fn finish(self) -> Option<Vec<u8>> {
        if !self.is_complete() {
            return None;
        }
        Some(self.parts.into_iter().flatten().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let h = FrameHeader {
            request_id: 0xbeef,
            seq: 3,
            total: 7,
            reserved: 0,
        };
        assert_eq!(FrameHeader::decode(&h.encode()), Some(h));
        assert_eq!(FrameHeader::decode(&[0u8; 7]), None);
        assert_eq!(
            &frame_request(0x0102, b"get a\r\n")[..8],
            &[1, 2, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn reply_framing_reassembles() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let dgrams = frame_reply(9, &payload);
        assert_eq!(dgrams.len(), 4);
        assert!(dgrams.iter().all(|d| d.len() <= MAX_DATAGRAM));
        let mut r = Reassembly::new();
        for d in dgrams.iter().rev() {
            let h = FrameHeader::decode(d).unwrap();
            assert_eq!(h.total, 4);
            assert!(r.push(h, &d[8..]));
        }
        assert_eq!(r.finish().unwrap(), payload);
    }

    #[test]
    fn reassembly_rejects_inconsistent_parts() {
        let mut r = Reassembly::new();
        assert!(r.push(
            FrameHeader {
                request_id: 1,
                seq: 0,
                total: 2,
                reserved: 0
            },
            b"a"
        ));
        assert!(!r.push(
            FrameHeader {
                request_id: 1,
                seq: 1,
                total: 3,
                reserved: 0
            },
            b"b"
        ));
        assert!(!r.push(
            FrameHeader {
                request_id: 1,
                seq: 5,
                total: 2,
                reserved: 0
            },
            b"b"
        ));
        assert!(!r.is_complete());
    }
}
