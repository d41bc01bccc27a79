//! The memcached application: ketama sharding as pylibmc (libmemcached) does it, and multi-gets
//! over a pool of stock memcached (or inkcached) servers, with inkcache on the servers too.
mod common;

use std::{collections::HashMap, net::SocketAddr, process::Command, sync::Arc, time::Duration};

use common::*;
use inksg::{
    ketama::{Hash, Ketama},
    mc::{parse_items, Item, Pool},
    topo::{in_netns, Topology},
    AttachOpts, Client, ClientOpts, Proto, Sg,
};

fn server_prog() -> Option<String> {
    match std::env::var("INKSG_TEST_SERVER").as_deref() {
        Ok("inkcached") => {
            let p = testkit::workspace_bin("inkcached");
            p.exists().then(|| p.display().to_string())
        }
        _ => Some("/usr/bin/memcached".into()),
    }
}

/// Two memcached in each of two worker namespaces (ports 11211 and 11300).
fn pool(t: &Topology, prog: &str) -> Vec<Memcached> {
    let mut v = vec![];
    for w in &t.workers {
        for port in [11211, 11300] {
            v.push(Memcached::start(&w.ns, w.v4.into(), port, prog));
        }
    }
    v
}

fn key(i: usize) -> Vec<u8> {
    format!("k:{i}:{}", "x".repeat(i % 7)).into_bytes()
}

/// Values of 0 to ~3000 bytes: some replies take several datagrams.
fn value(i: usize) -> Vec<u8> {
    let n = [0, 5, 100, 700, 1300, 1390, 2000, 3000][i % 8];
    (0..n).map(|j| b'a' + ((i + j) % 26) as u8).collect()
}

/// Stores keys `which` on their ketama server over TCP (from the client namespace).
fn store(servers: &[SocketAddr], ring: &Ketama, which: impl Iterator<Item = usize>) {
    for i in which {
        let k = key(i);
        let v = value(i);
        let s = servers[ring.server(&k)];
        let mut req = format!(
            "set {} {} 0 {}\r\n",
            String::from_utf8_lossy(&k),
            i,
            v.len()
        )
        .into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(tcp_exchange(s, &req, b"\r\n"), b"STORED\r\n");
    }
}

/// What asking each server in turn (TCP, its own keys) returns.
fn reference(servers: &[SocketAddr], ring: &Ketama, keys: &[Vec<u8>]) -> HashMap<Vec<u8>, Item> {
    let mut out = HashMap::new();
    for (si, s) in servers.iter().enumerate() {
        let mine: Vec<&Vec<u8>> = keys.iter().filter(|k| ring.server(k) == si).collect();
        if mine.is_empty() {
            continue;
        }
        let mut req = b"get".to_vec();
        for k in mine {
            req.push(b' ');
            req.extend_from_slice(k);
        }
        req.extend_from_slice(b"\r\n");
        let reply = tcp_exchange(*s, &req, b"END\r\n");
        parse_items(&reply, |k, it| {
            out.insert(k.to_vec(), it);
        });
    }
    out
}

/// A client of `sg` speaking memcached's protocol.
fn memcached_client(sg: &Arc<Sg>) -> Client {
    Client::new(
        sg.clone(),
        false,
        ClientOpts {
            proto: Proto::Memcached,
            ..Default::default()
        },
    )
    .unwrap()
}

fn attach_big(t: &Topology) -> Arc<Sg> {
    Arc::new(
        Sg::attach(&AttachOpts {
            ifaces: t.client_ifaces(),
            clients: 2,
            slots_per_client: 64,
            groups: 4,
            result_bytes: 1 << 18,
            ..Default::default()
        })
        .unwrap(),
    )
}

