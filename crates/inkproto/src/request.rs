//! The server side of the text and meta protocols: an incremental, zero-copy request parser.
//!
//! [`parse_request`] looks at the start of a connection's read buffer and returns either a
//! complete request (borrowing keys and data from the buffer) and the number of bytes it used,
//! `Ok(None)` when more bytes are needed, or a [`ProtoError`] that says exactly what memcached
//! would answer and how to resynchronise (bytes to drop from the buffer, bytes still to swallow
//! from the stream, or close the connection).
//!
//! Token rules follow memcached 1.6 (`proto_text.c`): a line ends at `\n` (an `\r` before it is
//! dropped), tokens are separated by one or more spaces, at most 24 tokens are looked at (get-like
//! commands take any number of keys), numbers are decimal with an optional `+`.

use crate::KEY_MAX_LEN;

/// memcached's default item size limit (`-I 1m`).
pub const DEFAULT_MAX_ITEM: usize = 1024 * 1024;
/// A command line longer than this without a newline closes the connection, unless it is a
/// `get`/`gets` (memcached lets multi-gets grow).
pub const MAX_LINE: usize = 2048;
/// Hard limit for a multi-get line.
pub const MAX_GET_LINE: usize = 4 * 1024 * 1024;
/// memcached's `MAX_TOKENS`, counting the terminating empty token.
const MAX_TOKENS: usize = 24;
/// Per-item overhead memcached counts against the item size limit (header, suffix, CAS).
pub const ITEM_OVERHEAD: usize = 56;

/// The storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The meta commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    Get,
    Set,
    Delete,
    Arith,
    Noop,
    Debug,
}

/// Space-separated keys, iterated lazily from the request line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Keys<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }
    pub fn raw(&self) -> &'a [u8] {
        self.0
    }
}

/// Meta flags: tokens after the key (and after the data length for `ms`). Each token is a flag
/// letter optionally followed by an argument (`T30`, `v`, `Oopaque`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFlags<'a>(&'a [u8]);

impl<'a> MetaFlags<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        self.0
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .map(|t| (t[0], &t[1..]))
    }
    /// True if flag `f` is present.
    pub fn has(&self, f: u8) -> bool {
        self.iter().any(|(c, _)| c == f)
    }
    /// The argument of the first flag `f`, if present.
    pub fn get(&self, f: u8) -> Option<&'a [u8]> {
        self.iter().find(|&(c, _)| c == f).map(|(_, a)| a)
    }
    pub fn raw(&self) -> &'a [u8] {
        self.0
    }
}

/// One parsed request. Slices borrow from the buffer given to [`parse_request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`/`gets` (`cas` true for `gets`).
    Get {
        keys: Keys<'a>,
        cas: bool,
    },
    /// `gat`/`gats <exptime> <key>+`.
    Gat {
        exptime: i64,
        keys: Keys<'a>,
        cas: bool,
    },
    /// `set add replace append prepend cas`; `data` excludes the trailing `\r\n`.
    Store {
        cmd: StoreCmd,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        data: &'a [u8],
        cas: u64,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `incr` (`incr` true) or `decr`.
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    /// `stats [group]`.
    Stats {
        group: Option<&'a [u8]>,
    },
    Version,
    Verbosity {
        noreply: bool,
    },
    Quit,
    /// Meta commands. `key` is as sent (base64 if the `b` flag is present); `data` only for `ms`.
    Meta {
        cmd: MetaCmd,
        key: &'a [u8],
        flags: MetaFlags<'a>,
        data: Option<&'a [u8]>,
    },
}

/// What a mutation touches, for cache coherence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation<'a> {
    /// The request does not change data.
    None,
    /// The request may change these keys (as sent; meta keys with `b` are base64).
    Keys(Vec<&'a [u8]>),
    /// Everything may change (`flush_all`).
    All,
}

impl<'a> Request<'a> {
    /// True if the request's answer is suppressed (`noreply`, or meta `q` which the server
    /// handles per response code).
    pub fn noreply(&self) -> bool {
        match self {
            Request::Store { noreply, .. }
            | Request::Delete { noreply, .. }
            | Request::Arith { noreply, .. }
            | Request::Touch { noreply, .. }
            | Request::FlushAll { noreply, .. }
            | Request::Verbosity { noreply } => *noreply,
            _ => false,
        }
    }

