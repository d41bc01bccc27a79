//! The client side of the text protocol: requests as a client writes them, responses as a client
//! reads them (incrementally, for TCP streams and reassembled UDP messages alike).

use thiserror::Error;

/// One item of a retrieval reply: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub key: Vec<u8>,
    pub flags: u32,
    pub cas: Option<u64>,
    pub data: Vec<u8>,
}

/// A complete response to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// `VALUE ...` items (possibly none) closed by `END`.
    Values(Vec<Item>),
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// Result of `incr`/`decr`.
    Number(u64),
    /// `STAT <name> <value>` lines closed by `END`.
    Stats(Vec<(String, String)>),
    Version(String),
    Error,
    ClientError(String),
    ServerError(String),
    /// A meta response: two-letter code, flags (tokens after the code), and the value for `VA`.
    Meta {
        code: [u8; 2],
        flags: Vec<Vec<u8>>,
        value: Option<Vec<u8>>,
    },
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("malformed response line: {0:?}")]
    BadLine(String),
    #[error("value block not terminated by \\r\\n")]
    BadData,
}

/// The storage commands (`set add replace append prepend cas`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `cas` with the given unique.
    Cas(u64),
}

impl Store {
    pub fn name(&self) -> &'static str {
        match self {
            Store::Set => "set",
            Store::Add => "add",
            Store::Replace => "replace",
            Store::Append => "append",
            Store::Prepend => "prepend",
            Store::Cas(_) => "cas",
        }
    }
}

fn push_keys(out: &mut Vec<u8>, cmd: &str, keys: &[&[u8]]) {
    out.extend_from_slice(cmd.as_bytes());
    for k in keys {
        out.push(b' ');
        out.extend_from_slice(k);
    }
    out.extend_from_slice(b"\r\n");
}

/// `get <key>*\r\n`
pub fn get(out: &mut Vec<u8>, keys: &[&[u8]]) {
    push_keys(out, "get", keys)
}

/// `gets <key>*\r\n`
pub fn gets(out: &mut Vec<u8>, keys: &[&[u8]]) {
    push_keys(out, "gets", keys)
}

