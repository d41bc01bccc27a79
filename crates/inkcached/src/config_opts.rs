//! The `-o` suboptions, memcached's checks after parsing, and `-h` (a child of `config`).

use super::*;

/// The `-o` keys of memcached's extstore, handed to the flash tier.
const EXT_KEYS: &[&str] = &[
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_path",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "ext_drop_unread",
    "slab_automove_freeratio",
];

/// One `key[=value]` of `-o`.
pub(super) fn suboption(
    c: &mut Config,
    sub: &str,
    slab_sizes: &mut Option<String>,
    slab_chunk_changed: &mut bool,
) -> Result<(), Refusal> {
    let (key, val) = match sub.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (sub, None),
    };
    let need = |what: &str| -> Result<&str, Refusal> {
        val.ok_or_else(|| Refusal {
            code: 1,
            msg: what.to_string(),
        })
    };
    let strtoul = |v: &str| inkproto::num::strtoul32(v.as_bytes());
    match key {
        "maxconns_fast" => c.maxconns_fast = true,
        "no_maxconns_fast" => c.maxconns_fast = false,
        "hashpower" => {
            c.hashpower_init = atoi(need("Missing numeric argument for hashpower")?);
            if c.hashpower_init < 12 {
                return refuse(
                    1,
                    format!(
                        "Initial hashtable multiplier of {} is too low",
                        c.hashpower_init
                    ),
                );
            }
            if c.hashpower_init > 32 {
                return refuse(1, format!("Initial hashtable multiplier of {} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance", c.hashpower_init));
            }
            c.inert
                .push(format!("-o {sub} (the hash table grows as needed)"));
        }
        "no_hashexpand" => c
            .inert
            .push(format!("-o {sub} (the hash table grows as needed)")),
        "slab_reassign" => c.slab_reassign = true,
        "no_slab_reassign" => c.slab_reassign = false,
        "slab_automove" => {
            c.slab_automove = val.map_or(1, atoi);
            if !(0..=2).contains(&c.slab_automove) {
                return refuse(1, "slab_automove must be between 0 and 2");
            }
        }
        "no_slab_automove" => c.slab_automove = 0,
        "slab_automove_ratio" => {
            c.slab_automove_ratio = atof(need("Missing slab_automove_ratio argument")?);
            if c.slab_automove_ratio <= 0.0 || c.slab_automove_ratio > 1.0 {
                return refuse(1, "slab_automove_ratio must be > 0 and < 1");
            }
        }
        "slab_automove_window" => {
            c.slab_automove_window = atoi(need("Missing slab_automove_window argument")?);
            if c.slab_automove_window < 3 {
                return refuse(1, "slab_automove_window must be > 2");
            }
        }
        "tail_repair_time" => {
            c.tail_repair_time = atoi(need("Missing numeric argument for tail_repair_time")?);
            if c.tail_repair_time < 10 {
                return refuse(1, "Cannot set tail_repair_time to less than 10 seconds");
            }
        }
        "hash_algorithm" => {
            c.hash_algorithm = match need("Missing hash_algorithm argument")? {
                "jenkins" => "jenkins",
                "murmur3" => "murmur3",
                "xxh3" => "xxh3",
                _ => return refuse(1, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)"),
            };
        }
        "lru_crawler" => c.lru_crawler = true,
        "no_lru_crawler" => c.lru_crawler = false,
        "lru_crawler_sleep" => {
            c.lru_crawler_sleep = atoi(need("Missing lru_crawler_sleep value")?);
            if !(0..=1_000_000).contains(&c.lru_crawler_sleep) {
                return refuse(1, "LRU crawler sleep must be between 0 and 1 second");
            }
        }
        "lru_crawler_tocrawl" => {
            c.lru_crawler_tocrawl = strtoul(need("Missing lru_crawler_tocrawl value")?)
                .ok_or_else(|| Refusal {
                    code: 1,
                    msg: "lru_crawler_tocrawl takes a numeric 32bit value".into(),
                })?;
        }
        "lru_maintainer" => {
            c.lru_maintainer = true;
            c.lru_segmented = true;
        }
        "no_lru_maintainer" => {
            c.lru_maintainer = false;
            c.lru_segmented = false;
        }
        "hot_lru_pct" | "warm_lru_pct" => {
            let p = atoi(need(&format!("Missing {key} argument"))?);
            if !(1..80).contains(&p) {
                return refuse(1, format!("{key} must be > 1 and < 80"));
            }
            if key == "hot_lru_pct" {
                c.hot_lru_pct = p;
            } else {
                c.warm_lru_pct = p;
            }
        }
        "hot_max_factor" | "warm_max_factor" => {
            let f = atof(need(&format!("Missing {key} argument"))?);
            if f <= 0.0 {
                return refuse(1, format!("{key} must be > 0"));
            }
            if key == "hot_max_factor" {
                c.hot_max_factor = f;
            } else {
                c.warm_max_factor = f;
            }
        }
        "temporary_ttl" => {
            c.temp_lru = true;
            c.temporary_ttl = atoi(need("Missing temporary_ttl argument")?);
        }
        "idle_timeout" => {
            c.idle_timeout = atoi(need("Missing numeric argument for idle_timeout")?);
        }
        "watcher_logbuf_size" => {
            let v = need("Missing watcher_logbuf_size argument")?;
            c.watcher_logbuf_size = strtoul(v)
                .ok_or_else(|| Refusal {
                    code: 1,
                    msg: "could not parse argument to watcher_logbuf_size".into(),
                })?
                .wrapping_mul(1024);
        }
        "worker_logbuf_size" => {
            let v = need("Missing worker_logbuf_size argument")?;
            c.worker_logbuf_size = strtoul(v)
                .ok_or_else(|| Refusal {
                    code: 1,
                    msg: "could not parse argument to worker_logbuf_size".into(),
                })?
                .wrapping_mul(1024);
            // memcached 1.6.18 falls through into slab_sizes here; so does its command line.
            *slab_sizes = Some(v.to_string());
        }
        "slab_sizes" => *slab_sizes = Some(val.unwrap_or_default().to_string()),
        "slab_chunk_max" => {
            match val.and_then(|v| inkproto::num::strtol32(v.as_bytes())) {
                Some(v) => c.slab_chunk_max = v,
                None => eprintln!("could not parse argument to slab_chunk_max"),
            }
            *slab_chunk_changed = true;
        }
        "track_sizes" => c.track_sizes = true,
        "no_inline_ascii_resp" | "inline_ascii_resp" => {}
        "no_chunked_items" => c.slab_chunk_max = c.slab_page_size,
        "modern" => {}
        "no_modern" => {
            if !*slab_chunk_changed {
                c.slab_chunk_max = c.slab_page_size;
            }
            c.slab_reassign = false;
            c.slab_automove = 0;
            c.maxconns_fast = false;
            c.lru_segmented = false;
            c.hash_algorithm = "jenkins";
            c.lru_crawler = false;
            c.lru_maintainer = false;
        }
        "drop_privileges" => {
            c.drop_privileges = true;
            c.inert
                .push(format!("-o {sub} (no seccomp filter in inkcached)"));
        }
        "no_drop_privileges" => c.drop_privileges = false,
        "resp_obj_mem_limit" => {
            eprintln!("DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,")
        }
        "read_buf_mem_limit" => {
            let v = need("Missing read_buf_mem_limit argument")?;
            c.read_buf_mem_limit = strtoul(v)
                .ok_or_else(|| Refusal {
                    code: 1,
                    msg: "could not parse argument to read_buf_mem_limit".into(),
                })?
                .wrapping_mul(1 << 20);
            c.inert.push(format!(
                "-o {sub} (buffers are per connection and shrink when idle)"
            ));
        }
        k if EXT_KEYS.contains(&k) => c.ext_opts.push((k.into(), val.map(str::to_string))),
        _ => return refuse(1, format!("Illegal suboption \"{sub}\"")),
    }
    Ok(())
}

