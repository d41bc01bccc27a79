//! Timeouts, silent, duplicate, late, garbage and foreign answers, IPv6, 512 workers, an
//! application's aggregation program, checksums without offload.
mod common;

use std::{
    net::{SocketAddr, UdpSocket},
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use inksg::{
    topo::{in_netns, Topology},
    worker::{Behaviour, SocketWorker},
    Client, ClientOpts, Elem, Policy, Reducer, Status,
};

const SUM1: Reducer = Reducer::Sum(Elem::U64, 1);

/// Socket workers in the first worker namespace, one per behaviour (ports 7000..).
fn socket_workers(t: &Topology, b: &[Behaviour], v6: bool) -> (Vec<SocketAddr>, Vec<SocketWorker>) {
    let w = &t.workers[0];
    let addrs: Vec<SocketAddr> = (0..b.len())
        .map(|i| SocketAddr::new(w.addr(v6), 7000 + i as u16))
        .collect();
    let ws = in_netns(&w.ns, || {
        addrs
            .iter()
            .zip(b)
            .map(|(a, b)| SocketWorker::spawn(*a, b.clone()).unwrap())
            .collect()
    })
    .unwrap();
    (addrs, ws)
}

fn snmp(field_group: &str, field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let lines: Vec<&str> = s.lines().filter(|l| l.starts_with(field_group)).collect();
    let names: Vec<&str> = lines[0].split_whitespace().collect();
    let vals: Vec<&str> = lines[1].split_whitespace().collect();
    let i = names.iter().position(|n| *n == field).unwrap();
    vals[i].parse().unwrap()
}

#[test]
fn a_silent_worker_ends_in_a_timeout_that_names_it_with_the_partial_sum() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgt", 1).unwrap();
    let (addrs, _w) = socket_workers(
        &t,
        &[Behaviour::Echo, Behaviour::Silent, Behaviour::Echo],
        false,
    );
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&addrs).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let t0 = Instant::now();
        c.scatter(
            &g,
            &5u64.to_be_bytes(),
            Policy::All,
            SUM1,
            Duration::from_millis(150),
        )
        .unwrap();
        let d = c.wait(Duration::from_secs(3)).unwrap().expect("a report");
        assert_eq!(d.status, Status::Timeout);
        assert_eq!(d.missing, vec![1]);
        assert_eq!(d.answered, 2);
        assert_eq!(d.u64s(), vec![10]);
        assert!(t0.elapsed() >= Duration::from_millis(150));
        assert!(d.elapsed >= Duration::from_millis(150) && d.elapsed < Duration::from_secs(1));
        // WaitN(2) completes without the silent one
        c.scatter(
            &g,
            &5u64.to_be_bytes(),
            Policy::N(2),
            SUM1,
            Duration::from_millis(150),
        )
        .unwrap();
        let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
        assert_eq!((d.status, d.u64s()), (Status::Done, vec![10]));
    })
    .unwrap();
}

#[test]
fn duplicates_are_dropped_before_they_touch_the_aggregate() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgd", 1).unwrap();
    // the slow worker keeps the request open while the duplicate arrives
    let (addrs, _w) = socket_workers(
        &t,
        &[
            Behaviour::Twice,
            Behaviour::Late(Duration::from_millis(60)),
            Behaviour::Echo,
        ],
        false,
    );
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&addrs).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        for r in 1..=5u64 {
            c.scatter(
                &g,
                &r.to_be_bytes(),
                Policy::All,
                SUM1,
                Duration::from_secs(1),
            )
            .unwrap();
            let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
            assert_eq!(d.status, Status::Done);
            assert_eq!(d.u64s(), vec![3 * r], "a duplicate was counted");
        }
        let st = sg.stats().unwrap();
        assert_eq!(st.duplicates, 5, "{st:?}");
        assert_eq!(st.answers, 15, "{st:?}");
    })
    .unwrap();
}

#[test]
fn late_answers_are_dropped_in_xdp_not_sent_up_the_stack() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgl", 1).unwrap();
    let (addrs, _w) = socket_workers(
        &t,
        &[Behaviour::Echo, Behaviour::Late(Duration::from_millis(250))],
        false,
    );
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&addrs).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let udp_in = snmp("Udp:", "InDatagrams");
        let unreach = snmp("Icmp:", "OutDestUnreachs");
        for _ in 0..4 {
            c.scatter(
                &g,
                &1u64.to_be_bytes(),
                Policy::All,
                SUM1,
                Duration::from_millis(50),
            )
            .unwrap();
            let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
            assert_eq!((d.status, d.missing.clone()), (Status::Timeout, vec![1]));
            // and WaitAny completes at the first answer: the second is late too
            c.scatter(
                &g,
                &1u64.to_be_bytes(),
                Policy::Any,
                SUM1,
                Duration::from_secs(1),
            )
            .unwrap();
            let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
            assert_eq!(d.status, Status::Done);
        }
        // the slow worker answers one request at a time: its 8 answers take ~2 s
        let deadline = Instant::now() + Duration::from_secs(5);
        while sg.stats().unwrap().late < 8 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let st = sg.stats().unwrap();
        assert_eq!(st.late, 8, "{st:?}");
        assert_eq!(
            snmp("Udp:", "InDatagrams"),
            udp_in,
            "answers reached the socket"
        );
        assert_eq!(snmp("Icmp:", "OutDestUnreachs"), unreach);
    })
    .unwrap();
}

