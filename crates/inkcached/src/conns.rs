//! Open connections, listeners and UDP sockets by file descriptor, for `stats conns`, in
//! memcached's format: `<fd>:addr`, `<fd>:listen_addr`, `<fd>:state`, `<fd>:secs_since_last_cmd`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// memcached's `reserved_fds` (descriptors it keeps out of the connection count).
pub const RESERVED_FDS: u32 = 20;
/// In a connection's last command time: that command left it writing (`conn_mwrite`).
pub const MWRITE: u32 = 1 << 31;
/// In a connection's last command time: a storage command's line has come and its data block
/// has not, all of it (`conn_nread`).
pub const NREAD: u32 = 1 << 30;
/// The time bits of a connection's last command time.
pub const TIME: u32 = !(MWRITE | NREAD);

/// What a descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Listen,
    Udp,
    Conn,
}

struct Entry {
    kind: Kind,
    /// Peer (connections) or local address (listeners, UDP), as memcached prints it.
    addr: String,
    listen_addr: String,
    last_cmd: Arc<AtomicU32>,
}

/// The table; workers add and remove their own descriptors.
#[derive(Default)]
pub struct ConnTable {
    map: Mutex<BTreeMap<i32, Entry>>,
}

/// `tcp:1.2.3.4:5`, `tcp6:[::1]:5`, `udp:...`, `unix:/path`.
pub fn addr_text(a: Option<SocketAddr>, udp: bool, unix: Option<&str>) -> String {
    if let Some(p) = unix {
        return format!("unix:{p}");
    }
    match a {
        Some(SocketAddr::V4(v)) => {
            format!(
                "{}:{}:{}",
                if udp { "udp" } else { "tcp" },
                v.ip(),
                v.port()
            )
        }
        Some(SocketAddr::V6(v)) => {
            format!(
                "{}:[{}]:{}",
                if udp { "udp6" } else { "tcp6" },
                v.ip(),
                v.port()
            )
        }
        None => "unix:".into(),
    }
}

impl ConnTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a descriptor; its last command time is `last_cmd` (relative seconds).
    pub fn add(
        &self,
        fd: i32,
        kind: Kind,
        addr: String,
        listen_addr: String,
        last_cmd: Arc<AtomicU32>,
    ) {
        self.lock().insert(
            fd,
            Entry {
                kind,
                addr,
                listen_addr,
                last_cmd,
            },
        );
    }

    /// Removes a descriptor; returns its address text.
    pub fn remove(&self, fd: i32) -> Option<String> {
        self.lock().remove(&fd).map(|e| e.addr)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Appends `stats conns` lines; `me` is the asking connection.
    pub fn stats(&self, me: usize, now: u32, out: &mut Vec<u8>) {
        use std::io::Write;
        for (fd, e) in self.lock().iter() {
            if e.kind == Kind::Udp {
                let _ = write!(out, "STAT {fd}:UDP UDP\r\n");
            }
            let _ = write!(out, "STAT {fd}:addr {}\r\n", e.addr);
            if e.kind == Kind::Conn {
                let _ = write!(out, "STAT {fd}:listen_addr {}\r\n", e.listen_addr);
            }
            let state = match e.kind {
                Kind::Listen => "conn_listening",
                Kind::Udp => "conn_read",
                Kind::Conn if *fd as usize == me => "conn_parse_cmd",
                Kind::Conn if e.last_cmd.load(Ordering::Relaxed) & NREAD != 0 => "conn_nread",
                Kind::Conn if e.last_cmd.load(Ordering::Relaxed) & MWRITE != 0 => "conn_mwrite",
                Kind::Conn => "conn_waiting",
            };
            let _ = write!(out, "STAT {fd}:state {state}\r\n");
            let last = e.last_cmd.load(Ordering::Relaxed) & TIME;
            let _ = write!(
                out,
                "STAT {fd}:secs_since_last_cmd {}\r\n",
                now.wrapping_sub(last) as i32
            );
        }
    }
}