/// memcached's checks after the option loop, in its order.
pub(super) fn validate(
    c: &mut Config,
    protocol_specified: bool,
    tcp_specified: bool,
    udp_specified: bool,
    slab_chunk_changed: bool,
    slab_sizes: Option<String>,
) -> Result<(), Refusal> {
    if c.napi_ids > c.threads {
        return refuse(
            EX_USAGE,
            format!(
                "Number of napi_ids({}) cannot be greater than number of threads({})",
                c.napi_ids, c.threads
            ),
        );
    }
    let ism = c.item_size_max;
    if ism < 1024 {
        return refuse(EX_USAGE, "Item max size cannot be less than 1024 bytes.");
    }
    if ism as usize > c.maxbytes / 2 {
        return refuse(
            EX_USAGE,
            "Cannot set item size limit higher than 1/2 of memory max.",
        );
    }
    if ism > 1 << 30 {
        return refuse(
            EX_USAGE,
            "Cannot set item size limit higher than a gigabyte.",
        );
    }
    if ism > 1 << 20 && !slab_chunk_changed {
        c.slab_chunk_max = c.slab_page_size / 2;
    }
    let scm = c.slab_chunk_max;
    if scm > ism {
        return refuse(
            EX_USAGE,
            format!("slab_chunk_max (bytes: {scm}) cannot be larger than -I (item_size_max {ism})"),
        );
    }
    if scm <= 0 || ism % scm != 0 {
        return refuse(
            EX_USAGE,
            format!("-I (item_size_max: {ism}) must be evenly divisible by slab_chunk_max (bytes: {scm})"),
        );
    }
    if c.slab_page_size % scm != 0 {
        return refuse(
            EX_USAGE,
            format!(
                "slab_chunk_max (bytes: {scm}) must divide evenly into {} (slab_page_size)",
                c.slab_page_size
            ),
        );
    }
    if let Some(s) = slab_sizes {
        c.slab_sizes = Some(parse_slab_sizes(c, &s)?);
    }
    if c.hot_lru_pct + c.warm_lru_pct > 80 {
        return refuse(
            EX_USAGE,
            "hot_lru_pct + warm_lru_pct cannot be more than 80% combined",
        );
    }
    if c.temp_lru && !c.lru_maintainer {
        return refuse(
            EX_USAGE,
            "temporary_ttl requires lru_maintainer to be enabled",
        );
    }
    if c.auth_file.is_some() {
        if !protocol_specified {
            c.protocol = Proto::Ascii;
        } else if c.protocol != Proto::Ascii {
            return refuse(EX_USAGE, "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.");
        }
    }
    if udp_specified && c.udp_port != 0 && !tcp_specified {
        c.port = c.udp_port;
    }
    if c.port > 65535 {
        return refuse(EX_USAGE, format!("ERROR: Invalid port number {}.", c.port));
    }
    if c.auth_file.is_some() && c.udp_port != 0 {
        return refuse(
            EX_USAGE,
            "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
        );
    }
    Ok(())
}

