//! inkcached: a memcached-compatible server. See README.md.

mod admin;
mod afxdp;
mod auth;
mod binexec;
mod bypass;
mod config;
mod conns;
mod coop;
mod exec;
mod ext;
mod meta;
mod net;
mod session;
mod slabs;
mod stats;
mod steer;
mod store;
mod watch;

use anyhow::Context;
use config::{Action, Config, Proto, EX_NOUSER, EX_OSERR};
use exec::{Runtime, Shared};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// A start-up failure: memcached's message and exit code.
struct Fatal(i32, String);

impl<E: std::fmt::Display> From<E> for Fatal {
    fn from(e: E) -> Self {
        Fatal(EX_OSERR, format!("inkcached: {e:#}"))
    }
}

/// One `-l` entry: address (None: every address), its own port, its own protocol.
struct ListenSpec {
    host: Option<String>,
    port: Option<i32>,
    proto: Option<Proto>,
}

/// memcached's `-l` syntax: entries split by `,` or `;`, each
/// `[proto[ascii|binary|negotiating]:][tag[...]:]host[:port]`, `[v6]:port` or `*`.
fn listen_specs(inter: &str) -> Result<Vec<ListenSpec>, Fatal> {
    let mut out = Vec::new();
    for mut p in inter.split([',', ';']).filter(|p| !p.is_empty()) {
        let mut proto = None;
        if let Some(rest) = p.strip_prefix("proto[") {
            let Some((name, rest)) = rest.split_once(']') else {
                return Err(Fatal(EX_OSERR, format!("Invalid protocol spec: \"{p}\"")));
            };
            proto = match name {
                "ascii" => Some(Proto::Ascii),
                "binary" => Some(Proto::Binary),
                "negotiating" => Some(Proto::Auto),
                _ => None,
            };
            p = rest.strip_prefix(':').unwrap_or(rest);
        }
        if let Some(rest) = p.strip_prefix("tag[") {
            let Some((_, rest)) = rest.split_once(']') else {
                return Err(Fatal(
                    EX_OSERR,
                    format!("Invalid tag in socket config: \"{p}\""),
                ));
            };
            p = rest.strip_prefix(':').unwrap_or(rest);
        }
        let (host, port) = if let Some(rest) = p.strip_prefix('[') {
            let Some((h, rest)) = rest.split_once(']') else {
                return Err(Fatal(EX_OSERR, format!("Invalid IPV6 address: \"{p}\"")));
            };
            (h, rest.strip_prefix(':'))
        } else {
            match p.split_once(':') {
                Some((h, port)) if !port.contains(':') => (h, Some(port)),
                _ => (p, None),
            }
        };
        let port = match port {
            Some(s) => match inkproto::num::strtol32(s.as_bytes()) {
                Some(v) => Some(v),
                None => return Err(Fatal(EX_OSERR, format!("Invalid port number: \"{s}\""))),
            },
            None => None,
        };
        out.push(ListenSpec {
            host: (host != "*").then(|| host.to_string()),
            port,
            proto,
        });
    }
    Ok(out)
}

/// The addresses of one spec (getaddrinfo, as memcached resolves them).
fn resolve(spec: &ListenSpec, port: u16) -> Result<Vec<SocketAddr>, String> {
    match &spec.host {
        None => Ok(vec![
            SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port),
            SocketAddr::new(IpAddr::from([0u16; 8]), port),
        ]),
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) => Ok(vec![SocketAddr::new(ip, port)]),
            Err(_) => (h.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect())
                .map_err(|e| format!("getaddrinfo(): {e}")),
        },
    }
}

