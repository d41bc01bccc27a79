//! The memcached binary protocol: the 24-byte header both ways, opcodes, status codes, and
//! composing requests (clients, tests) and responses (the server).
//!
//! memcached 1.6 deprecates this protocol but still serves it, and clients still use it
//! (pylibmc `binary=True`, libmemcached's `MEMCACHED_BEHAVIOR_BINARY_PROTOCOL`, spymemcached).
//! A connection speaks it when its first byte is [`REQ_MAGIC`]; a UDP datagram when the first
//! byte after its 8-byte frame header is. All integers are big-endian.
//!
//! Header (request / response): magic, opcode, key length (u16), extras length (u8), data type
//! (u8), vbucket / status (u16), total body length (u32: extras + key + value), opaque (u32,
//! echoed), CAS (u64). The body follows: extras, key, value.

/// First byte of a request.
pub const REQ_MAGIC: u8 = 0x80;
/// First byte of a response.
pub const RES_MAGIC: u8 = 0x81;
/// Length of the header.
pub const HEADER_LEN: usize = 24;

/// Opcodes (`protocol_binary_command`). The `..Q` ("quiet") variants answer only on errors
/// (`GETQ`/`GETKQ`/`GATQ`/`GATKQ`: only on hits).
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;

    /// The loud opcode of a quiet one, and whether it was quiet.
    pub fn loud(op: u8) -> (u8, bool) {
        let loud = match op {
            SETQ => SET,
            ADDQ => ADD,
            REPLACEQ => REPLACE,
            DELETEQ => DELETE,
            INCREMENTQ => INCREMENT,
            DECREMENTQ => DECREMENT,
            QUITQ => QUIT,
            FLUSHQ => FLUSH,
            APPENDQ => APPEND,
            PREPENDQ => PREPEND,
            GETQ => GET,
            GETKQ => GETK,
            GATQ => GAT,
            GATKQ => GATK,
            _ => return (op, false),
        };
        (loud, true)
    }
}

/// Response status codes (`protocol_binary_response_status`).
pub mod status {
    pub const OK: u16 = 0x00;
    pub const KEY_ENOENT: u16 = 0x01;
    pub const KEY_EEXISTS: u16 = 0x02;
    pub const E2BIG: u16 = 0x03;
    pub const EINVAL: u16 = 0x04;
    pub const NOT_STORED: u16 = 0x05;
    pub const DELTA_BADVAL: u16 = 0x06;
    pub const AUTH_ERROR: u16 = 0x20;
    pub const AUTH_CONTINUE: u16 = 0x21;
    pub const UNKNOWN_COMMAND: u16 = 0x81;
    pub const ENOMEM: u16 = 0x82;

    /// The text memcached puts in the body of an error response with this status.
    pub fn message(s: u16) -> &'static str {
        match s {
            ENOMEM => "Out of memory",
            UNKNOWN_COMMAND => "Unknown command",
            KEY_ENOENT => "Not found",
            EINVAL => "Invalid arguments",
            KEY_EEXISTS => "Data exists for key.",
            E2BIG => "Too large.",
            DELTA_BADVAL => "Non-numeric server-side value for incr or decr",
            NOT_STORED => "Not stored.",
            AUTH_ERROR => "Auth failure.",
            _ => "UNHANDLED ERROR",
        }
    }
}

/// A request or response header, in host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub keylen: u16,
    pub extlen: u8,
    pub datatype: u8,
    /// vbucket id in a request, status in a response.
    pub status: u16,
    pub bodylen: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Decodes the first [`HEADER_LEN`] bytes of `b`; None if fewer are there.
    pub fn decode(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
        Some(Header {
            magic: b[0],
            opcode: b[1],
            keylen: u16_at(2),
            extlen: b[4],
            datatype: b[5],
            status: u16_at(6),
            bodylen: u32_at(8),
            opaque: u32_at(12),
            cas: u64::from_be_bytes(b[16..24].try_into().unwrap()),
        })
    }

    /// Appends the encoded header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.keylen.to_be_bytes());
        out.push(self.extlen);
        out.push(self.datatype);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&self.bodylen.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Bytes of the value: body minus extras and key (0 if the lengths do not add up).
    pub fn value_len(&self) -> usize {
        (self.bodylen as usize).saturating_sub(self.keylen as usize + self.extlen as usize)
    }
}