#[test]
fn garbage_and_foreign_answers_are_refused_and_counted() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgg", 1).unwrap();
    let (addrs, _w) = socket_workers(
        &t,
        &[
            Behaviour::Echo,
            Behaviour::Garbage,
            // right header, wrong vector length
            Behaviour::Answer(vec![1, 2, 3]),
        ],
        false,
    );
    let wns = t.workers[0].ns.clone();
    let wv4 = t.workers[0].v4;
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&addrs).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let id = c
            .scatter(
                &g,
                &7u64.to_be_bytes(),
                Policy::All,
                SUM1,
                Duration::from_millis(200),
            )
            .unwrap();
        // a stranger (not in the group) answers the request with a well-formed answer
        let port = c.local_port();
        let client_addr = SocketAddr::new(t.workers[0].client_v4.into(), port);
        in_netns(&wns, || {
            let s = UdpSocket::bind(SocketAddr::new(wv4.into(), 7999)).unwrap();
            let mut a = inksg::wire::MAGIC_ANS.to_be_bytes().to_vec();
            a.extend_from_slice(&id.to_be_bytes());
            a.extend_from_slice(&[0; 4]);
            a.extend_from_slice(&100u64.to_be_bytes());
            s.send_to(&a, client_addr).unwrap();
        })
        .unwrap();
        let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
        assert_eq!(d.status, Status::Timeout);
        assert_eq!(d.missing, vec![1, 2]);
        assert_eq!(d.u64s(), vec![7]);
        let st = sg.stats().unwrap();
        assert_eq!(st.malformed, 2, "{st:?}");
        assert_eq!(st.non_members, 1, "{st:?}");
    })
    .unwrap();
}

#[test]
fn ipv6_workers_xdp_and_sockets() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sg6", 2).unwrap();
    let _x = xdp_workers(&t);
    let ws = workers(&t, 4, true);
    // socket workers on other ports: the stack checks their checksums
    let (saddrs, _s) = socket_workers(&t, &[Behaviour::Echo, Behaviour::Echo], true);
    let saddrs: Vec<SocketAddr> = saddrs
        .iter()
        .map(|a| SocketAddr::new(a.ip(), a.port() + 1000))
        .collect();
    let _s2: Vec<SocketWorker> = in_netns(&t.workers[0].ns, || {
        saddrs
            .iter()
            .map(|a| SocketWorker::spawn(*a, Behaviour::Echo).unwrap())
            .collect()
    })
    .unwrap();
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&ws).unwrap();
        let gs = sg.group(&saddrs).unwrap();
        let mut c = Client::new(sg.clone(), true, ClientOpts::default()).unwrap();
        for (grp, n) in [(&g, 8u64), (&gs, 2)] {
            c.scatter(
                grp,
                &vec_u64(2, 3),
                Policy::All,
                Reducer::Sum(Elem::U64, 2),
                Duration::from_millis(300),
            )
            .unwrap();
            let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
            assert_eq!(d.status, Status::Done, "{d:?} {:?}", sg.stats());
            assert_eq!(d.u64s(), vec![3 * n, 4 * n]);
        }
    })
    .unwrap();
}