fn parse_slab_sizes(c: &Config, s: &str) -> Result<Vec<u32>, Refusal> {
    if s.is_empty() {
        return refuse(EX_USAGE, "");
    }
    let mut out = Vec::new();
    let mut last = 0u32;
    for p in s.split('-').filter(|p| !p.is_empty()) {
        let size = inkproto::num::strtoul32(p.as_bytes());
        let sz = size.unwrap_or(0);
        if size.is_none()
            || (sz as i64) < i64::from(c.chunk_size)
            || sz as i64 > i64::from(c.slab_chunk_max)
        {
            return refuse(EX_USAGE, format!("slab size {sz} is out of valid range"));
        }
        if last >= sz {
            return refuse(
                EX_USAGE,
                format!("slab size {sz} cannot be lower than or equal to a previous class size"),
            );
        }
        if sz <= last + 8 {
            return refuse(
                EX_USAGE,
                format!("slab size {sz} must be at least 8 bytes larger than previous class"),
            );
        }
        out.push(sz);
        last = sz;
        if out.len() >= 63 {
            return refuse(EX_USAGE, "too many slab classes specified");
        }
    }
    Ok(out)
}

pub(super) fn usage(c: &Config) -> String {
    let d = Config::default();
    let mut u = format!("{}\n", crate::exec::VERSION_LINE);
    let _ = write!(
        u,
        "\
-p, --port=<num>          TCP port (default: {}; -1: a free port, written to $MEMCACHED_PORT_FILENAME)
-U, --udp-port=<num>      UDP port (default: {}, off)
-s, --unix-socket=<file>  UNIX socket to listen on (no TCP or UDP then)
-a, --unix-mask=<mask>    permissions of the UNIX socket, octal (default: {:o})
-A, --enable-shutdown     allow the ascii \"shutdown\" command
-l, --listen=<addr>       addresses to listen on, comma separated, each [proto[ascii|binary]:]host[:port]
                          (default: every address)
-d, --daemon              run in the background
-r, --enable-coredumps    raise the core file size limit
-u, --user=<user>         user to switch to when started as root
-m, --memory-limit=<num>  item memory in megabytes (default: {})
-M, --disable-evictions   answer out of memory instead of evicting
-c, --conn-limit=<num>    most simultaneous connections (default: {})
-k, --lock-memory         lock all memory into RAM (mlockall)
-v, --verbose             log errors and warnings; -vv also requests and answers
-h, --help                this text
-i, --license             license
-V, --version             version
-P, --pidfile=<file>      write the pid to <file> (with -d)
-f, --slab-growth-factor=<num> size ratio of memcached's item size classes, for stats (default: {:.2})
-n, --slab-min-size=<bytes> smallest item size class, for stats (default: {})
-L, --enable-largepages   accepted; inkcached does not use large pages
-D <char>                 key prefix delimiter for per-prefix stats (turns them on)
-t, --threads=<num>       worker threads (default: {})
-R, --max-reqs-per-event  requests served per connection before others get a turn (default: {})
-C, --disable-cas         no CAS values
-b, --listen-backlog=<num> TCP listen backlog (default: {})
-B, --protocol=<name>     ascii, binary or auto (default: auto)
-I, --max-item-size=<num> largest item, with k or m suffix (default: 1m, min: 1k, max: 1024m)
-F, --disable-flush-all   refuse flush_all
-X, --disable-dumping     refuse stats cachedump and lru_crawler metadump
-W, --disable-watch       refuse watch
-Y, --auth-file=<file>    ascii protocol authentication, lines of user:password
-N, --napi-ids=<num>      accepted, checked against -t
-o, --extended            comma separated options (memcached's; most have a no_ form):
   maxconns_fast, hashpower, tail_repair_time, hash_algorithm, lru_crawler, lru_crawler_sleep,
   lru_crawler_tocrawl, read_buf_mem_limit, lru_maintainer, hot_lru_pct, warm_lru_pct,
   hot_max_factor, warm_max_factor, temporary_ttl, idle_timeout (seconds, closes idle clients),
   slab_chunk_max, slab_sizes, watcher_logbuf_size, worker_logbuf_size, track_sizes,
   slab_reassign, slab_automove, modern, no_modern, drop_privileges,
   ext_* (the flash tier: ext_path=<file>:<size>, ext_item_size, ext_item_age, ...)
",
        d.port,
        d.udp_port,
        d.unix_mask,
        d.maxbytes >> 20,
        d.maxconns,
        d.factor,
        d.chunk_size,
        d.threads,
        d.reqs_per_event,
        d.backlog,
    );
    u.push_str("inkcached's kernel-bypass options (see README):\n");
    u.push_str(crate::bypass::Opts::USAGE);
    let _ = c;
    u
}

pub(super) const LICENSE: &str =
    "inkcached is licensed as the inkcache project (see its LICENSE file).\n\
It implements memcached's protocol; memcached is Copyright (c) 2003, Danga Interactive, Inc.\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Result<Config, Refusal> {
        let mut a = vec!["inkcached".to_string()];
        a.extend(s.split_whitespace().map(String::from));
        match parse(&a)? {
            Action::Run(c) => Ok(*c),
            Action::Print(_) => panic!("printed"),
        }
    }

    #[test]
    fn production_line() {
        let c = run(
            "-m 1024 -c 4096 -t 4 -U 11211 -o modern,lru_crawler,slab_reassign -B auto -R 20 -v",
        )
        .unwrap();
        assert_eq!((c.maxbytes, c.maxconns, c.threads), (1 << 30, 4096, 4));
        assert_eq!((c.port, c.udp_port, c.reqs_per_event), (11211, 11211, 20));
        assert_eq!((c.protocol, c.verbose), (Proto::Auto, 1));
    }

    #[test]
    fn getopt_forms() {
        let c =
            run("-vvv -p11212 --memory-l=32 --threads 2 -MC -o ext_path=/x:1g,ext_item_size=10")
                .unwrap();
        assert_eq!(
            (c.verbose, c.port, c.maxbytes, c.threads),
            (3, 11212, 32 << 20, 2)
        );
        assert!(!c.evict && !c.use_cas);
        assert_eq!(c.ext_opts.len(), 2);
        assert_eq!(c.ext_opts[0], ("ext_path".into(), Some("/x:1g".into())));
        assert_eq!(run("-U 5").unwrap().port, 5);
        assert_eq!(
            run("-l a -l b -l a").unwrap().listen.as_deref(),
            Some("a,b")
        );
        assert_eq!(run("-I 2m").unwrap().item_size_max, 2 << 20);
    }

    #[test]
    fn bypass_options() {
        let c = run("--afxdp=eth0 -t 2 --steer --cooperative eth1 -U 5").unwrap();
        assert_eq!(c.bypass.afxdp.as_deref(), Some("eth0"));
        assert_eq!(c.bypass.cooperative.as_deref(), Some("eth1"));
        assert!(c.bypass.steer && c.bypass.steer_cpumap.is_none());
        assert_eq!((c.threads, c.udp_port), (2, 5));
        assert_eq!(
            run("--steer-cpumap veth0").unwrap().bypass.steer_cpumap,
            Some("veth0".into())
        );
        assert!(run("--steer=1").is_err());
        assert!(run("--afxdp").is_err());
        // exact names only: a prefix is not taken for them
        assert!(run("--ste").is_err());
        assert!(!run("-v").unwrap().bypass.steer);
    }

    #[test]
    fn refusals_match_memcached() {
        let e = |s: &str| run(s).unwrap_err();
        assert_eq!(
            e("-c 0"),
            Refusal {
                code: 1,
                msg: "Maximum connections must be greater than 0".into()
            }
        );
        assert_eq!(e("-o foo=1").msg, "Illegal suboption \"foo=1\"");
        assert_eq!(
            e("-x").msg,
            "inkcached: invalid option -- 'x'\nIllegal argument \"?\""
        );
        assert_eq!(
            e("-p").msg,
            "inkcached: option requires an argument -- 'p'\nIllegal argument \"?\""
        );
        assert_eq!(e("--bogus").code, 1);
        assert_eq!(e("-B foo").code, EX_USAGE);
        assert_eq!(
            e("-I 100").msg,
            "Item max size cannot be less than 1024 bytes."
        );
        assert_eq!(
            e("-I 2g").msg,
            "Item max size cannot be less than 1024 bytes."
        );
        assert_eq!(e("-I 100k").code, EX_USAGE);
        assert_eq!(
            e("-m 1 -I 1m").msg,
            "Cannot set item size limit higher than 1/2 of memory max."
        );
        assert_eq!(e("-t 0").code, 1);
        assert_eq!(e("-p 70000").msg, "ERROR: Invalid port number 70000.");
        assert_eq!(
            e("-o hashpower=5").msg,
            "Initial hashtable multiplier of 5 is too low"
        );
        assert_eq!(
            e("-o worker_logbuf_size=5").msg,
            "slab size 5 is out of valid range"
        );
        assert_eq!(e("-o hot_lru_pct=50,warm_lru_pct=40").code, EX_USAGE);
        assert_eq!(e("-N 9").code, EX_USAGE);
        assert_eq!(e("-B binary -Y /x").code, EX_USAGE);
    }
}
