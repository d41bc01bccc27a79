//! Meta command flags: memcached 1.6's "preparse" of the flag tokens (duplicates, unknown
//! flags, numeric arguments), and the base64 keys of the `b` flag.
//!
//! Rules (memcached 1.6.18 `proto_text.c`): every flag is one token whose first byte names it;
//! a flag seen twice is `CLIENT_ERROR duplicate flag`, an unknown one `CLIENT_ERROR invalid
//! flag` (both stop the parse); a bad numeric argument records an error (the last one wins) and
//! the parse goes on, so that `ms` still learns its data length to swallow.

use crate::num::{strtol32, strtoul32, strtoull};

/// Longest opaque token (`O` flag included) memcached echoes.
pub const MAX_OPAQUE_LEN: usize = 32;
/// memcached's `MFLAG_MAX_OPT_LENGTH`: a meta command with this many tokens or more (counting
/// memcached's terminating empty token) is refused.
pub const MAX_OPT_TOKENS: usize = 20;

/// What the flags of one meta command ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaOpts {
    /// `b`: the key is base64; its decoded length.
    pub base64: Option<usize>,
    /// `N<ttl>`: vivify on miss, with this exptime.
    pub vivify: Option<i32>,
    /// `T<ttl>`: new exptime.
    pub ttl: Option<i32>,
    /// `R<ttl>`: win a recache token if the remaining TTL is below this.
    pub recache: Option<i32>,
    /// `l` or `h`: the access time and fetched bit are read before the LRU bump.
    pub locked: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `u`: no LRU bump.
    pub no_update: bool,
    /// `q`: noreply semantics.
    pub quiet: bool,
    /// `F<flags>`: client flags (ms).
    pub client_flags: u32,
    /// `C<cas>`: compare CAS.
    pub cas: Option<u64>,
    /// `M<mode>`: mode switch (ms, ma), the mode character.
    pub mode: Option<u8>,
    /// `J<n>`: initial value (ma).
    pub initial: u64,
    /// `D<n>`: delta (ma), 1 unless given.
    pub delta: u64,
    /// `I`: invalidate (md), or set even if stale (ms with a lower CAS).
    pub stale: bool,
}

/// Why the flags were refused: memcached's error line (without `\r\n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagError(pub &'static str);

/// memcached's `_meta_flag_preparse` over the flag tokens. `key` is the key token as sent;
/// `default_err` is the caller's error line for errors that do not set their own.
pub fn preparse<'a>(
    tokens: impl Iterator<Item = &'a [u8]>,
    key: &[u8],
    default_err: &'static str,
) -> Result<MetaOpts, FlagError> {
    let mut o = MetaOpts {
        delta: 1,
        ..Default::default()
    };
    let mut seen = [false; 128];
    let mut err: Option<&'static str> = None;
    let bad_token = "CLIENT_ERROR bad token in command line format";
    for t in tokens {
        let f = t[0];
        if f >= 127 || seen[f as usize] {
            return Err(FlagError("CLIENT_ERROR duplicate flag"));
        }
        seen[f as usize] = true;
        let arg = &t[1..];
        match f {
            b'b' => match b64_decode(key) {
                Some(k) => o.base64 = Some(k.len()),
                None => {
                    o.base64 = Some(0);
                    err = Some("CLIENT_ERROR error decoding key");
                }
            },
            b'N' | b'T' | b'R' => {
                o.locked = true;
                match strtol32(arg) {
                    Some(v) => match f {
                        b'N' => o.vivify = Some(v),
                        b'T' => o.ttl = Some(v),
                        _ => o.recache = Some(v),
                    },
                    None => err = Some(bad_token),
                }
            }
            b'l' | b'h' => o.locked = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' => {}
            b'v' => o.value = true,
            b'u' => o.no_update = true,
            b'q' => o.quiet = true,
            b'F' => match strtoul32(arg) {
                Some(v) => o.client_flags = v,
                None => err = Some(err.unwrap_or(default_err)),
            },
            b'C' => match strtoull(arg) {
                Some(v) => o.cas = Some(v),
                None => err = Some(bad_token),
            },
            b'M' => {
                if t.len() != 2 {
                    err = Some("CLIENT_ERROR incorrect length for M token");
                } else {
                    o.mode = Some(t[1]);
                }
            }
            b'J' => match strtoull(arg) {
                Some(v) => o.initial = v,
                None => err = Some("CLIENT_ERROR invalid numeric initial value"),
            },
            b'D' => match strtoull(arg) {
                Some(v) => o.delta = v,
                None => err = Some("CLIENT_ERROR invalid numeric delta value"),
            },
            b'I' => o.stale = true,
            _ => return Err(FlagError("CLIENT_ERROR invalid flag")),
        }
    }
    match err {
        Some(e) => Err(FlagError(e)),
        None => Ok(o),
    }
}

