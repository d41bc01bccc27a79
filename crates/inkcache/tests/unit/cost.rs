//! The cost of a kernel hit, stage by stage (issue 11): not a test of behaviour, a measurement
//! run by hand (ignored):
//! `cargo test --release -p inkcache --test bpf_unit hit_cost -- --ignored --nocapture --test-threads 1`.
//! Each stage is measured on programs loaded to pass a get right after it (config.h's
//! stop_stage; production loads 0, which the verifier prunes), one 32-byte key with a 32-byte
//! value, BPF_PROG_TEST_RUN with a fresh frame per run (the program rewrites it into its reply),
//! the mean of 20,000 runs, best of 5. The kernel's timing of one run includes a clock read.
//! `hit_cost_by_stage_zipf` does the same over issue 11's key space (100,000 keys, Zipf 0.99),
//! and `multiget_key_cost` measures what each key of a 10-key get adds.
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::*;

const KEY: &str = "key:0000000000000000000000000001";

/// Mean ns per run of `frames` through XDP, each run once a round, best of `rounds`; returns it
/// and how many runs of the last round returned XDP_TX.
fn ns_per_frame(f: &Fx, frames: &[Vec<u8>], rounds: u32) -> (u128, usize) {
    let mut best = u128::MAX;
    let mut tx = 0;
    for _ in 0..rounds {
        let mut total = 0u128;
        tx = 0;
        for frame in frames {
            let input = libbpf_rs::ProgramInput {
                data_in: Some(frame),
                repeat: 1,
                ..Default::default()
            };
            let o = f.l.xdp.progs.inkcache_xdp.test_run(input).unwrap();
            tx += usize::from(o.return_value == XDP_TX);
            total += o.duration.as_nanos();
        }
        best = best.min(total / frames.len() as u128);
    }
    (best, tx)
}

/// Mean ns per run of `frame` through XDP, best of 5 rounds of 20,000; asserts `want`.
fn ns_per_run(f: &Fx, frame: &[u8], want: u32) -> u128 {
    let mut best = u128::MAX;
    for _ in 0..5 {
        let mut total = 0u128;
        let n = 20_000u32;
        for _ in 0..n {
            let input = libbpf_rs::ProgramInput {
                data_in: Some(frame),
                repeat: 1,
                ..Default::default()
            };
            let o = f.l.xdp.progs.inkcache_xdp.test_run(input).unwrap();
            assert_eq!(o.return_value, want, "{:?}", f.stats());
            total += o.duration.as_nanos();
        }
        best = best.min(total / u128::from(n));
    }
    best
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hot_hit_cost() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, KEY, 0, &[b'v'; 32]);
    let ns = ns_per_run(&f, &fl.udp(7, format!("get {KEY}\r\n").as_bytes()), XDP_TX);
    println!("hot hit: {ns} ns per run (best of 5 means of 20000 runs)");
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hit_cost_by_stage() {
    let fl = Flow::v4();
    let names = [
        "parsed (Ethernet, IP, UDP, port)",
        "frame header checked, request copied",
        "host checks (MAC, addresses, checksums)",
        "keys found and hashed",
        "global state, allowlist, bound",
        "keys looked up, reply composed",
        "reply built and sent (XDP_TX): the whole hit",
    ];
    let mut prev = 0u128;
    println!("| stage | cumulative ns | this stage ns |\n| --- | ---: | ---: |");
    let pass = {
        let f = Fx::load(0);
        // a packet for no server port: the cost of parsing and passing
        ns_per_run(&f, &fl.clone().sport(9).udp(7, b"x"), XDP_PASS)
    };
    println!("| not for the cache (other port) | {pass} | |");
    for (i, name) in names.iter().enumerate() {
        let stage = if i + 1 == names.len() {
            0
        } else {
            i as u32 + 1
        };
        let f = Fx::load(stage);
        if stage == 0 || stage == 6 {
            // the stages before the lookup pass before a miss is remembered: no fill there
            f.fill(&fl, KEY, 0, &[b'v'; 32]);
        }
        let want = if stage == 0 { XDP_TX } else { XDP_PASS };
        let ns = ns_per_run(&f, &fl.udp(7, format!("get {KEY}\r\n").as_bytes()), want);
        println!("| {name} | {ns} | {} |", ns as i128 - prev as i128);
        prev = ns;
    }
}

/// The key of rank `i` in the Zipf measurements: 32 bytes, as in issue 11's workload.
fn zkey(i: u64) -> String {
    format!("key:{i:028}")
}

/// `n` draws from Zipf(`s`) over ranks 0..keys (inverse of the cumulative distribution).
fn zipf_draws(keys: u64, s: f64, n: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(keys as usize);
    let mut sum = 0.0;
    for r in 1..=keys {
        sum += 1.0 / (r as f64).powf(s);
        cdf.push(sum);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let u = rng.gen::<f64>() * sum;
            cdf.partition_point(|&c| c < u) as u64
        })
        .collect()
}

