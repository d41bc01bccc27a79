//! The server side of the text and meta protocols: an incremental, zero-copy request parser.
//!
//! [`parse_request`] looks at the start of a connection's read buffer and returns either a
//! complete request (borrowing keys and data from the buffer) and the number of bytes it used,
//! `Ok(None)` when more bytes are needed, or a [`ProtoError`] that says exactly what memcached
//! would answer and how to resynchronise (bytes to drop from the buffer, bytes still to swallow
//! from the stream, or close the connection).
//!
//! Long file: one parser for the text and meta request grammars; their tokenizer, number rules
//! and error answers are shared and must stay together to match proto_text.c rule for rule.
//!
//! Token rules follow memcached 1.6 (`proto_text.c`): a line ends at `\n` (an `\r` before it is
//! dropped), tokens are separated by one or more spaces, at most 23 tokens are looked at (get-like
//! commands take any number of keys), numbers as [`crate::num`] parses them. Commands are told
//! apart by their first letter first, as memcached does: that decides which malformed lines get
//! `ERROR` and which HTTP-looking ones close the connection.

use crate::meta::{self, MetaOpts};
use crate::num::{strtol32, strtoul32, strtoull};
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
/// memcached's item header (`sizeof(item)` on 64-bit hosts).
pub const ITEM_HEADER: usize = 48;

/// memcached's `ITEM_ntotal` of a new item: header, key and its NUL, the client flags if not
/// zero, the value with its `\r\n`, the CAS if enabled. An item is too large for the cache when
/// this exceeds the item size limit (`-I`).
pub fn item_total(nkey: usize, flags: u32, vlen: usize, use_cas: bool) -> usize {
    ITEM_HEADER + nkey + 1 + if flags != 0 { 4 } else { 0 } + vlen + 2 + if use_cas { 8 } else { 0 }
}

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
    /// `flush_all [delay] [noreply]`; `delay` None if it is not a number (memcached answers
    /// that only when flush_all is enabled).
    FlushAll {
        delay: Option<i64>,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// Commands that read or tune the server rather than the data: `stats`, `shutdown`,
    /// `slabs`, `lru_crawler`, `lru`, `watch`, `cache_memlimit`. `line` is the whole command
    /// line (without its end); the server tokenizes it.
    Admin {
        line: &'a [u8],
    },
    /// Meta commands. `key` is as sent (base64 if the `b` flag is present); `data` only for
    /// `ms`; `opts` what the flags ask for (already checked).
    Meta {
        cmd: MetaCmd,
        key: &'a [u8],
        flags: MetaFlags<'a>,
        data: Option<&'a [u8]>,
        opts: MetaOpts,
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
            | Request::Verbosity { noreply, .. } => *noreply,
            _ => false,
        }
    }

    /// The keys this request may change, or `All` for `flush_all`. `mg` counts as a mutation
    /// when it carries `T` (touch), `N` (autovivify), `E` (set CAS) or `R` (recache) flags.
    pub fn mutated_keys(&self) -> Mutation<'a> {
        match *self {
            Request::Get { .. }
            | Request::Admin { .. }
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
    /// An unknown command whose last token starts with `HTTP/`: memcached closes the
    /// connection without an answer.
    Http,
    /// Any other error line (meta commands), without `\r\n`.
    Line(&'static str),
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
            ErrorKind::Http => "",
            ErrorKind::Line(l) => l,
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
    /// For a too-large `set` or `ms`: the key (offsets into the buffer, as sent), which
    /// memcached unlinks so that the failed set leaves no stale value behind.
    pub key: Option<(usize, usize)>,
    /// The key of `key` is base64 (`ms` with the `b` flag).
    pub key_base64: bool,
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
            key_base64: false,
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
    /// Largest item ([`item_total`]) accepted (`-I`).
    pub max_item: usize,
    /// CAS is enabled (memcached counts 8 bytes per item for it; `-C` disables it).
    pub use_cas: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item: DEFAULT_MAX_ITEM,
            use_cas: true,
        }
    }
}

/// Parses one request from the start of `buf` with default limits. See [`parse_request_with`].
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, ProtoError> {
    parse_request_with(buf, &Limits::default())
}

/// memcached's `safe_strtoull` (see [`crate::num`]).
pub fn parse_u64(t: &[u8]) -> Option<u64> {
    strtoull(t)
}