fn b64_value(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        b'=' => 0,
        _ => return None,
    })
}

/// Base64 decoding as memcached does it: bytes outside the alphabet are skipped, the count of
/// the others must be a multiple of 4, decoding stops after the first padded block. None (an
/// error) if nothing decodes.
pub fn b64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let count = s.iter().filter(|&&c| b64_value(c).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &c in s {
        let Some(v) = b64_value(c) else { continue };
        if c == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            n = 0;
            if pad > 0 {
                if pad > 2 {
                    return None;
                }
                out.truncate(out.len() - pad);
                break;
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Standard base64 with padding.
pub fn b64_encode(s: &[u8], out: &mut Vec<u8>) {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for ch in s.chunks(3) {
        let b = [ch[0], *ch.get(1).unwrap_or(&0), *ch.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63]);
        out.push(T[(n >> 12) as usize & 63]);
        out.push(if ch.len() > 1 {
            T[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if ch.len() > 2 {
            T[n as usize & 63]
        } else {
            b'='
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(s: &str) -> Result<MetaOpts, FlagError> {
        preparse(
            s.split(' ').filter(|t| !t.is_empty()).map(str::as_bytes),
            b"a2V5",
            "CLIENT_ERROR bad command line format",
        )
    }

    #[test]
    fn base64() {
        assert_eq!(b64_decode(b"a2V5").unwrap(), b"key");
        assert_eq!(b64_decode(b"YQ==").unwrap(), b"a");
        assert_eq!(b64_decode(b"YWI=").unwrap(), b"ab");
        assert_eq!(b64_decode(b"a2V*5").unwrap(), b"key");
        assert!(b64_decode(b"a2V").is_none());
        assert!(b64_decode(b"====").is_none());
        for s in [&b"k"[..], b"ke", b"key", b"\x00\xff\x10binary"] {
            let mut e = Vec::new();
            b64_encode(s, &mut e);
            assert_eq!(b64_decode(&e).unwrap(), s);
        }
    }

    #[test]
    fn flags() {
        let o = pp("v T30 N10 q k Oabc c").unwrap();
        assert!(o.value && o.quiet && o.locked);
        assert_eq!((o.ttl, o.vivify, o.delta), (Some(30), Some(10), 1));
        assert_eq!(pp("v v"), Err(FlagError("CLIENT_ERROR duplicate flag")));
        assert_eq!(pp("v x"), Err(FlagError("CLIENT_ERROR invalid flag")));
        assert_eq!(
            pp("Tx"),
            Err(FlagError("CLIENT_ERROR bad token in command line format"))
        );
        assert_eq!(
            pp("MSS"),
            Err(FlagError("CLIENT_ERROR incorrect length for M token"))
        );
        assert_eq!(
            pp("Fx"),
            Err(FlagError("CLIENT_ERROR bad command line format"))
        );
        assert_eq!(pp("b").unwrap().base64, Some(3));
        assert_eq!(pp("MD D5 J7 C9").unwrap().cas, Some(9));
    }
}
