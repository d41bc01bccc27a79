//! inkcached's command line: memcached 1.6's whole flag set, parsed as memcached parses it.
//!
//! memcached uses `getopt_long` (clustered short flags `-vvv`, attached values `-p11211`,
//! unambiguous long prefixes `--memory-l=64`) and `getsubopt` for `-o key[=value],...`; it refuses
//! values with its own messages and exit codes. inkcached accepts the same lines and refuses
//! the same values the same way, so that an existing memcached command line can start it. The
//! parsing is hand-written for that reason (a generic parser's messages and exit codes differ).
//!
//! What each option does in inkcached is documented in README.md; knobs of memcached's own slab
//! allocator and LRU threads are accepted, checked and reported in `stats settings`, and
//! otherwise have nothing to tune here. `-o ext_*` options (and `slab_automove_freeratio`) are
//! collected in [`Config::ext_opts`], in order, for the flash tier to parse.

use std::fmt::Write as _;

#[path = "config_opts.rs"]
mod opts;
use opts::{suboption, usage, validate, LICENSE};

/// memcached's exit codes (sysexits.h).
pub const EX_USAGE: i32 = 64;
pub const EX_NOUSER: i32 = 67;
pub const EX_OSERR: i32 = 71;

/// The protocol a listener speaks (`-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Ascii,
    Binary,
    /// Decided per connection by its first byte.
    Auto,
}

impl Proto {
    /// As `stats settings` names it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Ascii => "ascii",
            Proto::Binary => "binary",
            Proto::Auto => "auto-negotiate",
        }
    }
}

/// Every setting, with memcached's defaults and names.
#[derive(Clone, Debug)]
pub struct Config {
    pub prog: String,
    /// TCP port: -1 picks a free one, 0 is off.
    pub port: i32,
    pub udp_port: i32,
    pub socket_path: Option<String>,
    pub unix_mask: u32,
    pub shutdown_enabled: bool,
    /// `-l` as memcached keeps it: the values joined by commas (None: every address).
    pub listen: Option<String>,
    pub daemonize: bool,
    pub maxcore: bool,
    pub user: Option<String>,
    pub maxbytes: usize,
    pub evict: bool,
    pub maxconns: i32,
    pub lock_memory: bool,
    pub verbose: u32,
    pub pid_file: Option<String>,
    pub factor: f64,
    pub chunk_size: i32,
    pub threads: i32,
    pub prefix_delimiter: u8,
    pub detail_enabled: bool,
    pub large_pages: bool,
    pub reqs_per_event: i32,
    pub use_cas: bool,
    pub backlog: i32,
    pub protocol: Proto,
    pub item_size_max: i32,
    pub flush_enabled: bool,
    pub dump_enabled: bool,
    pub watch_enabled: bool,
    pub auth_file: Option<String>,
    pub napi_ids: i32,
    // -o
    pub maxconns_fast: bool,
    pub hashpower_init: i32,
    pub slab_reassign: bool,
    pub slab_automove: i32,
    pub slab_automove_ratio: f64,
    pub slab_automove_window: i32,
    pub tail_repair_time: i32,
    pub hash_algorithm: &'static str,
    pub lru_crawler: bool,
    pub lru_crawler_sleep: i32,
    pub lru_crawler_tocrawl: u32,
    pub lru_maintainer: bool,
    pub lru_segmented: bool,
    pub hot_lru_pct: i32,
    pub warm_lru_pct: i32,
    pub hot_max_factor: f64,
    pub warm_max_factor: f64,
    pub temp_lru: bool,
    pub temporary_ttl: i32,
    pub idle_timeout: i32,
    pub watcher_logbuf_size: u32,
    pub worker_logbuf_size: u32,
    pub slab_sizes: Option<Vec<u32>>,
    pub slab_page_size: i32,
    pub slab_chunk_max: i32,
    pub track_sizes: bool,
    pub drop_privileges: bool,
    pub read_buf_mem_limit: u32,
    /// `-o ext_*` (and `slab_automove_freeratio`), in order, for the flash tier to parse.
    pub ext_opts: Vec<(String, Option<String>)>,
    /// Options accepted that have nothing to act on in inkcached (logged with `-v`).
    pub inert: Vec<String>,
    /// inkcached's own kernel-bypass options (`--afxdp`, `--steer`, ...: bypass.rs).
    pub bypass: crate::bypass::Opts,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prog: "inkcached".into(),
            port: 11211,
            udp_port: 0,
            socket_path: None,
            unix_mask: 0o700,
            shutdown_enabled: false,
            listen: None,
            daemonize: false,
            maxcore: false,
            user: None,
            maxbytes: 64 << 20,
            evict: true,
            maxconns: 1024,
            lock_memory: false,
            verbose: 0,
            pid_file: None,
            factor: 1.25,
            chunk_size: 48,
            threads: 4,
            prefix_delimiter: b':',
            detail_enabled: false,
            large_pages: false,
            reqs_per_event: 20,
            use_cas: true,
            backlog: 1024,
            protocol: Proto::Auto,
            item_size_max: 1 << 20,
            flush_enabled: true,
            dump_enabled: true,
            watch_enabled: true,
            auth_file: None,
            napi_ids: 0,
            maxconns_fast: true,
            hashpower_init: 0,
            slab_reassign: true,
            slab_automove: 1,
            slab_automove_ratio: 0.8,
            slab_automove_window: 30,
            tail_repair_time: 0,
            hash_algorithm: "murmur3",
            lru_crawler: true,
            lru_crawler_sleep: 100,
            lru_crawler_tocrawl: 0,
            lru_maintainer: true,
            lru_segmented: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temp_lru: false,
            temporary_ttl: 61,
            idle_timeout: 0,
            watcher_logbuf_size: 256 * 1024,
            worker_logbuf_size: 64 * 1024,
            slab_sizes: None,
            slab_page_size: 1 << 20,
            slab_chunk_max: 1 << 19,
            track_sizes: false,
            drop_privileges: false,
            read_buf_mem_limit: 0,
            ext_opts: Vec::new(),
            inert: Vec::new(),
            bypass: Default::default(),
        }
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Action {
    Run(Box<Config>),
    /// Print this text and exit 0 (`-h`, `-V`, `-i`).
    Print(String),
}

