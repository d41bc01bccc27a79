//! The cost of a kernel hit, stage by stage (issue 11): not a test of behaviour, a measurement
//! run by hand (ignored):
//! `cargo test --release -p inkcache --test bpf_unit hit_cost -- --ignored --nocapture --test-threads 1`.
//! Each stage is measured on programs loaded to pass a get right after it (config.h's
//! stop_stage; production loads 0, which the verifier prunes), one 32-byte key with a 32-byte
//! value, BPF_PROG_TEST_RUN with a fresh frame per run (the program rewrites it into its reply),
//! the mean of 20,000 runs, best of 5. The kernel's timing of one run includes a clock read.
use super::*;

const KEY: &str = "key:0000000000000000000000000001";

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