/// `<cmd> <key> <flags> <exptime> <bytes>[ <cas>][ noreply]\r\n<data>\r\n`
pub fn store(
    out: &mut Vec<u8>,
    cmd: Store,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    noreply: bool,
) {
    out.extend_from_slice(cmd.name().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.extend_from_slice(format!(" {flags} {exptime} {}", data.len()).as_bytes());
    if let Store::Cas(unique) = cmd {
        out.extend_from_slice(format!(" {unique}").as_bytes());
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Any command of the form `<cmd> <key>[ <arg>][ noreply]\r\n` (`delete`, `incr`, `decr`,
/// `touch`).
pub fn keyed(out: &mut Vec<u8>, cmd: &str, key: &[u8], arg: Option<&str>, noreply: bool) {
    out.extend_from_slice(cmd.as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    if let Some(a) = arg {
        out.push(b' ');
        out.extend_from_slice(a.as_bytes());
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn parse_u<T: std::str::FromStr>(tok: &[u8]) -> Option<T> {
    std::str::from_utf8(tok).ok()?.parse().ok()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Parses one complete response from the start of `buf`.
///
/// Returns `Ok(None)` if `buf` holds only part of a response (read more and call again), or the
/// response and the number of bytes it used.
pub fn parse_response(buf: &[u8]) -> Result<Option<(Response, usize)>, ParseError> {
    let Some(eol) = line_end(buf) else {
        return Ok(None);
    };
    let line = &buf[..eol];
    let mut pos = eol + 2;
    let toks: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let bad = || ParseError::BadLine(text(line));
    let first = *toks.first().ok_or_else(bad)?;
    let simple = |r: Response| Ok(Some((r, pos)));
    match first {
        b"VALUE" | b"END" => {
            let mut items = Vec::new();
            let mut cur = 0usize;
            loop {
                let Some(eol) = line_end(&buf[cur..]) else {
                    return Ok(None);
                };
                let line = &buf[cur..cur + eol];
                if line == b"END" {
                    return Ok(Some((Response::Values(items), cur + eol + 2)));
                }
                let t: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
                if t.len() < 4 || t.len() > 5 || t[0] != b"VALUE" {
                    return Err(ParseError::BadLine(text(line)));
                }
                let bad = || ParseError::BadLine(text(line));
                let flags = parse_u::<u32>(t[2]).ok_or_else(bad)?;
                let len = parse_u::<usize>(t[3]).ok_or_else(bad)?;
                let cas = match t.get(4) {
                    Some(c) => Some(parse_u::<u64>(c).ok_or_else(bad)?),
                    None => None,
                };
                let start = cur + eol + 2;
                if buf.len() < start + len + 2 {
                    return Ok(None);
                }
                if &buf[start + len..start + len + 2] != b"\r\n" {
                    return Err(ParseError::BadData);
                }
                items.push(Item {
                    key: t[1].to_vec(),
                    flags,
                    cas,
                    data: buf[start..start + len].to_vec(),
                });
                cur = start + len + 2;
            }
        }
        b"STAT" => {
            let mut stats = Vec::new();
            let mut cur = 0usize;
            loop {
                let Some(eol) = line_end(&buf[cur..]) else {
                    return Ok(None);
                };
                let line = &buf[cur..cur + eol];
                cur += eol + 2;
                if line == b"END" {
                    return Ok(Some((Response::Stats(stats), cur)));
                }
                let mut it = line.splitn(3, |&b| b == b' ');
                match (it.next(), it.next(), it.next()) {
                    (Some(b"STAT"), Some(n), v) => {
                        stats.push((text(n), v.map(text).unwrap_or_default()))
                    }
                    _ => return Err(ParseError::BadLine(text(line))),
                }
            }
        }
        b"STORED" => simple(Response::Stored),
        b"NOT_STORED" => simple(Response::NotStored),
        b"EXISTS" => simple(Response::Exists),
        b"NOT_FOUND" => simple(Response::NotFound),
        b"DELETED" => simple(Response::Deleted),
        b"TOUCHED" => simple(Response::Touched),
        b"OK" => simple(Response::Ok),
        b"ERROR" => simple(Response::Error),
        b"VERSION" => simple(Response::Version(text(toks.get(1).copied().unwrap_or(b"")))),
        b"CLIENT_ERROR" => simple(Response::ClientError(text(line.get(13..).unwrap_or(b"")))),
        b"SERVER_ERROR" => simple(Response::ServerError(text(line.get(13..).unwrap_or(b"")))),
        _ if first.len() == 2 && first[0].is_ascii_uppercase() && first[1].is_ascii_uppercase() => {
            let code = [first[0], first[1]];
            let mut value = None;
            let mut flags: Vec<Vec<u8>> = toks[1..].iter().map(|t| t.to_vec()).collect();
            if &code == b"VA" {
                let len = toks
                    .get(1)
                    .and_then(|t| parse_u::<usize>(t))
                    .ok_or_else(bad)?;
                flags.remove(0);
                if buf.len() < pos + len + 2 {
                    return Ok(None);
                }
                if &buf[pos + len..pos + len + 2] != b"\r\n" {
                    return Err(ParseError::BadData);
                }
                value = Some(buf[pos..pos + len].to_vec());
                pos += len + 2;
            }
            Ok(Some((Response::Meta { code, flags, value }, pos)))
        }
        _ if first.iter().all(u8::is_ascii_digit) && toks.len() == 1 => {
            simple(Response::Number(parse_u(first).ok_or_else(bad)?))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose() {
        let mut v = Vec::new();
        get(&mut v, &[b"a", b"bb"]);
        store(&mut v, Store::Cas(7), b"k", 3, -1, b"xy", true);
        keyed(&mut v, "incr", b"n", Some("5"), false);
        assert_eq!(
            v,
            b"get a bb\r\ncas k 3 -1 2 7 noreply\r\nxy\r\nincr n 5\r\n"
        );
    }

    #[test]
    fn values_incremental() {
        let full = b"VALUE a 5 3\r\nabc\r\nVALUE bb 0 0 42\r\n\r\nEND\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse_response(&full[..cut]), Ok(None), "cut at {cut}");
        }
        let (r, n) = parse_response(full).unwrap().unwrap();
        assert_eq!(n, full.len());
        assert_eq!(
            r,
            Response::Values(vec![
                Item {
                    key: b"a".to_vec(),
                    flags: 5,
                    cas: None,
                    data: b"abc".to_vec()
                },
                Item {
                    key: b"bb".to_vec(),
                    flags: 0,
                    cas: Some(42),
                    data: vec![]
                },
            ])
        );
    }

    #[test]
    fn simple_and_meta() {
        assert_eq!(
            parse_response(b"STORED\r\nEND"),
            Ok(Some((Response::Stored, 8)))
        );
        assert_eq!(
            parse_response(b"17\r\n"),
            Ok(Some((Response::Number(17), 4)))
        );
        assert_eq!(
            parse_response(b"CLIENT_ERROR bad data chunk\r\n"),
            Ok(Some((Response::ClientError("bad data chunk".into()), 29)))
        );
        let (r, n) = parse_response(b"VA 2 f5 t-1\r\nhi\r\n").unwrap().unwrap();
        assert_eq!(n, 17);
        assert_eq!(
            r,
            Response::Meta {
                code: *b"VA",
                flags: vec![b"f5".to_vec(), b"t-1".to_vec()],
                value: Some(b"hi".to_vec())
            }
        );
        assert!(parse_response(b"VALUE a x 3\r\nabc\r\nEND\r\n").is_err());
        assert_eq!(
            parse_response(b"VALUE a 0 3\r\nabcd\r\nEND\r\n"),
            Err(ParseError::BadData)
        );
    }
}