/// A refused command line: memcached's message (stderr) and exit code.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: i32,
    pub msg: String,
}

fn refuse<T>(code: i32, msg: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        code,
        msg: msg.into(),
    })
}

/// C's `atoi`: leading blanks, a sign, digits; 0 if none; wraps like a 32-bit int.
pub fn atoi(s: &str) -> i32 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, d) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for c in d.bytes().take_while(u8::is_ascii_digit) {
        v = (v * 10 + i64::from(c - b'0')) & 0xffff_ffff_ffff;
    }
    (if neg { -v } else { v }) as i32
}

/// C's `atof` (0.0 if nothing parses).
fn atof(s: &str) -> f64 {
    let t = s.trim_start();
    let end = t
        .char_indices()
        .take_while(|&(i, c)| {
            c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+')) || c == 'e'
        })
        .last()
        .map_or(0, |(i, c)| i + c.len_utf8());
    (0..=end)
        .rev()
        .find_map(|e| t[..e].parse().ok())
        .unwrap_or(0.0)
}

/// Short options that take a value (memcached's `shortopts` with `:`).
const WITH_VALUE: &str = "apsUmcluPfntDRbBIYeoN";
/// Short options without a value.
const FLAGS: &str = "AZMkhiVrvdLCSFXW";
const LONG: &[(&str, char, bool)] = &[
    ("unix-mask", 'a', true),
    ("enable-shutdown", 'A', false),
    ("enable-ssl", 'Z', false),
    ("port", 'p', true),
    ("unix-socket", 's', true),
    ("udp-port", 'U', true),
    ("memory-limit", 'm', true),
    ("disable-evictions", 'M', false),
    ("conn-limit", 'c', true),
    ("lock-memory", 'k', false),
    ("help", 'h', false),
    ("license", 'i', false),
    ("version", 'V', false),
    ("enable-coredumps", 'r', false),
    ("verbose", 'v', false),
    ("daemon", 'd', false),
    ("listen", 'l', true),
    ("user", 'u', true),
    ("pidfile", 'P', true),
    ("slab-growth-factor", 'f', true),
    ("slab-min-size", 'n', true),
    ("threads", 't', true),
    ("enable-largepages", 'L', false),
    ("max-reqs-per-event", 'R', true),
    ("disable-cas", 'C', false),
    ("listen-backlog", 'b', true),
    ("protocol", 'B', true),
    ("max-item-size", 'I', true),
    ("enable-sasl", 'S', false),
    ("disable-flush-all", 'F', false),
    ("disable-dumping", 'X', false),
    ("disable-watch", 'W', false),
    ("auth-file", 'Y', true),
    ("memory-file", 'e', true),
    ("extended", 'o', true),
    ("napi-ids", 'N', true),
];

/// The flash tier's long options (`--ext-path=FILE:SIZE` is `-o ext_path=FILE:SIZE`).
const EXT_LONG: &[&str] = &[
    "path",
    "item-size",
    "page-size",
    "wbuf-size",
    "recache-rate",
    "item-age",
];

/// The pseudo option getopt returns for inkcached's own long options: "name\0value".
const BYPASS: char = '\u{1}';