/// Binds the TCP and UDP sockets of every listener; the ports bound go to
/// `$MEMCACHED_PORT_FILENAME` as memcached writes them.
fn bind_all(
    cfg: &Config,
    per_worker: &mut [net::WorkerSockets],
    sh_ports: &Runtime,
) -> Result<(), Fatal> {
    let n = per_worker.len();
    let specs = match &cfg.listen {
        Some(l) => listen_specs(l)?,
        None => vec![ListenSpec {
            host: None,
            port: None,
            proto: None,
        }],
    };
    let mut portfile = String::new();
    let mut tcp_lines = 0;
    // UDP first: once TCP accepts (what clients take for "ready"), datagrams are queued.
    for tcp in [false, true] {
        let port = if tcp { cfg.port } else { cfg.udp_port };
        if port == 0 {
            continue;
        }
        let kind = if tcp { "TCP" } else { "UDP" };
        let fail = |e: String| {
            let m = match &cfg.listen {
                None => format!("failed to listen on {kind} port {port}: {e}"),
                Some(l) => format!("failed to listen on one of interface(s) {l}: {e}"),
            };
            Fatal(EX_OSERR, m)
        };
        for spec in &specs {
            let p = spec.port.unwrap_or(port);
            let p = if p == -1 { 0 } else { p as u16 };
            let addrs = resolve(spec, p).map_err(|e| Fatal(EX_OSERR, e))?;
            let mut bound = 0;
            let mut last_err = None;
            for a in addrs {
                match net::bind_group(a, tcp, n) {
                    Ok(v) => {
                        let real = v[0]
                            .local_addr()
                            .ok()
                            .and_then(|a| a.as_socket())
                            .map_or(p, |a| a.port());
                        let fam = if a.is_ipv6() { "INET6" } else { "INET" };
                        let line = format!("{kind} {fam}: {real}\n");
                        // memcached lists TCP first
                        if tcp {
                            portfile.insert_str(tcp_lines, &line);
                            tcp_lines += line.len();
                        } else {
                            portfile.push_str(&line);
                        }
                        let r = if tcp {
                            &sh_ports.tcp_port
                        } else {
                            &sh_ports.udp_port
                        };
                        r.store(u32::from(real), Ordering::Relaxed);
                        for (w, s) in v.into_iter().enumerate() {
                            if tcp {
                                per_worker[w]
                                    .tcp
                                    .push((s, spec.proto.unwrap_or(cfg.protocol)));
                            } else {
                                per_worker[w].udp.push(s);
                            }
                        }
                        bound += 1;
                    }
                    Err(e) => {
                        // memcached skips addresses that do not bind (no IPv6 here) as long
                        // as one does
                        last_err = Some(match e.root_cause().downcast_ref::<std::io::Error>() {
                            Some(io) => strerror(io),
                            None => format!("{e:#}"),
                        });
                    }
                }
            }
            if bound == 0 {
                return Err(fail(last_err.unwrap_or_default()));
            }
        }
    }
    if let Some(f) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        let mut tmp = f.clone();
        tmp.push(".lck");
        let _ = std::fs::write(&tmp, portfile).and_then(|_| std::fs::rename(&tmp, &f));
    }
    Ok(())
}

/// C's `strerror` of an I/O error (without Rust's " (os error N)").
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `-s`: the unix socket, with permissions `-a`.
fn bind_unix(path: &str, mask: u32) -> Result<std::os::unix::net::UnixListener, Fatal> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    // SAFETY: umask only changes this process's file creation mask.
    let old = unsafe { libc::umask(!(mask & 0o777) as libc::mode_t) };
    let r = std::os::unix::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let l = r.map_err(|e| {
        Fatal(
            EX_OSERR,
            format!("failed to listen on UNIX socket: {path}: {}", strerror(&e)),
        )
    })?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The flash tier's configuration from the `-o ext_*` options (see [`Config::ext_opts`]).
fn ext_config(cfg: &Config) -> Result<Option<ext::ExtConfig>, Fatal> {
    let mut o = ext::ExtOpts::default();
    let bad = |e: anyhow::Error| Fatal(1, format!("{e:#}"));
    for (k, v) in &cfg.ext_opts {
        if !ext::parse_opt(&mut o, k, v.as_deref()).map_err(bad)? {
            return Err(Fatal(1, format!("Illegal suboption \"{k}\"")));
        }
    }
    o.config(cfg.item_size_max as usize).map_err(bad)
}