    /// The keys this request may change, or `All` for `flush_all`. `mg` counts as a mutation
    /// when it carries `T` (touch), `N` (autovivify), `E` (set CAS) or `R` (recache) flags.
    pub fn mutated_keys(&self) -> Mutation<'a> {
        match *self {
            Request::Get { .. }
            | Request::Stats { .. }
            | Request::Version
            | Request::Verbosity { .. }
            | Request::Quit => Mutation::None,
            Request::Gat { keys, .. } => Mutation::Keys(keys.iter().collect()),
            Request::Store { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => Mutation::Keys(vec![key]),
            Request::FlushAll { .. } => Mutation::All,
            Request::Meta {
                cmd, key, flags, ..
            } => match cmd {
                MetaCmd::Set | MetaCmd::Delete | MetaCmd::Arith => Mutation::Keys(vec![key]),
                MetaCmd::Get
                    if flags
                        .iter()
                        .any(|(c, _)| matches!(c, b'T' | b'N' | b'E' | b'R')) =>
                {
                    Mutation::Keys(vec![key])
                }
                _ => Mutation::None,
            },
        }
    }

    /// True if the request may change data.
    pub fn is_mutation(&self) -> bool {
        self.mutated_keys() != Mutation::None
    }
}

/// Why a request could not be parsed, with memcached's exact answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `ERROR`: unknown command or wrong number of tokens.
    UnknownCommand,
    /// `CLIENT_ERROR bad command line format`
    BadFormat,
    /// `CLIENT_ERROR bad data chunk`
    BadDataChunk,
    /// `SERVER_ERROR object too large for cache` (the data block is swallowed).
    TooLarge,
    /// `CLIENT_ERROR invalid exptime argument`
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument`
    InvalidDelta,
    /// `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`
    DeleteUsage,
    /// A line too long without a newline: memcached closes the connection.
    LineTooLong,
}

impl ErrorKind {
    /// The line memcached writes, without `\r\n`.
    pub fn message(&self) -> &'static str {
        match self {
            ErrorKind::UnknownCommand => "ERROR",
            ErrorKind::BadFormat => "CLIENT_ERROR bad command line format",
            ErrorKind::BadDataChunk => "CLIENT_ERROR bad data chunk",
            ErrorKind::TooLarge => "SERVER_ERROR object too large for cache",
            ErrorKind::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            ErrorKind::InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            ErrorKind::DeleteUsage => {
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            }
            ErrorKind::LineTooLong => "CLIENT_ERROR line too long",
        }
    }
}

/// A request that cannot be served, and how to get back in step with the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", kind.message())]
pub struct ProtoError {
    pub kind: ErrorKind,
    /// Bytes at the start of the buffer that belong to the bad request: drop them.
    pub consumed: usize,
    /// Bytes still to discard from the stream after `consumed` (the data block of a too-large
    /// `set`); they may not have arrived yet.
    pub swallow: usize,
    /// The request asked for `noreply`: memcached then suppresses the error line too.
    pub noreply: bool,
    /// The connection must be closed (no answer is written).
    pub close: bool,
    /// For a too-large `set`: the key (offsets into the buffer), which memcached unlinks so that
    /// the failed set leaves no stale value behind.
    pub key: Option<(usize, usize)>,
}

impl ProtoError {
    fn new(kind: ErrorKind, consumed: usize) -> Self {
        ProtoError {
            kind,
            consumed,
            swallow: 0,
            noreply: false,
            close: false,
            key: None,
        }
    }
    /// The answer memcached writes, with `\r\n`, or nothing when suppressed by `noreply` or
    /// when the connection is to be closed.
    pub fn reply(&self) -> Option<String> {
        if self.noreply || self.close {
            None
        } else {
            Some(format!("{}\r\n", self.kind.message()))
        }
    }
}

/// Limits the parser enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest item (key + value + overhead) accepted (`-I`).
    pub max_item: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item: DEFAULT_MAX_ITEM,
        }
    }
}

/// Parses one request from the start of `buf` with default limits. See [`parse_request_with`].
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, ProtoError> {
    parse_request_with(buf, &Limits::default())
}

/// memcached's `safe_strtoull`: decimal, optional `+`, no sign otherwise, must fit.
pub fn parse_u64(t: &[u8]) -> Option<u64> {
    let t = t.strip_prefix(b"+").unwrap_or(t);
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in t {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// memcached's `safe_strtol`: decimal with optional sign, must fit an `int32`.
pub fn parse_i32(t: &[u8]) -> Option<i64> {
    let (neg, d) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if d.first() == Some(&b'+') {
        return None;
    }
    let v = parse_u64(d)? as i128;
    let v = if neg { -v } else { v };
    if v < i32::MIN as i128 || v > i32::MAX as i128 {
        return None;
    }
    Some(v as i64)
}

/// memcached's `safe_strtoul` into a 32-bit flags field: accepts anything that fits an unsigned
/// long and keeps the low 32 bits (memcached 1.6 does the same on 64-bit hosts).
fn parse_flags(t: &[u8]) -> Option<u32> {
    parse_u64(t).map(|v| v as u32)
}

struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    /// Number of tokens (all of them, even beyond the array).
    n: usize,
}

fn tokenize(line: &[u8]) -> Tokens<'_> {
    let mut toks: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
    let mut n = 0;
    for t in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if n < MAX_TOKENS {
            toks[n] = t;
        }
        n += 1;
    }
    Tokens { toks, n }
}

/// Offset of `sub` (a subslice of `line`) from the start of `line`.
fn offset_in(line: &[u8], sub: &[u8]) -> usize {
    sub.as_ptr() as usize - line.as_ptr() as usize
}

/// Parses one request from the start of `buf`.
///
/// - `Ok(Some((req, used)))`: a complete request; drop `used` bytes after serving it.
/// - `Ok(None)`: incomplete, read more.
/// - `Err(e)`: write `e.reply()` (if any), drop `e.consumed` bytes, then discard `e.swallow` more
///   bytes of the stream; close if `e.close`.
pub fn parse_request_with<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtoError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE {
            let trimmed = {
                let s = buf.iter().take_while(|&&b| b == b' ').count();
                &buf[s..]
            };
            let is_get = trimmed.starts_with(b"get ") || trimmed.starts_with(b"gets ");
            if !is_get || buf.len() - trimmed.len() > 100 || buf.len() > MAX_GET_LINE {
                let mut e = ProtoError::new(ErrorKind::LineTooLong, buf.len());
                e.close = true;
                return Err(e);
            }
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let used = nl + 1;
    let err = |kind| Err(ProtoError::new(kind, used));
    let t = tokenize(line);
    if t.n == 0 || t.toks[0].len() < 2 {
        return err(ErrorKind::UnknownCommand);
    }
    let cmd = t.toks[0];
    // memcached counts the terminating empty token: its `ntokens` is our `n + 1`.
    let n = t.n;
    let tok = |i: usize| t.toks[i];
    let last_noreply = |k: usize| n == k && tok(k - 1) == b"noreply";
    let ok = |r: Request<'a>| Ok(Some((r, used)));

    if cmd.len() == 2 && cmd[0] == b'm' {
        return parse_meta(buf, line, used, &t, limits);
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => {
            if n < 2 {
                return err(ErrorKind::UnknownCommand);
            }
            let cas = cmd.len() == 4;
            let gat = cmd[1] == b'a';
            let first_key = if gat { 2 } else { 1 };
            let exptime = if gat {
                match parse_i32(tok(1)) {
                    Some(e) => e,
                    None => return err(ErrorKind::InvalidExptime),
                }
            } else {
                0
            };
            let keys_start = if n > first_key && first_key < MAX_TOKENS {
                offset_in(line, tok(first_key))
            } else {
                line.len()
            };
            let keys = Keys(&line[keys_start..]);
            if keys.iter().any(|k| k.len() > KEY_MAX_LEN) {
                return err(ErrorKind::BadFormat);
            }
            if gat {
                ok(Request::Gat { exptime, keys, cas })
            } else {
                ok(Request::Get { keys, cas })
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let is_cas = cmd == b"cas";
            let base = if is_cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = last_noreply(base + 1);
            let bad = |kind| {
                let mut e = ProtoError::new(kind, used);
                e.noreply = noreply;
                Err(e)
            };
            let key = tok(1);
            if key.len() > KEY_MAX_LEN {
                return bad(ErrorKind::BadFormat);
            }
            let (Some(flags), Some(exptime), Some(vlen)) =
                (parse_flags(tok(2)), parse_i32(tok(3)), parse_i32(tok(4)))
            else {
                return bad(ErrorKind::BadFormat);
            };
            let cas = if is_cas {
                match parse_u64(tok(5)) {
                    Some(c) => c,
                    None => return bad(ErrorKind::BadFormat),
                }
            } else {
                0
            };
            if vlen < 0 {
                return bad(ErrorKind::BadFormat);
            }
            let vlen = vlen as usize;
            if vlen + key.len() + ITEM_OVERHEAD > limits.max_item {
                let mut e = ProtoError::new(ErrorKind::TooLarge, used);
                e.noreply = noreply;
                e.swallow = vlen + 2;
                if cmd == b"set" {
                    // memcached unlinks the old item so that a failed set leaves no stale value.
                    let ko = offset_in(buf, key);
                    e.key = Some((ko, ko + key.len()));
                }
                return Err(e);
            }
            if buf.len() < used + vlen + 2 {
                return Ok(None);
            }
            let data = &buf[used..used + vlen];
            if &buf[used + vlen..used + vlen + 2] != b"\r\n" {
                let mut e = ProtoError::new(ErrorKind::BadDataChunk, used + vlen + 2);
                e.noreply = noreply;
                return Err(e);
            }
            let cmd = match cmd {
                b"set" => StoreCmd::Set,
                b"add" => StoreCmd::Add,
                b"replace" => StoreCmd::Replace,
                b"append" => StoreCmd::Append,
                b"prepend" => StoreCmd::Prepend,
                _ => StoreCmd::Cas,
            };
            Ok(Some((
                Request::Store {
                    cmd,
                    key,
                    flags,
                    exptime,
                    data,
                    cas,
                    noreply,
                },
                used + vlen + 2,
            )))
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = last_noreply(4);
            let bad = |kind| {
                let mut e = ProtoError::new(kind, used);
                e.noreply = noreply;
                Err(e)
            };
            let key = tok(1);
            if key.len() > KEY_MAX_LEN {
                return bad(ErrorKind::BadFormat);
            }
            let Some(delta) = parse_u64(tok(2)) else {
                return bad(ErrorKind::InvalidDelta);
            };
            ok(Request::Arith {
                incr: cmd == b"incr",
                key,
                delta,
                noreply,
            })
        }
        b"delete" => {
            if !(2..=4).contains(&n) {
                return err(ErrorKind::UnknownCommand);
            }
            let key = tok(1);
            let noreply = n > 2 && tok(n - 1) == b"noreply";
            if key.len() > KEY_MAX_LEN {
                let mut e = ProtoError::new(ErrorKind::BadFormat, used);
                e.noreply = noreply;
                return Err(e);
            }
            if n > 2 {
                let hold_zero = tok(2) == b"0";
                let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
                if !valid {
                    let mut e = ProtoError::new(ErrorKind::DeleteUsage, used);
                    e.noreply = noreply;
                    return Err(e);
                }
            }
            ok(Request::Delete { key, noreply })
        }
        b"touch" => {
            if n != 3 && n != 4 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = last_noreply(4);
            let key = tok(1);
            let mut e = ProtoError::new(ErrorKind::BadFormat, used);
            e.noreply = noreply;
            if key.len() > KEY_MAX_LEN {
                return Err(e);
            }
            let Some(exptime) = parse_i32(tok(2)) else {
                e.kind = ErrorKind::InvalidExptime;
                return Err(e);
            };
            ok(Request::Touch {
                key,
                exptime,
                noreply,
            })
        }
        b"flush_all" => {
            if n > 3 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = n > 1 && tok(n - 1) == b"noreply";
            let args = n - 1 - usize::from(noreply);
            let delay = if args >= 1 {
                match parse_i32(tok(1)) {
                    Some(d) => d,
                    None => {
                        let mut e = ProtoError::new(ErrorKind::InvalidExptime, used);
                        e.noreply = noreply;
                        return Err(e);
                    }
                }
            } else {
                0
            };
            if args > 1 {
                return err(ErrorKind::UnknownCommand);
            }
            ok(Request::FlushAll { delay, noreply })
        }
        b"stats" => ok(Request::Stats {
            group: (n > 1).then(|| tok(1)),
        }),
        b"version" => ok(Request::Version),
        b"quit" => ok(Request::Quit),
        b"verbosity" => {
            if n != 2 && n != 3 {
                return err(ErrorKind::UnknownCommand);
            }
            ok(Request::Verbosity {
                noreply: tok(n - 1) == b"noreply",
            })
        }
        _ => err(ErrorKind::UnknownCommand),
    }
}

fn parse_meta<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    used: usize,
    t: &Tokens<'a>,
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtoError> {
    let err = |kind| Err(ProtoError::new(kind, used));
    let cmd = match t.toks[0][1] {
        b'g' => MetaCmd::Get,
        b's' => MetaCmd::Set,
        b'd' => MetaCmd::Delete,
        b'a' => MetaCmd::Arith,
        b'n' => MetaCmd::Noop,
        b'e' => MetaCmd::Debug,
        _ => return err(ErrorKind::UnknownCommand),
    };
    if cmd == MetaCmd::Noop {
        return Ok(Some((
            Request::Meta {
                cmd,
                key: &[],
                flags: MetaFlags(&[]),
                data: None,
            },
            used,
        )));
    }
    if t.n < 2 {
        return err(ErrorKind::BadFormat);
    }
    let key = t.toks[1];
    if key.len() > KEY_MAX_LEN {
        return err(ErrorKind::BadFormat);
    }
    let first_flag = if cmd == MetaCmd::Set { 3 } else { 2 };
    let flags_start = if t.n > first_flag && first_flag < MAX_TOKENS {
        offset_in(line, t.toks[first_flag])
    } else {
        line.len()
    };
    let flags = MetaFlags(&line[flags_start..]);
    if cmd != MetaCmd::Set {
        return Ok(Some((
            Request::Meta {
                cmd,
                key,
                flags,
                data: None,
            },
            used,
        )));
    }
    if t.n < 3 {
        return err(ErrorKind::BadFormat);
    }
    let Some(vlen) = parse_i32(t.toks[2]).filter(|&v| v >= 0) else {
        return err(ErrorKind::BadFormat);
    };
    let vlen = vlen as usize;
    if vlen + key.len() + ITEM_OVERHEAD > limits.max_item {
        let mut e = ProtoError::new(ErrorKind::TooLarge, used);
        e.swallow = vlen + 2;
        return Err(e);
    }
    if buf.len() < used + vlen + 2 {
        return Ok(None);
    }
    if &buf[used + vlen..used + vlen + 2] != b"\r\n" {
        return Err(ProtoError::new(ErrorKind::BadDataChunk, used + vlen + 2));
    }
    Ok(Some((
        Request::Meta {
            cmd,
            key,
            flags,
            data: Some(&buf[used..used + vlen]),
        },
        used + vlen + 2,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> (Request<'_>, usize) {
        parse_request(b).unwrap().unwrap()
    }
    fn error(b: &[u8]) -> ProtoError {
        parse_request(b).unwrap_err()
    }

    #[test]
    fn get_keys() {
        let (r, n) = one(b"get a  bb ccc\r\nrest");
        assert_eq!(n, 15);
        let Request::Get { keys, cas: false } = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            keys.iter().collect::<Vec<_>>(),
            vec![&b"a"[..], b"bb", b"ccc"]
        );
        let (r, _) = one(b"gats 10 k\n");
        assert!(matches!(
            r,
            Request::Gat {
                exptime: 10,
                cas: true,
                ..
            }
        ));
        assert_eq!(parse_request(b"get a"), Ok(None));
    }

    #[test]
    fn many_keys_beyond_token_limit() {
        let mut line = b"get".to_vec();
        for i in 0..100 {
            line.extend_from_slice(format!(" k{i}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        let (r, _) = one(&line);
        let Request::Get { keys, .. } = r else {
            panic!()
        };
        assert_eq!(keys.iter().count(), 100);
    }

    #[test]
    fn storage() {
        let (r, n) = one(b"set k 5 -1 3 noreply\r\nabc\r\nget");
        assert_eq!(n, 27);
        assert_eq!(
            r,
            Request::Store {
                cmd: StoreCmd::Set,
                key: b"k",
                flags: 5,
                exptime: -1,
                data: b"abc",
                cas: 0,
                noreply: true
            }
        );
        assert_eq!(parse_request(b"set k 0 0 3\r\nab"), Ok(None));
        let (r, _) = one(b"cas k 0 0 1 99\r\nx\r\n");
        assert!(matches!(
            r,
            Request::Store {
                cmd: StoreCmd::Cas,
                cas: 99,
                ..
            }
        ));
        // flags keep the low 32 bits, as memcached does
        let (r, _) = one(b"set k 4294967296 0 1\r\nb\r\n");
        assert!(matches!(r, Request::Store { flags: 0, .. }));
    }

    #[test]
    fn errors_match_memcached() {
        assert_eq!(error(b"bogus\r\n").reply().unwrap(), "ERROR\r\n");
        assert_eq!(error(b"m\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(error(b"GET a\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(error(b"get\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(error(b"set a\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(
            error(b"set k 0 0 1 noreply x\r\n").kind,
            ErrorKind::UnknownCommand
        );
        let long = [b'k'; 251];
        let mut l = b"get a ".to_vec();
        l.extend_from_slice(&long);
        l.extend_from_slice(b"\r\n");
        assert_eq!(error(&l).kind, ErrorKind::BadFormat);
        let e = error(b"set k 0 0 -1\r\nabc\r\n");
        assert_eq!(
            (e.kind, e.consumed, e.swallow),
            (ErrorKind::BadFormat, 14, 0)
        );
        let e = error(b"set k 0 0 3\r\nabcde\r\n");
        assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 18));
        let e = error(b"set k 0 0 2000000 noreply\r\n");
        assert_eq!(
            (e.kind, e.swallow, e.noreply),
            (ErrorKind::TooLarge, 2000002, true)
        );
        assert_eq!(e.reply(), None);
        assert_eq!(error(b"incr k x\r\n").kind, ErrorKind::InvalidDelta);
        assert_eq!(error(b"incr k -1\r\n").kind, ErrorKind::InvalidDelta);
        assert_eq!(error(b"touch k x\r\n").kind, ErrorKind::InvalidExptime);
        assert_eq!(error(b"gat x k\r\n").kind, ErrorKind::InvalidExptime);
        assert_eq!(error(b"delete a 1\r\n").kind, ErrorKind::DeleteUsage);
        assert_eq!(error(b"flush_all x\r\n").kind, ErrorKind::InvalidExptime);
        assert!(matches!(
            one(b"delete a 0 noreply\r\n").0,
            Request::Delete { noreply: true, .. }
        ));
        assert!(error(&[b'x'; 3000]).close);
        let mut g = b"get ".to_vec();
        g.extend_from_slice(&[b'x'; 3000]);
        assert_eq!(parse_request(&g), Ok(None));
    }

    #[test]
    fn meta() {
        let (r, _) = one(b"mg foo v f T30\r\n");
        let Request::Meta {
            cmd: MetaCmd::Get,
            key,
            flags,
            ..
        } = r.clone()
        else {
            panic!()
        };
        assert_eq!(key, b"foo");
        assert!(flags.has(b'v'));
        assert_eq!(flags.get(b'T'), Some(&b"30"[..]));
        assert!(r.is_mutation());
        let (r, n) = one(b"ms foo 2 T0 F5\r\nhi\r\n");
        assert_eq!(n, 20);
        assert!(matches!(
            r,
            Request::Meta {
                cmd: MetaCmd::Set,
                data: Some(b"hi"),
                ..
            }
        ));
        assert!(matches!(
            one(b"mn\r\n").0,
            Request::Meta {
                cmd: MetaCmd::Noop,
                ..
            }
        ));
        assert_eq!(error(b"ms k S2\r\n").kind, ErrorKind::BadFormat);
        assert_eq!(error(b"mx k\r\n").kind, ErrorKind::UnknownCommand);
    }

    #[test]
    fn mutations() {
        assert_eq!(one(b"get a b\r\n").0.mutated_keys(), Mutation::None);
        assert_eq!(
            one(b"gat 1 a b\r\n").0.mutated_keys(),
            Mutation::Keys(vec![b"a", b"b"])
        );
        assert_eq!(
            one(b"incr a 1\r\n").0.mutated_keys(),
            Mutation::Keys(vec![b"a"])
        );
        assert_eq!(one(b"flush_all\r\n").0.mutated_keys(), Mutation::All);
        assert!(!one(b"mg a v\r\n").0.is_mutation());
        assert!(one(b"md a\r\n").0.is_mutation());
    }
}
