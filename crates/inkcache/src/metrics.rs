//! Prometheus metrics (`inkcache metrics`): every kernel-cache counter and the cache's fill level,
//! per attachment, and the `stats` of memcached-protocol servers (stock memcached, inkcached)
//! read over TCP the way memcached_exporter reads them, under memcached_exporter's metric names,
//! so its dashboards and alerts keep working.
use std::{
    fmt::Write as _,
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpStream, ToSocketAddrs},
    time::Duration,
};

use anyhow::{bail, Context, Result};

use crate::{status, Stats};

/// A memcached-protocol server to scrape: `HOST:PORT`, optionally `@NETNS` (a name under
/// /run/netns) when it is reached from inside a network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub addr: String,
    pub netns: Option<String>,
}

impl std::str::FromStr for Server {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, netns) = match s.rsplit_once('@') {
            Some((a, n)) if !n.is_empty() => (a, Some(n.to_string())),
            _ => (s, None),
        };
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(format!(
                "bad server {s}: expected HOST:PORT or HOST:PORT@NETNS"
            ));
        }
        Ok(Server {
            addr: addr.to_string(),
            netns,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Counter,
    Gauge,
}

/// Metric families in the text exposition format: each family's HELP and TYPE once, then its
/// samples, families in the order first seen.
#[derive(Default)]
pub struct Families {
    fams: Vec<Family>,
}

/// Name, help, type and samples (labels, value).
type Family = (String, String, Kind, Vec<(String, f64)>);

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(l: &[(&str, &str)]) -> String {
    if l.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

impl Families {
    fn add(&mut self, name: &str, help: &str, kind: Kind, l: &[(&str, &str)], v: f64) {
        let i = match self.fams.iter().position(|f| f.0 == name) {
            Some(i) => i,
            None => {
                self.fams.push((name.into(), help.into(), kind, Vec::new()));
                self.fams.len() - 1
            }
        };
        self.fams[i].3.push((labels(l), v));
    }

    fn counter(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: f64) {
        self.add(name, help, Kind::Counter, l, v)
    }

    fn gauge(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: f64) {
        self.add(name, help, Kind::Gauge, l, v)
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
        for (name, help, kind, samples) in &self.fams {
            let help = help.replace('\\', "\\\\").replace('\n', " ");
            let kind = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (l, v) in samples {
                let _ = writeln!(o, "{name}{l} {v}");
            }
        }
        o
    }
}

/// The kernel cache's metrics: one series per attachment (interfaces attached together share
/// their counters and cache, so they are one series, `iface="eth0,lo"`).
pub fn kernel(f: &mut Families, all_netns: bool) -> Result<()> {
    let mut seen: Vec<(Option<String>, u64, Vec<String>)> = Vec::new();
    for r in status::rows(all_netns)? {
        let i = &r.info;
        let key = (i.netns.clone(), i.netns_cookie, i.group.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let dir = std::path::Path::new(&r.pin_dir);
        let stats = match Stats::read(dir) {
            Ok(s) => s,
            // being detached by another inkcache between listing and reading: not an error
            Err(_) if !dir.join("stats").exists() => {
                eprintln!("inkcache: {}: detached meanwhile", dir.display());
                continue;
            }
            Err(e) => return Err(e),
        };
        let iface = i.group.join(",");
        let netns = i.netns.clone().unwrap_or_default();
        let l = [("iface", iface.as_str()), ("netns", netns.as_str())];
        f.gauge(
            "inkcache_info",
            "The attachment: its XDP mode and the interfaces that share its cache (always 1).",
            &[
                ("iface", &iface),
                ("netns", &netns),
                ("xdp_mode", &i.xdp_mode),
                ("version", env!("CARGO_PKG_VERSION")),
            ],
            1.0,
        );
        for (prog, on) in [
            ("xdp", r.xdp_attached),
            ("hooks", r.hooks_attached),
            ("tc_ingress", r.tc_ingress_attached),
        ] {
            f.gauge(
                "inkcache_attached",
                "Whether the program recorded at attach is still the one on the interface \
                 (0: removed or replaced by someone else, or not checked).",
                &[("iface", &i.iface), ("netns", &netns), ("program", prog)],
                on as u8 as f64,
            );
        }
        let help = Stats::help();
        for (name, v) in stats.fields() {
            let h = help.iter().find(|(n, _)| *n == name).map_or("", |x| x.1);
            f.counter(&format!("inkcache_{name}_total"), h, &l, v as f64);
        }
        f.gauge(
            "inkcache_current_items",
            "Items the kernel can answer now.",
            &l,
            r.fill.items as f64,
        );
        f.gauge(
            "inkcache_current_bytes",
            "Bytes of the items the kernel can answer now (in its item log).",
            &l,
            r.fill.item_bytes_stored as f64,
        );
        f.gauge(
            "inkcache_limit_items",
            "Items the cache's index can hold (sets times ways).",
            &l,
            i.layout.ways() as f64,
        );
        f.gauge(
            "inkcache_limit_bytes",
            "Memory of the cache (index and item log), from --cache-mb.",
            &l,
            r.cache_bytes as f64,
        );
    }
    Ok(())
}

/// Reads a server's `stats` over TCP: (name, value) pairs in its order.
pub fn scrape(server: &Server, timeout: Duration) -> Result<Vec<(String, String)>> {
    let go = || -> Result<Vec<(String, String)>> {
        let addrs: Vec<SocketAddr> = server
            .addr
            .to_socket_addrs()
            .with_context(|| format!("resolving {}", server.addr))?
            .collect();
        let a = addrs.first().context("no address")?;
        let mut s = TcpStream::connect_timeout(a, timeout)
            .with_context(|| format!("connecting to {}", server.addr))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.write_all(b"stats\r\n")?;
        let mut out = Vec::new();
        let mut rd = BufReader::new(s);
        let mut line = String::new();
        loop {
            line.clear();
            if rd.read_line(&mut line)? == 0 {
                bail!("{} closed the connection in its stats", server.addr);
            }
            let l = line.trim_end();
            if l == "END" {
                return Ok(out);
            }
            let mut w = l.splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("STAT"), Some(k), Some(v)) => out.push((k.into(), v.into())),
                _ => bail!("{} answered stats with {l:?}", server.addr),
            }
        }
    };
    match &server.netns {
        None => go(),
        Some(ns) => crate::ns::in_netns(ns, go)
            .with_context(|| format!("no network namespace {ns} to reach {}", server.addr))?,
    }
}

/// (stat, metric, counter?, help) for the plain `stats` values, as memcached_exporter names them.
const SERVER_STATS: &[(&str, &str, bool, &str)] = &[
    (
        "uptime",
        "memcached_uptime_seconds",
        true,
        "Seconds since the server started.",
    ),
    (
        "time",
        "memcached_time_seconds",
        false,
        "The server's clock (unix time).",
    ),
    (
        "curr_items",
        "memcached_current_items",
        false,
        "Items the server holds now.",
    ),
    (
        "total_items",
        "memcached_items_total",
        true,
        "Items stored since the server started.",
    ),
    (
        "bytes",
        "memcached_current_bytes",
        false,
        "Bytes the server's items take now.",
    ),
    (
        "limit_maxbytes",
        "memcached_limit_bytes",
        false,
        "Memory the server may use for items (-m).",
    ),
    (
        "curr_connections",
        "memcached_current_connections",
        false,
        "Connections open now.",
    ),
    (
        "total_connections",
        "memcached_connections_total",
        true,
        "Connections opened since the server started.",
    ),
    (
        "rejected_connections",
        "memcached_connections_rejected_total",
        true,
        "Connections refused at the connection limit.",
    ),
    (
        "listen_disabled_num",
        "memcached_connections_listener_disabled_total",
        true,
        "Times the server stopped accepting at the connection limit.",
    ),
    (
        "max_connections",
        "memcached_max_connections",
        false,
        "The connection limit (-c).",
    ),
    (
        "evictions",
        "memcached_items_evicted_total",
        true,
        "Live items removed to make room.",
    ),
    (
        "reclaimed",
        "memcached_items_reclaimed_total",
        true,
        "Items stored in the memory of an expired item.",
    ),
    (
        "bytes_read",
        "memcached_read_bytes_total",
        true,
        "Bytes the server read from the network.",
    ),
    (
        "bytes_written",
        "memcached_written_bytes_total",
        true,
        "Bytes the server sent to the network.",
    ),
    (
        "rusage_user",
        "memcached_process_user_cpu_seconds_total",
        true,
        "User CPU time of the server process.",
    ),
    (
        "rusage_system",
        "memcached_process_system_cpu_seconds_total",
        true,
        "System CPU time of the server process.",
    ),
];

/// (stat, command, status) for `memcached_commands_total`.
const COMMANDS: &[(&str, &str, &str)] = &[
    ("get_hits", "get", "hit"),
    ("get_misses", "get", "miss"),
    ("get_expired", "get", "expired"),
    ("get_flushed", "get", "flushed"),
    ("cmd_set", "set", "hit"),
    ("delete_hits", "delete", "hit"),
    ("delete_misses", "delete", "miss"),
    ("incr_hits", "incr", "hit"),
    ("incr_misses", "incr", "miss"),
    ("decr_hits", "decr", "hit"),
    ("decr_misses", "decr", "miss"),
    ("cas_hits", "cas", "hit"),
    ("cas_misses", "cas", "miss"),
    ("cas_badval", "cas", "badval"),
    ("touch_hits", "touch", "hit"),
    ("touch_misses", "touch", "miss"),
    ("cmd_flush", "flush", "hit"),
];

/// A server's metrics; `memcached_up` is 0 (and nothing else is said) if it could not be read.
pub fn server(f: &mut Families, server: &Server, timeout: Duration) {
    let netns = server.netns.clone().unwrap_or_default();
    let l = [("server", server.addr.as_str()), ("netns", netns.as_str())];
    let stats = scrape(server, timeout);
    f.gauge(
        "memcached_up",
        "Whether the server answered `stats`.",
        &l,
        stats.is_ok() as u8 as f64,
    );
    let Ok(stats) = stats else { return };
    let get = |k: &str| stats.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if let Some(v) = get("version") {
        f.gauge(
            "memcached_version",
            "The server's version (always 1).",
            &[l[0], l[1], ("version", v)],
            1.0,
        );
    }
    for (stat, name, counter, help) in SERVER_STATS {
        if let Some(v) = get(stat).and_then(|v| v.parse::<f64>().ok()) {
            if *counter {
                f.counter(name, help, &l, v);
            } else {
                f.gauge(name, help, &l, v);
            }
        }
    }
    for (stat, cmd, status) in COMMANDS {
        if let Some(v) = get(stat).and_then(|v| v.parse::<f64>().ok()) {
            f.counter(
                "memcached_commands_total",
                "Requests by command and outcome.",
                &[l[0], l[1], ("command", cmd), ("status", status)],
                v,
            );
        }
    }
}

/// Everything `inkcache metrics` exports, as exposition text.
pub fn gather(all_netns: bool, servers: &[Server], timeout: Duration) -> Result<String> {
    let mut f = Families::default();
    kernel(&mut f, all_netns)?;
    for s in servers {
        server(&mut f, s, timeout);
    }
    Ok(f.render())
}

/// Serves `/metrics` on `listen` until killed; each scrape reads everything anew.
pub fn serve(
    listen: SocketAddr,
    all_netns: bool,
    servers: &[Server],
    timeout: Duration,
) -> Result<()> {
    let http = tiny_http::Server::http(listen)
        .map_err(|e| anyhow::anyhow!("listening on {listen}: {e}"))?;
    eprintln!("inkcache: serving metrics on http://{listen}/metrics");
    for rq in http.incoming_requests() {
        let path = rq.url().split('?').next().unwrap_or("");
        let resp = match (rq.method(), path) {
            (tiny_http::Method::Get, "/metrics") => match gather(all_netns, servers, timeout) {
                Ok(body) => tiny_http::Response::from_string(body).with_header(
                    "Content-Type: text/plain; version=0.0.4; charset=utf-8"
                        .parse::<tiny_http::Header>()
                        .expect("static header"),
                ),
                Err(e) => {
                    tiny_http::Response::from_string(format!("{e:#}\n")).with_status_code(500)
                }
            },
            (tiny_http::Method::Get, "/") => {
                tiny_http::Response::from_string("inkcache metrics: see /metrics\n".to_string())
            }
            _ => tiny_http::Response::from_string("not found\n".to_string()).with_status_code(404),
        };
        let _ = rq.respond(resp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_specs_parse() {
        assert_eq!(
            "198.18.1.1:11211@pool1".parse::<Server>().unwrap(),
            Server {
                addr: "198.18.1.1:11211".into(),
                netns: Some("pool1".into())
            }
        );
        assert_eq!(
            "[fd00::1]:11211".parse::<Server>().unwrap().addr,
            "[fd00::1]:11211"
        );
        assert!("nohost".parse::<Server>().is_err());
        assert!("h:99999".parse::<Server>().is_err());
    }

    #[test]
    fn families_render_once_with_escaped_labels() {
        let mut f = Families::default();
        f.counter("a_total", "A.", &[("x", "q\"\\\n")], 1.0);
        f.counter("a_total", "A.", &[("x", "2")], 2.0);
        f.gauge("b", "B.", &[], 0.5);
        assert_eq!(
            f.render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\"} 1\n\
             a_total{x=\"2\"} 2\n# HELP b B.\n# TYPE b gauge\nb 0.5\n"
        );
    }

    #[test]
    fn every_counter_has_help() {
        for (name, help) in Stats::help() {
            assert!(!help.is_empty(), "{name} has no documentation");
        }
    }
}
