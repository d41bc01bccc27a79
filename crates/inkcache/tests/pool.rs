//! A pool of three memcached servers, each in its own namespace with inkcache attached, and real
//! clients sharding keys by consistent hashing (pylibmc's libmemcached ketama, pymemcache's
//! rendezvous hashing): TCP writes, UDP gets answered by the kernel on the second round, status and
//! metrics of all three from one command, and killing one server loses only its keys.
use std::{collections::HashMap, path::Path, process::Command};

use serde_json::Value;
use testkit::{Netns, Server};

const PORT: u16 = 11211;
const KEYS: usize = 200;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_inkcache")
}

struct Member {
    ns: Netns,
    iface: String,
    addr: String,
    server: Option<Server>,
}

struct Pool {
    client: Netns,
    members: Vec<Member>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for m in &self.members {
            let _ = Command::new(bin())
                .args(["--netns", &m.ns.name, "detach", "--iface", &m.iface])
                .output();
        }
    }
}

fn ip(args: &[&str]) {
    testkit::sh(Command::new("ip").args(args)).unwrap();
}

fn inkcache(args: &[&str]) -> String {
    let out = testkit::sh(Command::new(bin()).args(args)).unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// Three server namespaces joined to one client namespace by a veth each (198.18.1N.1 and .2),
/// memcached in each, inkcache attached to each server end. With `servers_first`, memcached starts
/// before inkcache is attached (as a running server would be).
fn pool(servers_first: bool, extra: &[&str]) -> Pool {
    let client = Netns::new("ikp").unwrap();
    let mut members = Vec::new();
    for i in 1..=3 {
        let ns = Netns::new("ikq").unwrap();
        let (sif, cif) = (testkit::unique("kq"), testkit::unique("kp"));
        ip(&[
            "link", "add", &sif, "netns", &ns.name, "type", "veth", "peer", "name", &cif,
        ]);
        ip(&["link", "set", &cif, "netns", &client.name]);
        ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("198.18.1{i}.1/24"),
            "dev",
            &sif,
        ]);
        ip(&[
            "-n",
            &client.name,
            "addr",
            "add",
            &format!("198.18.1{i}.2/24"),
            "dev",
            &cif,
        ]);
        ip(&["-n", &ns.name, "link", "set", &sif, "up"]);
        ip(&["-n", &client.name, "link", "set", &cif, "up"]);
        inkcache(&["--netns", &client.name, "veth-peer", "--iface", &cif]);
        members.push(Member {
            ns,
            iface: sif,
            addr: format!("198.18.1{i}.1:{PORT}"),
            server: None,
        });
    }
    let mut p = Pool { client, members };
    let start = |m: &mut Member| m.server = Some(Server::start(&m.ns, PORT).unwrap());
    if servers_first {
        p.members.iter_mut().for_each(start);
    }
    for m in &p.members {
        let mut args = vec![
            "--netns",
            &m.ns.name,
            "attach",
            "--iface",
            &m.iface,
            "--cache-mb",
            "8",
            "--quarantine-ms",
            "50",
        ];
        args.extend_from_slice(extra);
        inkcache(&args);
    }
    if !servers_first {
        p.members.iter_mut().for_each(start);
    }
    p
}

impl Pool {
    fn servers(&self) -> String {
        let a: Vec<&str> = self.members.iter().map(|m| m.addr.as_str()).collect();
        a.join(",")
    }