fn set_rlimits(cfg: &Config) -> Result<(), Fatal> {
    if cfg.maxcore {
        let inf = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain rlimit calls on valid structs.
        unsafe {
            if libc::setrlimit(libc::RLIMIT_CORE, &inf) != 0 {
                let mut cur: libc::rlimit = std::mem::zeroed();
                libc::getrlimit(libc::RLIMIT_CORE, &mut cur);
                cur.rlim_cur = cur.rlim_max;
                libc::setrlimit(libc::RLIMIT_CORE, &cur);
            }
            let mut cur: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_CORE, &mut cur) != 0 || cur.rlim_cur == 0 {
                return Err(Fatal(EX_OSERR, "failed to ensure corefile creation".into()));
            }
        }
    }
    let lim = libc::rlimit {
        rlim_cur: cfg.maxconns as libc::rlim_t,
        rlim_max: cfg.maxconns as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(Fatal(EX_OSERR, "failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value.".into()));
    }
    Ok(())
}

/// `-u`: when started as root, become that user (memcached refuses root without `-u`;
/// inkcached stays root then, since the kernel cache's tooling runs it so).
fn switch_user(cfg: &Config) -> Result<(), Fatal> {
    // SAFETY: getuid/geteuid have no preconditions.
    let root = unsafe { libc::getuid() == 0 || libc::geteuid() == 0 };
    let Some(user) = cfg.user.as_deref().filter(|u| root && !u.is_empty()) else {
        return Ok(());
    };
    let cuser = std::ffi::CString::new(user).map_err(|_| {
        Fatal(
            EX_NOUSER,
            format!("can't find the user {user} to switch to"),
        )
    })?;
    // SAFETY: getpwnam takes a NUL-terminated name and returns a pointer to static storage
    // (or null), read at once before any other call that could overwrite it.
    let pw = unsafe { libc::getpwnam(cuser.as_ptr()) };
    if pw.is_null() {
        return Err(Fatal(
            EX_NOUSER,
            format!("can't find the user {user} to switch to"),
        ));
    }
    // SAFETY: `pw` is non-null and points to a valid passwd entry.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    if uid == 0 {
        return Ok(());
    }
    // SAFETY: plain credential calls; failures are checked.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) < 0 {
            let e = std::io::Error::last_os_error();
            eprintln!("failed to drop supplementary groups: {e}");
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(Fatal(EX_OSERR, String::new()));
            }
        }
        if libc::setgid(gid) < 0 || libc::setuid(uid) < 0 {
            return Err(Fatal(
                EX_OSERR,
                format!("failed to assume identity of user {user}"),
            ));
        }
    }
    Ok(())
}