/// memcached's `safe_strtol`: the low 32 bits of a 64-bit signed value (see [`crate::num`]).
pub fn parse_i32(t: &[u8]) -> Option<i64> {
    strtol32(t).map(i64::from)
}

struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    /// Number of tokens (all of them, even beyond the array).
    n: usize,
}

impl Tokens<'_> {
    /// memcached's `ntokens`: the tokens it looks at (at most 23) plus its terminating one.
    fn mc_n(&self) -> usize {
        self.n.min(MAX_TOKENS - 1) + 1
    }
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
    let known = match cmd[0] {
        b'g' => matches!(cmd, b"get" | b"gets" | b"gat" | b"gats"),
        b's' => matches!(cmd, b"set" | b"stats" | b"shutdown" | b"slabs"),
        b'a' => matches!(cmd, b"add" | b"append"),
        b'c' => matches!(cmd, b"cas" | b"cache_memlimit"),
        b'i' => cmd == b"incr",
        b'd' => matches!(cmd, b"delete" | b"decr"),
        b't' => cmd == b"touch",
        _ => matches!(
            cmd,
            b"replace"
                | b"prepend"
                | b"bget"
                | b"flush_all"
                | b"version"
                | b"quit"
                | b"lru_crawler"
                | b"watch"
                | b"verbosity"
                | b"lru"
        ),
    };
    if !known {
        // Only lines that no first letter claims are checked for HTTP (memcached's order).
        let claimed = matches!(cmd[0], b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't');
        if !claimed && t.toks[t.mc_n() - 2].starts_with(b"HTTP/") {
            let mut e = ProtoError::new(ErrorKind::Http, used);
            e.close = true;
            return Err(e);
        }
        return err(ErrorKind::UnknownCommand);
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => {
            if n < 2 {
                return err(ErrorKind::UnknownCommand);
            }
            let cas = cmd == b"gets" || cmd == b"gats";
            let gat = cmd.starts_with(b"ga");
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
                (strtoul32(tok(2)), parse_i32(tok(3)), parse_i32(tok(4)))
            else {
                return bad(ErrorKind::BadFormat);
            };
            let cas = if is_cas {
                match strtoull(tok(5)) {
                    Some(c) => c,
                    None => return bad(ErrorKind::BadFormat),
                }
            } else {
                0
            };
            if vlen < 0 || vlen > i64::from(i32::MAX) - 2 {
                return bad(ErrorKind::BadFormat);
            }
            let vlen = vlen as usize;
            if item_total(key.len(), flags, vlen, limits.use_cas) > limits.max_item {
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
            let Some(delta) = strtoull(tok(2)) else {
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
            if n > 2 {
                let hold_zero = tok(2) == b"0";
                let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
                if !valid {
                    let mut e = ProtoError::new(ErrorKind::DeleteUsage, used);
                    e.noreply = noreply;
                    return Err(e);
                }
            }
            if key.len() > KEY_MAX_LEN {
                let mut e = ProtoError::new(ErrorKind::BadFormat, used);
                e.noreply = noreply;
                return Err(e);
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
            let noreply = tok(n - 1) == b"noreply";
            // memcached reads a delay whenever the token count is not the bare command's.
            let delay = if n != 1 + usize::from(noreply) {
                parse_i32(tok(1))
            } else {
                Some(0)
            };
            ok(Request::FlushAll { delay, noreply })
        }
        b"version" => ok(Request::Version),
        b"quit" => ok(Request::Quit),
        b"verbosity" => {
            if n != 2 && n != 3 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = tok(n - 1) == b"noreply";
            match strtoul32(tok(1)) {
                Some(level) => ok(Request::Verbosity { level, noreply }),
                None => {
                    let mut e = ProtoError::new(ErrorKind::BadFormat, used);
                    e.noreply = noreply;
                    Err(e)
                }
            }
        }
        b"cache_memlimit" if n != 2 && n != 3 => err(ErrorKind::UnknownCommand),
        b"lru" if n < 2 => err(ErrorKind::UnknownCommand),
        _ => ok(Request::Admin { line }),
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
    let line_err = |l: &'static str| Err(ProtoError::new(ErrorKind::Line(l), used));
    let cmd = match t.toks[0][1] {
        b'g' => MetaCmd::Get,
        b's' => MetaCmd::Set,
        b'd' => MetaCmd::Delete,
        b'a' => MetaCmd::Arith,
        b'n' => MetaCmd::Noop,
        b'e' => MetaCmd::Debug,
        _ => return err(ErrorKind::UnknownCommand),
    };
    let req = |key, flags, data, opts| Request::Meta {
        cmd,
        key,
        flags,
        data,
        opts,
    };
    if cmd == MetaCmd::Noop {
        return Ok(Some((
            req(&[], MetaFlags(&[]), None, MetaOpts::default()),
            used,
        )));
    }
    let mc_n = t.mc_n();
    let key = t.toks[1];
    if cmd == MetaCmd::Debug {
        if mc_n < 3 || key.len() > KEY_MAX_LEN {
            return err(ErrorKind::BadFormat);
        }
        // `me <key> b`: only this exact form decodes the key.
        let b64 = mc_n >= 4 && t.toks[2] == b"b";
        if b64 && meta::b64_decode(key).is_none() {
            return err(ErrorKind::BadFormat);
        }
        let opts = MetaOpts {
            base64: b64.then_some(0),
            ..Default::default()
        };
        return Ok(Some((req(key, MetaFlags(&[]), None, opts), used)));
    }
    if mc_n < 3 {
        return err(ErrorKind::UnknownCommand);
    }
    if key.len() > KEY_MAX_LEN {
        return err(ErrorKind::BadFormat);
    }
    let first_flag = if cmd == MetaCmd::Set { 3 } else { 2 };
    if cmd == MetaCmd::Set && mc_n == 3 {
        return err(ErrorKind::BadFormat);
    }
    if mc_n > meta::MAX_OPT_TOKENS {
        return line_err(if cmd == MetaCmd::Get {
            "CLIENT_ERROR options flags are too long"
        } else {
            "CLIENT_ERROR options flags too long"
        });
    }
    let flags_start = if mc_n - 1 > first_flag {
        offset_in(line, t.toks[first_flag])
    } else {
        line.len()
    };
    let flags = MetaFlags(&line[flags_start..]);
    let tokens = t.toks[first_flag.min(mc_n - 1)..mc_n - 1].iter().copied();
    let default_err = "CLIENT_ERROR bad command line format";
    if cmd != MetaCmd::Set {
        return match meta::preparse(tokens, key, default_err) {
            Ok(opts) => Ok(Some((req(key, flags, None, opts), used))),
            Err(e) if cmd == MetaCmd::Get => line_err(e.0),
            Err(_) => line_err("CLIENT_ERROR invalid or duplicate flag"),
        };
    }
    let Some(vlen) = strtol32(t.toks[2]).filter(|v| (0..=i32::MAX - 2).contains(v)) else {
        return err(ErrorKind::BadFormat);
    };
    let vlen = vlen as usize;
    // From here on, a refused `ms` swallows its data block.
    let swallowing = |kind| {
        let mut e = ProtoError::new(kind, used);
        e.swallow = vlen + 2;
        Err(e)
    };
    let opts = match meta::preparse(tokens.clone(), key, default_err) {
        Ok(o) => o,
        Err(e) => return swallowing(ErrorKind::Line(e.0)),
    };
    let mut opaque_err = false;
    for tk in tokens {
        if tk[0] == b'O' && tk.len() > meta::MAX_OPAQUE_LEN {
            opaque_err = true;
        }
    }
    if !matches!(opts.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
        return swallowing(ErrorKind::Line("CLIENT_ERROR invalid mode for ms M token"));
    }
    if opaque_err {
        return swallowing(ErrorKind::Line("CLIENT_ERROR opaque token too long"));
    }
    let nkey = opts.base64.unwrap_or(key.len());
    if item_total(nkey, opts.client_flags, vlen, limits.use_cas) > limits.max_item {
        let mut e = ProtoError::new(ErrorKind::TooLarge, used);
        e.swallow = vlen + 2;
        let ko = offset_in(buf, key);
        e.key = Some((ko, ko + key.len()));
        e.key_base64 = opts.base64.is_some();
        return Err(e);
    }
    if buf.len() < used + vlen + 2 {
        return Ok(None);
    }
    if &buf[used + vlen..used + vlen + 2] != b"\r\n" {
        return Err(ProtoError::new(ErrorKind::BadDataChunk, used + vlen + 2));
    }
    Ok(Some((
        req(key, flags, Some(&buf[used..used + vlen]), opts),
        used + vlen + 2,
    )))
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