/// Fills keys 0..keys with 32-byte values; returns how many the cache took.
fn fill_keys(f: &Fx, fl: &Flow, keys: u64) -> u64 {
    (0..keys)
        .filter(|&i| {
            let k = zkey(i);
            f.fill_with(
                fl,
                &format!("get {k}\r\n"),
                &value_reply(&k, 0, &[b'v'; 32]),
            )
        })
        .count() as u64
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hit_cost_by_stage_zipf() {
    const KEYS: u64 = 100_000;
    let fl = Flow::v4();
    let frames: Vec<Vec<u8>> = zipf_draws(KEYS, 0.99, 50_000, 11)
        .into_iter()
        .enumerate()
        .map(|(i, r)| fl.udp(i as u16, format!("get {}\r\n", zkey(r)).as_bytes()))
        .collect();
    let names = [
        "parsed (Ethernet, IP, UDP, port)",
        "frame header checked, request copied",
        "host checks (MAC, addresses, checksums)",
        "keys found and hashed",
        "global state, allowlist, bound",
        "keys looked up, reply composed",
        "reply built and sent (XDP_TX): the whole hit",
    ];
    println!(
        "{KEYS} keys of 32 bytes, 32-byte values, {} gets drawn Zipf 0.99, best of 3 rounds",
        frames.len()
    );
    println!("| stage | cumulative ns | this stage ns |\n| --- | ---: | ---: |");
    let mut prev = 0u128;
    for (i, name) in names.iter().enumerate() {
        let stage = if i + 1 == names.len() {
            0
        } else {
            i as u32 + 1
        };
        let f = Fx::load_sized(stage, 64);
        let mut note = String::new();
        if stage == 0 || stage == 6 {
            let took = fill_keys(&f, &fl, KEYS);
            note = format!(" ({took} of {KEYS} keys cached)");
        }
        let (ns, tx) = ns_per_frame(&f, &frames, 3);
        if stage == 0 {
            note += &format!(", {:.1}% answered", 100.0 * tx as f64 / frames.len() as f64);
        }
        println!("| {name}{note} | {ns} | {} |", ns as i128 - prev as i128);
        prev = ns;
    }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn multiget_key_cost() {
    let f = Fx::load_sized(0, 8);
    let fl = Flow::v4();
    assert_eq!(fill_keys(&f, &fl, 64), 64, "{:?}", f.stats());
    let get = |first: u64, n: u64| {
        let keys: Vec<String> = (first..first + n).map(zkey).collect();
        fl.udp(7, format!("get {}\r\n", keys.join(" ")).as_bytes())
    };
    let one = ns_per_run(&f, &get(0, 1), XDP_TX);
    let ten = ns_per_run(&f, &get(0, 10), XDP_TX);
    println!(
        "1-key get: {one} ns, 10-key get: {ten} ns, each key after the first: {} ns",
        (ten as i128 - one as i128) / 9
    );
}

/// Mean ns per run of `frame` through `prog`, best of 5 rounds of 20,000.
fn prog_ns(prog: &libbpf_rs::ProgramMut, frame: &[u8]) -> u128 {
    let mut best = u128::MAX;
    for _ in 0..5 {
        let mut total = 0u128;
        for _ in 0..20_000 {
            let input = libbpf_rs::ProgramInput {
                data_in: Some(frame),
                repeat: 1,
                ..Default::default()
            };
            let o = prog.test_run(input).unwrap();
            assert_eq!(o.return_value, XDP_PASS);
            total += o.duration.as_nanos();
        }
        best = best.min(total / 20_000);
    }
    best
}

#[test]
#[ignore = "a measurement, run by hand"]
fn non_target_cost() {
    use inkcache::skel::pass::InkcachePassSkelBuilder;
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    let f = fx();
    let mut obj = std::mem::MaybeUninit::uninit();
    let pass = InkcachePassSkelBuilder::default()
        .open(&mut obj)
        .unwrap()
        .load()
        .unwrap();
    let fl = Flow::v4();
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&packet::CLIENT_MAC);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let cases = [
        ("ARP", arp),
        (
            "UDP to another port",
            fl.clone().sport(53).udp(7, b"not memcached"),
        ),
        (
            "TCP segment to the server (walked at its socket)",
            fl.tcp(1000, 1, "A", b"get k\r\n"),
        ),
    ];
    println!("| packet | XDP_PASS program ns | inkcache_xdp ns | difference ns |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, frame) in &cases {
        let base = prog_ns(&pass.progs.inkcache_pass, frame);
        let ink = prog_ns(&f.l.xdp.progs.inkcache_xdp, frame);
        println!(
            "| {name} | {base} | {ink} | {} |",
            ink as i128 - base as i128
        );
    }
}