/// Appends one response: header (magic 0x81, raw data type) then extras, key and value.
#[allow(clippy::too_many_arguments)]
pub fn response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    Header {
        magic: RES_MAGIC,
        opcode,
        keylen: key.len() as u16,
        extlen: extras.len() as u8,
        datatype: 0,
        status,
        bodylen: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .encode(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends an error response whose body is memcached's text for `status`.
pub fn error(out: &mut Vec<u8>, opcode: u8, status: u16, opaque: u32) {
    response(
        out,
        opcode,
        status,
        opaque,
        0,
        &[],
        &[],
        status::message(status).as_bytes(),
    );
}

/// Appends one request (the client side).
pub fn request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    Header {
        magic: REQ_MAGIC,
        opcode,
        keylen: key.len() as u16,
        extlen: extras.len() as u8,
        datatype: 0,
        status: 0,
        bodylen: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .encode(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// One complete packet (request or response) split into its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// The packet at the start of `buf` and its length; None until all of it is there, or if its
/// lengths are inconsistent (extras + key longer than the body).
pub fn packet(buf: &[u8]) -> Option<(Packet<'_>, usize)> {
    let h = Header::decode(buf)?;
    let total = HEADER_LEN + h.bodylen as usize;
    let (e, k) = (h.extlen as usize, h.keylen as usize);
    if buf.len() < total || e + k > h.bodylen as usize {
        return None;
    }
    let body = &buf[HEADER_LEN..total];
    Some((
        Packet {
            header: h,
            extras: &body[..e],
            key: &body[e..e + k],
            value: &body[e + k..],
        },
        total,
    ))
}

/// Extras of set/add/replace requests: flags, exptime.
pub fn store_extras(flags: u32, exptime: u32) -> [u8; 8] {
    let mut x = [0u8; 8];
    x[..4].copy_from_slice(&flags.to_be_bytes());
    x[4..].copy_from_slice(&exptime.to_be_bytes());
    x
}

/// Extras of incr/decr requests: delta, initial value, exptime (0xffffffff: no vivify).
pub fn arith_extras(delta: u64, initial: u64, exptime: u32) -> [u8; 20] {
    let mut x = [0u8; 20];
    x[..8].copy_from_slice(&delta.to_be_bytes());
    x[8..16].copy_from_slice(&initial.to_be_bytes());
    x[16..].copy_from_slice(&exptime.to_be_bytes());
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let h = Header {
            magic: REQ_MAGIC,
            opcode: op::SET,
            keylen: 3,
            extlen: 8,
            datatype: 0,
            status: 0,
            bodylen: 16,
            opaque: 0xdead_beef,
            cas: 0x0102_0304_0506_0708,
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(&b[..2], &[0x80, 0x01]);
        assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Header::decode(&b), Some(h));
        assert_eq!(Header::decode(&b[..23]), None);
        assert_eq!(h.value_len(), 5);
    }

    #[test]
    fn packets() {
        let mut b = Vec::new();
        request(&mut b, op::SET, 7, 0, &store_extras(5, 0), b"key", b"value");
        let (p, n) = packet(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!((p.key, p.value), (&b"key"[..], &b"value"[..]));
        assert_eq!(p.extras, &store_extras(5, 0));
        assert_eq!(packet(&b[..b.len() - 1]), None);
        let mut r = Vec::new();
        error(&mut r, op::GET, status::KEY_ENOENT, 9);
        let (p, _) = packet(&r).unwrap();
        assert_eq!(
            (p.header.magic, p.header.status, p.header.opaque, p.value),
            (RES_MAGIC, 1, 9, &b"Not found"[..])
        );
        assert_eq!(op::loud(op::GETKQ), (op::GETK, true));
        assert_eq!(op::loud(op::GET), (op::GET, false));
    }
}