    /// scripts/pool_client.py COMMAND in the client namespace.
    fn clients(&self, cmd: &str) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pool_client.py");
        let keys = KEYS.to_string();
        let out = self
            .client
            .cmd("/usr/bin/python3")
            .arg(script)
            .args([&self.servers(), cmd, "--keys", &keys])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pool_client.py {cmd} (python3-pylibmc and python3-pymemcache come with make deps): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Kernel hits per member, from one `status`-free read of each attachment's counters.
    fn hits(&self) -> Vec<u64> {
        self.members
            .iter()
            .map(|m| {
                let s = inkcache(&[
                    "--netns", &m.ns.name, "stats", "--iface", &m.iface, "--json",
                ]);
                serde_json::from_str::<Value>(&s).unwrap()["hits"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }
}

/// {client: {server: counts}} from a `udp` or `tcp` round: asserts every key of every server in
/// `alive` was read correctly and every key of the others was not read at all.
fn assert_round(r: &Value, alive: &[&str], what: &str) {
    for (client, per) in r.as_object().unwrap() {
        for (server, c) in per.as_object().unwrap() {
            let n = |k: &str| c[k].as_u64().unwrap();
            assert_eq!(
                n("wrong"),
                0,
                "{what}: {client} read wrong values from {server}: {r}"
            );
            if alive.contains(&server.as_str()) {
                assert_eq!(
                    n("correct"),
                    n("keys"),
                    "{what}: {client} lost keys on {server}: {r}"
                );
            } else {
                assert_eq!(
                    n("correct"),
                    0,
                    "{what}: {client} read keys of dead {server}: {r}"
                );
            }
        }
    }
}

fn pool_run(servers_first: bool, extra: &[&str]) {
    let mut p = pool(servers_first, extra);
    let w = p.clients("write");
    assert_eq!(
        (w["ketama_failed"].as_u64(), w["hrw_failed"].as_u64()),
        (Some(0), Some(0))
    );

    // both clients' choice of server agrees with where the keys really are, and both spread
    let place = p.clients("place");
    for client in ["ketama", "hrw"] {
        assert_eq!(place[client]["mismatches"], 0, "{place}");
        for m in &p.members {
            let n = place[client]["per_server"][&m.addr].as_u64().unwrap() as usize;
            assert!(
                n > KEYS / 8,
                "{client} puts only {n} keys on {}: {place}",
                m.addr
            );
        }
    }
    let per_server: HashMap<&str, u64> = p
        .members
        .iter()
        .map(|m| {
            let n = ["ketama", "hrw"]
                .iter()
                .map(|c| place[*c]["per_server"][&m.addr].as_u64().unwrap())
                .sum();
            (m.addr.as_str(), n)
        })
        .collect();

    let all: Vec<String> = p.members.iter().map(|m| m.addr.clone()).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_round(&p.clients("udp"), &all, "first UDP round");
    let before = p.hits();
    assert_round(&p.clients("udp"), &all, "second UDP round");
    let after = p.hits();
    for (i, m) in p.members.iter().enumerate() {
        let hits = after[i] - before[i];
        let keys = per_server[m.addr.as_str()];
        assert!(
            hits * 10 >= keys * 9,
            "{}: {hits} kernel hits for {keys} keys in the second round",
            m.addr
        );
    }

    // all three from one command each
    let status: Value =
        serde_json::from_str(&inkcache(&["status", "--all-netns", "--json"])).unwrap();
    for m in &p.members {
        let row = status
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["netns"] == m.ns.name.as_str())
            .unwrap_or_else(|| panic!("no status row for {}: {status}", m.ns.name));
        assert_eq!(
            (row["checked"].as_bool(), row["xdp_attached"].as_bool()),
            (Some(true), Some(true))
        );
        assert!(
            row["items"].as_u64().unwrap() * 10 >= per_server[m.addr.as_str()] * 9,
            "{row}"
        );
    }
    let metrics = |p: &Pool| {
        let mut args = vec!["metrics".to_string(), "--all-netns".into()];
        for m in &p.members {
            args.push("--server".into());
            args.push(format!("{}@{}", m.addr, m.ns.name));
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        inkcache(&a)
    };
    let text = metrics(&p);
    for (i, m) in p.members.iter().enumerate() {
        let hits = format!(
            "inkcache_hits_total{{iface=\"{}\",netns=\"{}\"}} {}",
            m.iface, m.ns.name, after[i]
        );
        assert!(text.contains(&hits), "{hits} not in {text}");
        let up = format!(
            "memcached_up{{server=\"{}\",netns=\"{}\"}} 1",
            m.addr, m.ns.name
        );
        assert!(text.contains(&up), "{up} not in {text}");
    }

    // kill server 2: only its keys are gone, over UDP (the kernel too) and through the clients
    p.members[1].server.as_mut().unwrap().kill();
    let alive = [all[0], all[2]];
    assert_round(&p.clients("udp"), &alive, "UDP after the kill");
    assert_round(&p.clients("tcp"), &alive, "TCP after the kill");
    let down = format!(
        "memcached_up{{server=\"{}\",netns=\"{}\"}} 0",
        p.members[1].addr, p.members[1].ns.name
    );
    assert!(metrics(&p).contains(&down));
}

/// Servers started after inkcache: their sockets are marked at bind, so the kill empties the
/// killed server's kernel cache.
#[test]
fn pool_shards_by_consistent_hashing_and_a_kill_loses_only_its_keys() {
    pool_run(false, &[]);
}

/// The same with servers that were running when inkcache attached (the usual order, and what
/// inkcache@.service does): attach marks their existing sockets as the server's (the socket
/// iterators, bpf/inkcache_iter.bpf.c), so the kill empties the killed server's cache too.
#[test]
fn pool_kill_of_a_server_started_before_attach() {
    pool_run(true, &[]);
}

/// The same where the socket-side programs tell the server's namespace by their sockets' marks,
/// as on kernels whose cgroup_skb programs lack bpf_get_netns_cookie (6.12 and older): three
/// servers on one port, each attachment must walk and fill from its own server only. Servers
/// both before attach (marked by the iterators) and after (marked at bind).
#[test]
fn pool_with_the_namespace_told_by_sockets() {
    pool_run(true, &["--debug-netns-by-sock"]);
    pool_run(false, &["--debug-netns-by-sock"]);
}