/// getopt_long over `args` (without the program name): (option, value) pairs, or getopt's
/// complaint (which memcached follows with `Illegal argument "?"`).
fn getopt(prog: &str, args: &[String]) -> Result<Vec<(char, Option<String>)>, Refusal> {
    let bad = |m: String| refuse(1, format!("{prog}: {m}\nIllegal argument \"?\""));
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        if let Some(name) = a.strip_prefix("--ext-") {
            // the flash tier's long options, as `-o ext_*`
            let (name, val) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (name, None),
            };
            if EXT_LONG.contains(&name) {
                let v = match val {
                    Some(v) => v,
                    None if i < args.len() => {
                        i += 1;
                        args[i - 1].clone()
                    }
                    None => return bad(format!("option '--ext-{name}' requires an argument")),
                };
                out.push(('o', Some(format!("ext_{}={v}", name.replace('-', "_")))));
                continue;
            }
        }
        if let Some(l) = a.strip_prefix("--") {
            // inkcached's own options (exact names only: no prefix of memcached's is taken)
            let (name, val) = match l.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (l, None),
            };
            if let Some(&(_, arg)) = crate::bypass::LONG.iter().find(|o| o.0 == name) {
                let v = match (arg, val) {
                    (false, None) => None,
                    (false, Some(_)) => {
                        return bad(format!("option '--{name}' doesn't allow an argument"))
                    }
                    (true, Some(v)) => Some(v),
                    (true, None) if i < args.len() => {
                        i += 1;
                        Some(args[i - 1].clone())
                    }
                    (true, None) => return bad(format!("option '--{name}' requires an argument")),
                };
                out.push((BYPASS, Some(format!("{name}\0{}", v.unwrap_or_default()))));
                continue;
            }
            let (name, val) = match l.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (l, None),
            };
            let exact = LONG.iter().find(|o| o.0 == name);
            let hits: Vec<_> = LONG.iter().filter(|o| o.0.starts_with(name)).collect();
            let o = match (exact, hits.len()) {
                (Some(o), _) => o,
                (None, 1) => hits[0],
                (None, 0) => return bad(format!("unrecognized option '--{name}'")),
                (None, _) => {
                    let mut m = format!("option '{a}' is ambiguous; possibilities:");
                    for h in &hits {
                        let _ = write!(m, " '--{}'", h.0);
                    }
                    return bad(m);
                }
            };
            if o.2 {
                let v = match val {
                    Some(v) => v,
                    None if i < args.len() => {
                        i += 1;
                        args[i - 1].clone()
                    }
                    None => return bad(format!("option '--{}' requires an argument", o.0)),
                };
                out.push((o.1, Some(v)));
            } else if val.is_some() && o.1 != 'v' {
                return bad(format!("option '--{}' doesn't allow an argument", o.0));
            } else {
                out.push((o.1, None));
            }
            continue;
        }
        let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
            // memcached ignores operands.
            continue;
        };
        for (k, c) in cluster.char_indices() {
            if WITH_VALUE.contains(c) {
                let rest = &cluster[k + c.len_utf8()..];
                let v = if !rest.is_empty() {
                    rest.to_string()
                } else if i < args.len() {
                    i += 1;
                    args[i - 1].clone()
                } else {
                    return bad(format!("option requires an argument -- '{c}'"));
                };
                out.push((c, Some(v)));
                break;
            } else if FLAGS.contains(c) {
                out.push((c, None));
            } else {
                return bad(format!("invalid option -- '{c}'"));
            }
        }
    }
    Ok(out)
}