/// `-d`: fork (the parent exits 0), new session, cwd `/` unless `-r`, stdio to /dev/null
/// unless `-v`. Called before any thread exists.
fn daemonize(cfg: &Config) -> Result<(), Fatal> {
    // SAFETY: no other thread exists yet (this runs before the workers start), so fork is
    // safe; the child continues with a copy of this single thread.
    match unsafe { libc::fork() } {
        -1 => return Err(Fatal(1, "failed to daemon() in order to daemonize".into())),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: setsid has no preconditions.
    if unsafe { libc::setsid() } == -1 {
        return Err(Fatal(1, "failed to daemon() in order to daemonize".into()));
    }
    if !cfg.maxcore {
        let _ = std::env::set_current_dir("/");
    }
    if cfg.verbose == 0 {
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this process.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    Ok(())
}

fn save_pid(path: &str) {
    if let Ok(old) = std::fs::read_to_string(path) {
        if let Some(pid) = inkproto::num::strtoul32(old.trim_end().as_bytes()) {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 {
                eprintln!("WARNING: The pid file contained the following (running) pid: {pid}");
            }
        }
    }
    let tmp = format!("{path}.tmp");
    let r = std::fs::write(&tmp, format!("{}\n", std::process::id()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        eprintln!("Could not open the pid file {tmp} for writing: {e}");
    }
}

fn run(cfg: Config) -> Result<(), Fatal> {
    let ext_cfg = ext_config(&cfg)?;
    set_rlimits(&cfg)?;
    switch_user(&cfg)?;
    if cfg.daemonize {
        // SAFETY: ignoring SIGHUP during the fork only changes signal delivery.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        daemonize(&cfg)?;
    }
    // The signals are caught from here on, before any port opens: a SIGTERM sent as soon as
    // the port accepts (a supervisor's stop, a test) is a clean shutdown, not the default
    // action's kill. They are read once the workers run; one that came before waits for it.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGUSR1,
        signal_hook::consts::SIGHUP,
    ])?;
    // A client that goes away must not kill us.
    // SAFETY: setting SIGPIPE to SIG_IGN is async-signal-safe and affects only signal delivery.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    if cfg.lock_memory {
        // SAFETY: mlockall has no memory-safety preconditions.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            eprintln!(
                "warning: -k invalid, mlockall() failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let users = match &cfg.auth_file {
        Some(f) => auth::load(f).map_err(|m| Fatal(1, m))?,
        None => Vec::new(),
    };
    if cfg.verbose > 0 {
        for i in &cfg.inert {
            eprintln!("inkcached: accepted {i}: nothing to set in inkcached");
        }
    }
    let n = cfg.threads as usize;
    let rt = Runtime::new(&cfg);
    let mut per_worker: Vec<net::WorkerSockets> = (0..n)
        .map(|_| net::WorkerSockets {
            tcp: Vec::new(),
            udp: Vec::new(),
            xsk: Vec::new(),
            unix: None,
        })
        .collect();
    let mut sockets = 0;
    match &cfg.socket_path {
        Some(path) => {
            let l = bind_unix(path, cfg.unix_mask)?;
            for p in per_worker.iter_mut() {
                p.unix = Some((l.try_clone()?, path.clone()));
            }
            sockets += 1;
        }
        None => {
            bind_all(&cfg, &mut per_worker, &rt)?;
            sockets += per_worker
                .iter()
                .map(|p| p.tcp.len() + p.udp.len())
                .sum::<usize>()
                / n;
        }
    }
    if sockets as i64 + i64::from(conns::RESERVED_FDS) >= i64::from(cfg.maxconns) - 1 {
        return Err(Fatal(
            1,
            "Maxconns setting is too low, use -c to increase.".into(),
        ));
    }
    // the kernel-bypass options, on the bound UDP sockets (their addresses and port)
    let mut udp_addrs: Vec<IpAddr> = Vec::new();
    let mut udp_port = 0;
    for s in per_worker.first().map_or(&[][..], |p| &p.udp[..]) {
        if let Some(a) = s.local_addr().ok().and_then(|a| a.as_socket()) {
            udp_port = a.port();
            if !udp_addrs.contains(&a.ip()) {
                udp_addrs.push(a.ip());
            }
        }
    }
    let bypass = bypass::setup(
        &cfg.bypass,
        n,
        udp_port,
        &udp_addrs,
        &mut per_worker,
        cfg.verbose > 0,
    )
    .map_err(|e| Fatal(EX_OSERR, format!("inkcached: {e:#}")))?;
    net::PIN_WORKERS.store(bypass.pin_workers, Ordering::Relaxed);
    // TCP last: a client takes an accepted connection for "ready"
    net::listen(&per_worker, cfg.backlog)
        .map_err(|e| Fatal(EX_OSERR, format!("inkcached: {e:#}")))?;
    if let Some(p) = &cfg.pid_file {
        save_pid(p);
    }
    let opts = store::StoreOpts {
        use_cas: cfg.use_cas,
        evict: cfg.evict,
        slabs: slabs::Slabs::new(&cfg),
    };
    let cfg = Arc::new(cfg);
    let shared = Arc::new(Shared {
        store: store::Store::with_ext(
            cfg.maxbytes,
            cfg.item_size_max as usize,
            opts,
            ext::open_or_log(ext_cfg),
        ),
        workers: (0..n).map(|_| Default::default()).collect(),
        cfg: cfg.clone(),
        rt,
        shutdown: AtomicBool::new(false),
        pid: std::process::id(),
        conns: Default::default(),
        prefixes: Mutex::new(Default::default()),
        auth: RwLock::new(users),
    });

    let mut wakers = Vec::new();
    let mut polls = Vec::new();
    for _ in 0..n {
        let (poll, waker) = net::new_poll()?;
        polls.push(poll);
        wakers.push(waker);
    }
    let _ = watch::WATCH.wakers.set(wakers);
    watch::BUF_LIMIT.store(cfg.watcher_logbuf_size as usize, Ordering::Relaxed);
    let mut handles = Vec::new();
    if shared.store.ext().is_some() {
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name("ext-maintainer".into())
                .spawn(move || sh.store.run_ext_maintainer(&sh.shutdown))
                .context("spawning the flash maintainer")?,
        );
    }
    for (w, (socks, poll)) in per_worker.into_iter().zip(polls).enumerate() {
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    if let Err(e) = net::run_worker(w, sh.clone(), socks, poll) {
                        eprintln!("inkcached: worker {w}: {e:#}");
                        sh.shutdown.store(true, Ordering::Relaxed);
                        // SAFETY: raise only queues a signal for this process.
                        unsafe { libc::raise(libc::SIGTERM) };
                    }
                })
                .context("spawning worker")?,
        );
    }
    if cfg.verbose > 0 {
        eprintln!(
            "inkcached {}: tcp {} udp {}, {n} threads, {} MB, {} shards",
            exec::VERSION,
            shared.rt.tcp_port.load(Ordering::Relaxed) as i32,
            shared.rt.udp_port.load(Ordering::Relaxed) as i32,
            cfg.maxbytes >> 20,
            shared.store.shard_count()
        );
    }
    let mut graceful = false;
    for sig in signals.forever() {
        match sig {
            signal_hook::consts::SIGHUP => {
                if let Some(f) = &cfg.auth_file {
                    match auth::load(f) {
                        Ok(u) => *shared.auth.write().unwrap_or_else(|e| e.into_inner()) = u,
                        Err(m) => eprintln!("{m}"),
                    }
                }
            }
            signal_hook::consts::SIGUSR1 => {
                graceful = true;
                break;
            }
            s => {
                if cfg.verbose > 0 {
                    let name = if s == signal_hook::consts::SIGINT {
                        "Interrupt"
                    } else {
                        "Terminated"
                    };
                    eprintln!("Signal handled: {name}.");
                }
                break;
            }
        }
    }
    if graceful {
        eprintln!("Gracefully stopping");
    } else if cfg.verbose > 0 {
        eprintln!("Exiting normally");
    }
    shared.shutdown.store(true, Ordering::Relaxed);
    if let Some(wk) = watch::WATCH.wakers.get() {
        for w in wk {
            let _ = w.wake();
        }
    }
    for h in handles {
        let _ = h.join();
    }
    drop(bypass);
    if cfg.daemonize {
        if let Some(p) = &cfg.pid_file {
            let _ = std::fs::remove_file(p);
        }
    }
    if let Some(p) = &cfg.socket_path {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cfg = match config::parse(&args) {
        Ok(Action::Run(c)) => *c,
        Ok(Action::Print(text)) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            std::process::exit(0);
        }
        Err(r) => {
            eprintln!("{}", r.msg);
            std::process::exit(r.code);
        }
    };
    if let Err(Fatal(code, msg)) = run(cfg) {
        if !msg.is_empty() {
            eprintln!("{msg}");
        }
        std::process::exit(code);
    }
}
