//! The server side of the text and meta protocols: composing responses into a write buffer.
//!
//! Every function appends one complete response (or one part, such as a `VALUE` block) to `out`.

use std::io::Write;

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + data.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, u64::from(flags));
    out.push(b' ');
    push_u64(out, data.len() as u64);
    if let Some(c) = cas {
        out.push(b' ');
        push_u64(out, c);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal digits of `v` without allocating.
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// A fixed one-line answer (`STORED`, `END`, ...): appends `line` and `\r\n`.
pub fn line(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"END\r\n");
}
pub fn stored(out: &mut Vec<u8>) {
    out.extend_from_slice(b"STORED\r\n");
}
pub fn not_stored(out: &mut Vec<u8>) {
    out.extend_from_slice(b"NOT_STORED\r\n");
}
pub fn exists(out: &mut Vec<u8>) {
    out.extend_from_slice(b"EXISTS\r\n");
}
pub fn not_found(out: &mut Vec<u8>) {
    out.extend_from_slice(b"NOT_FOUND\r\n");
}
pub fn deleted(out: &mut Vec<u8>) {
    out.extend_from_slice(b"DELETED\r\n");
}
pub fn touched(out: &mut Vec<u8>) {
    out.extend_from_slice(b"TOUCHED\r\n");
}
pub fn ok(out: &mut Vec<u8>) {
    out.extend_from_slice(b"OK\r\n");
}
/// The result of `incr`/`decr`.
pub fn number(out: &mut Vec<u8>, v: u64) {
    push_u64(out, v);
    out.extend_from_slice(b"\r\n");
}
pub fn version(out: &mut Vec<u8>, v: &str) {
    out.extend_from_slice(b"VERSION ");
    line(out, v);
}
/// `STAT <name> <value>\r\n`
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "STAT {name} {value}\r\n");
}
pub fn error(out: &mut Vec<u8>) {
    out.extend_from_slice(b"ERROR\r\n");
}
pub fn client_error(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"CLIENT_ERROR ");
    line(out, msg);
}
pub fn server_error(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    line(out, msg);
}

/// A meta response header: `<code>[ <flag>]*\r\n` (flags given already formatted, e.g. `f5`).
/// For `VA`, pass the value length in `size` and append the data with [`meta_data`].
pub fn meta(out: &mut Vec<u8>, code: &str, size: Option<usize>, flags: &[u8]) {
    out.extend_from_slice(code.as_bytes());
    if let Some(s) = size {
        out.push(b' ');
        push_u64(out, s as u64);
    }
    if !flags.is_empty() {
        out.push(b' ');
        out.extend_from_slice(flags);
    }
    out.extend_from_slice(b"\r\n");
}

/// The data block of a meta `VA` response.
pub fn meta_data(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{parse_response, Item, Response};

    #[test]
    fn compose_parses_back() {
        let mut out = Vec::new();
        value(&mut out, b"k", 7, b"abc", Some(12));
        value(&mut out, b"k2", 0, b"", None);
        end(&mut out);
        let (r, n) = parse_response(&out).unwrap().unwrap();
        assert_eq!(n, out.len());
        assert_eq!(
            r,
            Response::Values(vec![
                Item {
                    key: b"k".to_vec(),
                    flags: 7,
                    cas: Some(12),
                    data: b"abc".to_vec()
                },
                Item {
                    key: b"k2".to_vec(),
                    flags: 0,
                    cas: None,
                    data: vec![]
                },
            ])
        );
        let mut out = Vec::new();
        number(&mut out, u64::MAX);
        assert_eq!(out, b"18446744073709551615\r\n");
        let mut out = Vec::new();
        meta(&mut out, "VA", Some(2), b"f5 t-1");
        meta_data(&mut out, b"hi");
        assert_eq!(out, b"VA 2 f5 t-1\r\nhi\r\n");
    }
}