#[test]
fn ketama_maps_keys_as_pylibmc_does() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgkt", 1).unwrap();
    let w = &t.workers[0];
    let servers: Vec<Memcached> = [11211u16, 11300, 11301]
        .iter()
        .map(|&p| Memcached::start(&w.ns, w.v4.into(), p, "/usr/bin/memcached"))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    for (hash, behaviours) in [
        (Hash::OneAtATime, r#"{"ketama": True}"#),
        (Hash::Md5, r#"{"ketama": True, "hash": "md5"}"#),
    ] {
        // pylibmc stores 300 keys; then each server is asked alone which it holds
        let script = format!(
            r#"
import json, pylibmc
servers = {list:?}
for s in servers:
    pylibmc.Client([s]).flush_all()
c = pylibmc.Client(servers, behaviors={behaviours})
keys = ["key-%d" % i for i in range(300)] + ["k\xe9y:%d" % i for i in range(50)]
for k in keys:
    c.set(k, "v")
where = {{}}
for i, s in enumerate(servers):
    got = pylibmc.Client([s]).get_multi(keys)
    for k in got:
        where[k] = i
print(json.dumps(where))
"#
        );
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.client,
                "/usr/bin/python3",
                "-c",
                &script,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let where_: HashMap<String, usize> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(where_.len(), 350);
        let ring = Ketama::new(&addrs, hash);
        let mut per = [0; 3];
        for (k, s) in &where_ {
            assert_eq!(ring.server(k.as_bytes()), *s, "key {k} with {hash:?}");
            per[*s] += 1;
        }
        assert!(per.iter().all(|&n| n > 30), "{per:?}");
    }
}

fn multiget_checks(prog: &str) {
    let t = Topology::new("sgm", 2).unwrap();
    let mut servers = pool(&t, prog);
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let ring = Ketama::new(&addrs, Hash::default());
    let keys: Vec<Vec<u8>> = (0..60).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    in_netns(&t.client, || {
        let sg = attach_big(&t);
        let pool = Pool::new(&sg, &addrs, Hash::default()).unwrap();
        let mut c = memcached_client(&sg);
        let timeout = Duration::from_millis(300);
        // 0% hits, 50% (even keys stored), 100%
        for (stage, which) in [
            (0, vec![]),
            (50, (0..60).step_by(2).collect()),
            (100, (1..60).step_by(2).collect::<Vec<_>>()),
        ] {
            store(&addrs, &ring, which.into_iter());
            let want = reference(&addrs, &ring, &keys);
            assert_eq!(want.len(), keys.len() * stage / 100, "stage {stage}");
            for _ in 0..3 {
                let got = pool.get_multi(&mut c, &refs, timeout).unwrap();
                assert!(
                    got.complete(),
                    "stage {stage}: {:?} {:?}",
                    got.missing,
                    sg.stats()
                );
                assert_eq!(got.items, want, "stage {stage}");
            }
        }
        // a server killed: its keys are reported with it, the others' items are all there
        let dead = 1;
        servers[dead].kill();
        let got = pool.get_multi(&mut c, &refs, timeout).unwrap();
        assert_eq!(got.missing, vec![addrs[dead]]);
        let expect: HashMap<Vec<u8>, Item> = keys
            .iter()
            .filter(|k| ring.server(k) != dead)
            .map(|k| {
                let i: usize = String::from_utf8_lossy(k)
                    .split(':')
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap();
                (
                    k.clone(),
                    Item {
                        flags: i as u32,
                        value: value(i),
                    },
                )
            })
            .collect();
        assert_eq!(got.items, expect);
        let st = sg.stats().unwrap();
        assert_eq!(st.malformed, 0, "{st:?}");
    })
    .unwrap();
}

#[test]
fn multiget_returns_what_asking_each_server_returns() {
    if !root_or_skip() {
        return;
    }
    multiget_checks(&server_prog().unwrap());
}

#[test]
fn multiget_against_inkcached() {
    if !root_or_skip() {
        return;
    }
    let p = testkit::workspace_bin("inkcached");
    testkit::skip_unless!(p.exists(), "inkcached is not built (make build)");
    multiget_checks(&p.display().to_string());
}

#[test]
fn multiget_with_inkcache_on_the_servers() {
    if !root_or_skip() {
        return;
    }
    let inkcache = testkit::workspace_bin("inkcache");
    testkit::skip_unless!(inkcache.exists(), "inkcache is not built (make build)");
    let t = Topology::new("sgi", 2).unwrap();
    let servers = pool(&t, "/usr/bin/memcached");
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let ring = Ketama::new(&addrs, Hash::default());
    let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let run = |ns: &str, args: &[&str]| {
        let o = Command::new(&inkcache)
            .args(["--netns", ns])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "inkcache {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    for w in &t.workers {
        // the clones carry the client's address on its first interface: allow the whole range.
        // One server per attachment (one cache, keyed by key alone: inkcache refuses to cache
        // two servers' ports): the server on 11211; the one on 11300 answers its own gets.
        run(
            &w.ns,
            &[
                "attach",
                "--iface",
                &w.iface,
                "--port",
                "11211",
                "--cache-mb",
                "8",
                "--allow",
                "198.19.0.0/16",
            ],
        );
    }
    in_netns(&t.client, || {
        store(&addrs, &ring, 0..40);
        let want = reference(&addrs, &ring, &keys);
        assert_eq!(want.len(), 40);
        let sg = attach_big(&t);
        let pool = Pool::new(&sg, &addrs, Hash::default()).unwrap();
        let mut c = memcached_client(&sg);
        for _ in 0..4 {
            let got = pool
                .get_multi(&mut c, &refs, Duration::from_millis(300))
                .unwrap();
            assert!(got.complete(), "{:?} {:?}", got.missing, sg.stats());
            assert_eq!(got.items, want);
        }
    })
    .unwrap();
    let mut hits = 0;
    for w in &t.workers {
        let s = run(&w.ns, &["stats", "--iface", &w.iface, "--json"]);
        eprintln!("inkcache stats {}: {s}", w.iface);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        // whole requests answered by the kernel, and multi-gets it split (hits answered by the
        // kernel in a message of their own, the rest by memcached)
        hits += v["hits"].as_u64().unwrap_or(0) + v["splits"].as_u64().unwrap_or(0);
        run(&w.ns, &["detach", "--iface", &w.iface]);
    }
    assert!(hits > 0, "the kernel cache answered none of the gets");
}