#[test]
fn checksums_are_right_without_offload() {
    if !root_or_skip() {
        return;
    }
    // The client computes checksums itself (no tx offload) and the workers' stack verifies
    // them (no rx offload): a clone with a stale checksum would be dropped.
    let t = Topology::new("sgk", 1).unwrap();
    let ethtool = |ns: &str, dev: &str, what: &str| {
        let st = Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", dev, what, "off"])
            .output()
            .expect("ethtool");
        assert!(
            st.status.success(),
            "ethtool: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    ethtool(&t.client, &t.workers[0].peer, "tx");
    ethtool(&t.workers[0].ns, &t.workers[0].iface, "rx");
    for v6 in [false, true] {
        let (addrs, _w) =
            socket_workers(&t, &[Behaviour::Echo, Behaviour::Echo, Behaviour::Echo], v6);
        in_netns(&t.client, || {
            let sg = attach(&t);
            let g = sg.group(&addrs).unwrap();
            let mut c = Client::new(sg.clone(), v6, ClientOpts::default()).unwrap();
            // odd lengths: the checksum's padding byte
            for len in [1usize, 8, 13, 301] {
                let p: Vec<u8> = (0..len as u8).collect();
                c.scatter(
                    &g,
                    &p,
                    Policy::All,
                    Reducer::Concat,
                    Duration::from_millis(300),
                )
                .unwrap();
                let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
                assert_eq!(d.status, Status::Done, "v6 {v6} len {len}: {d:?}");
                assert!(d.records().iter().all(|r| r.data == &p[..]));
            }
            // and per-worker payloads (a section rewritten per clone)
            let secs: Vec<(u16, Vec<u8>)> = (0..3u16)
                .map(|w| (w, vec![w as u8; 5 + w as usize * 7]))
                .collect();
            let refs: Vec<(u16, &[u8])> = secs.iter().map(|(w, p)| (*w, &p[..])).collect();
            c.scatter_each(
                &g,
                &refs,
                Policy::All,
                Reducer::Concat,
                Duration::from_millis(300),
            )
            .unwrap();
            let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
            assert_eq!(d.status, Status::Done, "v6 {v6} sections: {d:?}");
            for r in d.records() {
                assert_eq!(r.data, &secs[r.worker as usize].1[..]);
            }
        })
        .unwrap();
    }
}

#[test]
fn five_hundred_twelve_and_a_thousand_twenty_four_workers() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sg5", 4).unwrap();
    let _x = xdp_workers(&t);
    let all = workers(&t, 256, false);
    in_netns(&t.client, || {
        let sg = attach(&t);
        for n in [512usize, 1024] {
            let g = sg.group(&all[..n]).unwrap();
            let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
            for r in 0..10u64 {
                c.scatter(
                    &g,
                    &vec_u64(1, r),
                    Policy::All,
                    SUM1,
                    Duration::from_secs(1),
                )
                .unwrap();
                let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
                assert_eq!(
                    d.status,
                    Status::Done,
                    "{n} workers: missing {:?} {:?}",
                    d.missing.len(),
                    sg.stats()
                );
                assert_eq!(d.answered as usize, n);
                assert_eq!(d.u64s(), vec![n as u64 * r]);
            }
            drop(c);
            sg.remove_group(&g).unwrap();
        }
    })
    .unwrap();
}

#[test]
fn an_application_aggregation_program() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgx", 1).unwrap();
    let scores = [17u64, 99, 3, 42];
    let b: Vec<Behaviour> = scores
        .iter()
        .map(|s| Behaviour::Answer(s.to_be_bytes().to_vec()))
        .collect();
    let (addrs, _w) = socket_workers(&t, &b, false);
    in_netns(&t.client, || {
        let sg = attach(&t);
        let id = sg
            .add_aggregator(inksg::skel::ARGMAX_OBJ, "sg_argmax")
            .expect("loading the example aggregator");
        let g = sg.group(&addrs).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        c.scatter(
            &g,
            b"?",
            Policy::All,
            Reducer::Custom(id, 16),
            Duration::from_millis(300),
        )
        .unwrap();
        let d = c.wait(Duration::from_secs(3)).unwrap().unwrap();
        assert_eq!(d.status, Status::Done, "{:?}", sg.stats());
        let best = u64::from_ne_bytes(d.data[0..8].try_into().unwrap());
        let worker = u32::from_ne_bytes(d.data[8..12].try_into().unwrap());
        let answers = u32::from_ne_bytes(d.data[12..16].try_into().unwrap());
        assert_eq!((best, worker, answers), (99, 1, 4));
    })
    .unwrap();
}

#[test]
fn requests_that_cannot_be_sent_are_refused_at_the_api() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgr", 1).unwrap();
    let ws = workers(&t, 2, false);
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&ws).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let big = vec![0u8; 1500];
        let e = c
            .scatter(
                &g,
                &big,
                Policy::All,
                Reducer::Concat,
                Duration::from_millis(10),
            )
            .unwrap_err();
        assert!(e.to_string().contains("does not fit a datagram"), "{e}");
        let e = c
            .scatter(
                &g,
                b"x",
                Policy::All,
                Reducer::Sum(Elem::U64, 200),
                Duration::from_millis(10),
            )
            .unwrap_err();
        assert!(e.to_string().contains("vectors are"), "{e}");
        assert!(sg.group(&[ws[0], ws[0]]).is_err());
        // a v4 and a v6 worker in one group
        let v6: SocketAddr = "[fd00:5347:0::2]:7000".parse().unwrap();
        assert!(sg.group(&[ws[0], v6]).is_err());
    })
    .unwrap();
}
