//! `-Y`: memcached's ascii authentication. Until a connection authenticates, the only command
//! it may send is `set <any> <any> <any> <n>\r\n<user> <password>\r\n`; the answer is `STORED`,
//! `CLIENT_ERROR authentication failure` or memcached's other refusals. Users come from a file
//! of `user:password` lines (at most 8, as memcached reads), loaded at start and on SIGHUP.

use crate::exec::Shared;
use crate::stats::{WorkerStats, C};
use inkproto::num::strtoul32;
use inkproto::response as resp;

/// Where a connection is in authenticating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum State {
    #[default]
    Line,
    /// The `set` line was read: this many bytes (payload and `\r\n`) follow.
    Payload(usize),
    Done,
}

/// User and password pairs.
pub type Users = Vec<(Vec<u8>, Vec<u8>)>;

/// Loads the auth file: Err(message) as memcached words it.
pub fn load(path: &str) -> Result<Users, String> {
    let data = std::fs::read(path).map_err(|e| {
        // memcached's words, with its strerror twice
        let m = std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)).to_string();
        let m = m.split(" (os error").next().unwrap_or_default().to_string();
        format!("Could not open authfile [{path}] for reading, error {m}: {m}")
    })?;
    let mut out = Vec::new();
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if out.len() == 8 {
            break;
        }
        if line.is_empty() && i + 1 == lines.len() {
            // the end of the last line
            break;
        }
        let Some(c) = line.iter().position(|&b| b == b':') else {
            return Err(format!(
                "Authfile [{path}] has a malformed entry. Should be 'user:password'"
            ));
        };
        let pass = &line[c + 1..];
        let end = pass.iter().position(|&b| b == b'\r').unwrap_or(pass.len());
        out.push((line[..c].to_vec(), pass[..end].to_vec()));
    }
    Ok(out)
}

/// One step of authentication over `buf`: bytes used (0: need more), or None to close.
pub fn step(
    sh: &Shared,
    st: &WorkerStats,
    state: &mut State,
    buf: &[u8],
    out: &mut Vec<u8>,
) -> Option<usize> {
    match *state {
        State::Done => Some(0),
        State::Line => {
            let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
                return if buf.len() > 2048 { None } else { Some(0) };
            };
            let t: Vec<&[u8]> = buf[..nl]
                .split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .take(23)
                .collect();
            match (t.len() >= 5 && t[0] == b"set")
                .then(|| strtoul32(t[4]))
                .flatten()
            {
                Some(n) => *state = State::Payload(n as usize + 2),
                None => resp::line(out, "CLIENT_ERROR unauthenticated"),
            }
            Some(nl + 1)
        }
        State::Payload(n) => {
            if buf.len() < n {
                return Some(0);
            }
            *state = State::Line;
            let p = &buf[..n];
            if !p.ends_with(b"\r\n") {
                resp::line(out, "CLIENT_ERROR bad command line termination");
                return Some(n);
            }
            let t: Vec<&[u8]> = p[..n - 2]
                .split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .collect();
            if t.len() < 2 {
                resp::line(out, "CLIENT_ERROR bad authentication token format");
                return Some(n);
            }
            st.inc(C::auth_cmds);
            let users = sh.auth.read().unwrap_or_else(|e| e.into_inner());
            if users.iter().any(|(u, pw)| u == t[0] && pw == t[1]) {
                *state = State::Done;
                resp::stored(out);
            } else {
                st.inc(C::auth_errors);
                resp::line(out, "CLIENT_ERROR authentication failure");
            }
            Some(n)
        }
    }
}