/// Parses memcached's command line (`args[0]` is the program name).
pub fn parse(args: &[String]) -> Result<Action, Refusal> {
    let mut c = Config {
        prog: args.first().cloned().unwrap_or_else(|| "inkcached".into()),
        ..Default::default()
    };
    let mut protocol_specified = false;
    let mut tcp_specified = false;
    let mut udp_specified = false;
    let mut slab_chunk_changed = false;
    let mut slab_sizes: Option<String> = None;
    for (opt, val) in getopt(&c.prog, &args[1.min(args.len())..])? {
        let v = val.unwrap_or_default();
        match opt {
            BYPASS => {
                let (name, val) = v.split_once('\0').unwrap_or((&v, ""));
                let has = crate::bypass::LONG.iter().any(|o| o.0 == name && o.1);
                c.bypass.set(name, has.then(|| val.to_string()));
            }
            'A' => c.shutdown_enabled = true,
            'Z' => return refuse(EX_USAGE, "This server is not built with TLS support."),
            'a' => c.unix_mask = u32::from_str_radix(octal_prefix(&v), 8).unwrap_or(0),
            'U' => {
                c.udp_port = atoi(&v);
                udp_specified = true;
            }
            'p' => {
                c.port = atoi(&v);
                tcp_specified = true;
            }
            's' => c.socket_path = Some(v),
            'm' => c.maxbytes = (atoi(&v) as usize).wrapping_mul(1 << 20),
            'M' => c.evict = false,
            'c' => {
                c.maxconns = atoi(&v);
                if c.maxconns <= 0 {
                    return refuse(1, "Maximum connections must be greater than 0");
                }
            }
            'h' => return Ok(Action::Print(usage(&c))),
            'i' => return Ok(Action::Print(LICENSE.into())),
            'V' => return Ok(Action::Print(format!("{}\n", crate::exec::VERSION_LINE))),
            'k' => c.lock_memory = true,
            'v' => c.verbose += 1,
            'l' => match &mut c.listen {
                Some(l) if l.contains(v.as_str()) => {}
                Some(l) => {
                    l.push(',');
                    l.push_str(&v);
                }
                None => c.listen = Some(v),
            },
            'd' => c.daemonize = true,
            'r' => c.maxcore = true,
            'R' => {
                c.reqs_per_event = atoi(&v);
                if c.reqs_per_event == 0 {
                    return refuse(1, "Number of requests per event must be greater than 0");
                }
            }
            'u' => c.user = Some(v),
            'P' => c.pid_file = Some(v),
            'e' => {
                return refuse(
                    EX_USAGE,
                    "-e (restartable cache in a memory file) is not supported by inkcached",
                )
            }
            'f' => {
                c.factor = atof(&v);
                if c.factor <= 1.0 {
                    return refuse(1, "Factor must be greater than 1");
                }
            }
            'n' => {
                c.chunk_size = atoi(&v);
                if c.chunk_size == 0 {
                    return refuse(1, "Chunk size must be greater than 0");
                }
            }
            't' => {
                c.threads = atoi(&v);
                if c.threads <= 0 {
                    return refuse(1, "Number of threads must be greater than 0");
                }
                if c.threads > 64 {
                    eprintln!("WARNING: Setting a high number of worker threads is not recommended.\n Set this value to the number of cores in your machine or less.");
                }
            }
            'D' => {
                let Some(&d) = v.as_bytes().first() else {
                    return refuse(1, "No delimiter specified");
                };
                c.prefix_delimiter = d;
                c.detail_enabled = true;
            }
            'L' => {
                c.large_pages = true;
                c.inert
                    .push("-L (items are allocated one by one; no large pages)".into());
            }
            'C' => c.use_cas = false,
            'b' => c.backlog = atoi(&v),
            'B' => {
                protocol_specified = true;
                c.protocol = match v.as_str() {
                    "auto" => Proto::Auto,
                    "binary" => Proto::Binary,
                    "ascii" => Proto::Ascii,
                    _ => {
                        return refuse(
                            EX_USAGE,
                            format!("Invalid value for binding protocol: {v}\n -- should be one of auto, binary, or ascii"),
                        )
                    }
                };
            }
            'I' => c.item_size_max = item_size(&v),
            'S' => return refuse(EX_USAGE, "This server is not built with SASL support."),
            'F' => c.flush_enabled = false,
            'X' => c.dump_enabled = false,
            'W' => c.watch_enabled = false,
            'Y' => c.auth_file = Some(v),
            'N' => {
                c.napi_ids = atoi(&v);
                if c.napi_ids <= 0 {
                    return refuse(1, "Maximum number of NAPI IDs must be greater than 0");
                }
            }
            'o' => {
                for sub in v.split(',').filter(|s| !s.is_empty()) {
                    suboption(&mut c, sub, &mut slab_sizes, &mut slab_chunk_changed)?;
                }
            }
            _ => return refuse(1, format!("Illegal argument \"{opt}\"")),
        }
    }
    validate(
        &mut c,
        protocol_specified,
        tcp_specified,
        udp_specified,
        slab_chunk_changed,
        slab_sizes,
    )?;
    Ok(Action::Run(Box::new(c)))
}

fn octal_prefix(s: &str) -> &str {
    let s = s.trim_start();
    let end = s
        .find(|ch: char| !('0'..='7').contains(&ch))
        .unwrap_or(s.len());
    if end == 0 {
        "0"
    } else {
        &s[..end]
    }
}

/// `-I`: bytes, or a number with k/m (any case), computed in a C `int` as memcached does.
fn item_size(v: &str) -> i32 {
    match v.as_bytes().last() {
        Some(b'k' | b'K') => atoi(&v[..v.len() - 1]).wrapping_mul(1024),
        Some(b'm' | b'M') => atoi(&v[..v.len() - 1]).wrapping_mul(1024 * 1024),
        _ => atoi(v),
    }
}
