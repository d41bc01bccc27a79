//! The cost of a kernel hit, stage by stage (issue 11): not a test of behaviour, a measurement
//! run by hand (ignored):
//! `cargo test --release -p inkcache --test bpf_unit hit_cost -- --ignored --nocapture --test-threads 1`.
//! Each stage is measured on programs loaded to pass a get right after it (config.h's
//! stop_stage; production loads 0, which the verifier prunes), one 32-byte key with a 32-byte
//! value, BPF_PROG_TEST_RUN with a fresh frame per run (the program rewrites it into its reply).
//! The stages' programs are all loaded first and take turns, 40 rounds of 2,000 runs each
//! (cost_timing.rs's `rows_in_turns`): a stage's cost is its difference from the stage before
//! in the same round, whatever the host's speed did over the sitting. The kernel's timing of one
//! run includes a clock read. `hit_cost_by_stage_zipf` does the same over issue 11's key space
//! (100,000 keys, Zipf 0.99, 5 rounds),
//! and `multiget_key_cost` measures what each key of a 10-key get adds (hot keys; over the Zipf key
//! space: `multiget_key_cost_zipf`). `COST_ROUNDS=N` runs N rounds instead (long enough for
//! `scripts/bpf-profile.sh` to sample the program while it runs). `COST_LOCKSTEP` and
//! `COST_ROUND_LOG` let two builds' test binaries take turns round by round and log every round
//! (cost_timing.rs's `Lockstep`): `scripts/cost-ab.sh` compares two builds so.
use inkbench::{workload::key_name, zipf::Zipf};
use inkcache::skel::xdp::types::xdp_room;
use rand::{rngs::StdRng, SeedableRng};

use super::cost_timing::*;
use super::*;

const KEY: &str = "key:0000000000000000000000000001";

/// The stages of a hit, in order: row i is measured on programs loaded with `stop_stage` i + 1,
/// the last on production's 0 (the whole hit).
const STAGES: [&str; 7] = [
    "parsed (Ethernet, IP, UDP, port)",
    "frame header checked, request copied",
    "host checks (MAC, addresses, checksums)",
    "keys found",
    "global state, allowlist, bound",
    "keys looked up, reply composed",
    "reply built and sent (XDP_TX): the whole hit",
];

/// The `stop_stage` row `i` of [`STAGES`] is measured with.
fn stop_stage(i: usize) -> u32 {
    if i + 1 == STAGES.len() {
        0
    } else {
        i as u32 + 1
    }
}

/// Mean ns per run of `frames` through XDP, each run once a round, best of `rounds`; returns it
/// and how many runs of the last round returned XDP_TX.
fn ns_per_frame(f: &Fx, frames: &[Vec<u8>], rounds: u32) -> (u128, usize) {
    let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    time_runs(
        &f.l.xdp.progs.inkcache_xdp,
        &frames,
        1,
        rounds,
        None,
        &String::new,
        None,
    )
}

/// Mean ns per run of `frame` through XDP, best of 5 rounds of 20,000; asserts `want`.
fn ns_per_run(f: &Fx, frame: &[u8], want: u32) -> u128 {
    ns_per_run_after(f, frame, want, None)
}

/// [`ns_per_run`], calling `before` before each run (outside its timing).
fn ns_per_run_after(f: &Fx, frame: &[u8], want: u32, before: Option<&dyn Fn()>) -> u128 {
    let ctx = || format!("{:?}", f.stats());
    time_runs(
        &f.l.xdp.progs.inkcache_xdp,
        &[frame],
        20_000,
        5,
        Some(want),
        &ctx,
        before,
    )
    .0
}

/// Writes `key` = `value` (exptime 0) with a UDP set the server answers STORED: as issue 11's
/// workload loads its keys. The kernel then knows the item never expires, and a hit on it reads
/// no clock; an item filled without a write seen has an expiry (--max-age) and a hit reads it.
fn write_key(f: &Fx, fl: &Flow, key: &str, value: &[u8]) {
    let id = next_id();
    let mut set = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    set.extend_from_slice(value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(f.udp_in(&fl.udp(id, &set)), XDP_PASS);
    assert_eq!(f.egress(&fl.udp_reply(id, b"STORED\r\n")).action, CG_PASS);
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hot_hit_cost() {
    let f = fx();
    let fl = Flow::v4();
    let v = [b'v'; 32];
    write_key(&f, &fl, KEY, &v);
    f.fill(&fl, KEY, 0, &v);
    let get = fl.udp(7, format!("get {KEY}\r\n").as_bytes());
    let ns = ns_per_run(&f, &get, XDP_TX);
    println!(
        "hot hit, key written (never expires): {ns} ns per run (best of 5 means of 20000 runs)"
    );
    let other = "key:0000000000000000000000000002";
    f.fill(&fl, other, 0, &v);
    let ns = ns_per_run(
        &f,
        &fl.udp(7, format!("get {other}\r\n").as_bytes()),
        XDP_TX,
    );
    println!("hot hit, key filled only (expires at --max-age): {ns} ns per run");
    // as on veth, whose frames have no tailroom: the reply grows at the head. Test-run's
    // frames have tailroom, and XDP tries the tail again every 256 replies (TAIL_RETRY), which
    // would then succeed and stay: the room is set again every 200 runs (not before each, as
    // the map update's system call would make the next run dearer)
    let head = xdp_room {
        ifindex: 1,
        no_tail: 1,
        ..Default::default()
    };
    let runs = std::cell::Cell::new(0u32);
    let every_200 = || {
        if runs.get().is_multiple_of(200) {
            f.set_room(&head);
        }
        runs.set(runs.get() + 1);
    };
    let ns = ns_per_run_after(&f, &get, XDP_TX, Some(&every_200));
    assert!(
        f.rooms().iter().all(|r| r.no_tail == 1),
        "the replies went back to growing at the tail"
    );
    println!("hot hit, key written, frame grown at the head (as on veth): {ns} ns per run");
}

/// Row `i` of [`STAGES`]: the programs loaded to stop after that stage, with KEY written and
/// filled where the stage reaches the lookup; the hot get, and the action it must return.
fn stage_hit(i: usize, fl: &Flow) -> (Fx, Vec<u8>, u32) {
    let stage = stop_stage(i);
    let f = Fx::load(stage);
    if stage == 0 || stage == 6 {
        // the stages before the lookup pass before a miss is remembered: no fill there
        write_key(&f, fl, KEY, &[b'v'; 32]);
        f.fill(fl, KEY, 0, &[b'v'; 32]);
    }
    let want = if stage == 0 { XDP_TX } else { XDP_PASS };
    (f, fl.udp(7, format!("get {KEY}\r\n").as_bytes()), want)
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hit_cost_by_stage() {
    let fl = Flow::v4();
    // a packet for no server port: the cost of parsing and passing
    let (pass, other) = (Fx::load(0), fl.clone().sport(9).udp(7, b"x"));
    let staged: Vec<(Fx, Vec<u8>, u32)> = (0..STAGES.len()).map(|i| stage_hit(i, &fl)).collect();
    let mut rows = vec![StageRow {
        name: "not for the cache (other port)".into(),
        prog: &pass.l.xdp.progs.inkcache_xdp,
        frames: vec![&other],
        want: Some(XDP_PASS),
    }];
    for (name, (f, get, want)) in STAGES.iter().zip(&staged) {
        rows.push(StageRow {
            name: name.to_string(),
            prog: &f.l.xdp.progs.inkcache_xdp,
            frames: vec![get],
            want: Some(*want),
        });
    }
    println!("one 32-byte key, 32-byte value, 2000 runs a row a round");
    let means = rows_in_turns(&rows, 2_000, 40);
    print_rows_in_turns(&rows, &means);
}

/// The key of rank `i` in the Zipf measurements: 32 bytes, as in issue 11's workload.
fn zkey(i: u64) -> String {
    key_name("key:", i, 32)
}

/// Writes (write_key) and fills keys 0..keys with 32-byte values; returns how many the cache
/// took.
fn fill_keys(f: &Fx, fl: &Flow, keys: u64) -> u64 {
    (0..keys)
        .filter(|&i| {
            let k = zkey(i);
            write_key(f, fl, &k, &[b'v'; 32]);
            f.fill_with(
                fl,
                &format!("get {k}\r\n"),
                &value_reply(&k, 0, &[b'v'; 32]),
            )
        })
        .count() as u64
}

/// The Zipf measurements' key count: `ZIPF_KEYS` if set (a smaller key space shows the cost with
/// more of the keys' lines in the CPU's caches), else issue 11's 100,000.
fn zipf_keys() -> u64 {
    match std::env::var("ZIPF_KEYS") {
        Ok(v) => v.parse().expect("ZIPF_KEYS: a key count"),
        Err(_) => 100_000,
    }
}

/// The share of one more pass over `frames` that XDP served from the keys' hot slots.
fn slot_share(f: &Fx, frames: &[Vec<u8>]) -> f64 {
    let before = f.stats().slot_hits;
    for frame in frames {
        f.xdp(frame);
    }
    (f.stats().slot_hits - before) as f64 / frames.len() as f64
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hit_cost_by_stage_zipf() {
    let keys = zipf_keys();
    let fl = Flow::v4();
    let zipf = Zipf::new(keys, 0.99);
    let mut rng = StdRng::seed_from_u64(11);
    let frames: Vec<Vec<u8>> = (0..50_000u16)
        .map(|i| {
            let key = zkey(zipf.sample(&mut rng));
            fl.udp(i, format!("get {key}\r\n").as_bytes())
        })
        .collect();
    let staged: Vec<(Fx, String)> = (0..STAGES.len())
        .map(|i| {
            let stage = stop_stage(i);
            let f = Fx::load_sized(stage, 64);
            let mut note = String::new();
            if stage == 0 || stage == 6 {
                let took = fill_keys(&f, &fl, keys);
                note = format!(" ({took} of {keys} keys cached)");
            }
            (f, note)
        })
        .collect();
    let rows: Vec<StageRow> = STAGES
        .iter()
        .zip(&staged)
        .map(|(name, (f, note))| StageRow {
            name: format!("{name}{note}"),
            prog: &f.l.xdp.progs.inkcache_xdp,
            frames: frames.iter().map(Vec::as_slice).collect(),
            want: None,
        })
        .collect();
    println!(
        "{keys} keys of 32 bytes, 32-byte values, {} gets drawn Zipf 0.99, each run once a row a \
         round",
        frames.len()
    );
    let means = rows_in_turns(&rows, 1, 5);
    print_rows_in_turns(&rows, &means);
    // one more pass of the whole hit: how many were answered, how many from a hot slot
    let whole = &staged[STAGES.len() - 1].0;
    let tx = frames
        .iter()
        .filter(|fr| whole.xdp(fr).action == XDP_TX)
        .count();
    let slots = slot_share(whole, &frames);
    println!(
        "the whole hit: {:.1}% answered, {:.1}% from the hot slot (one more pass each)",
        100.0 * tx as f64 / frames.len() as f64,
        100.0 * slots
    );
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

#[test]
#[ignore = "a measurement, run by hand"]
fn multiget_key_cost_zipf() {
    let n_keys = zipf_keys();
    let f = Fx::load_sized(0, 64);
    let fl = Flow::v4();
    let took = fill_keys(&f, &fl, n_keys);
    let zipf = Zipf::new(n_keys, 0.99);
    let mut rng = StdRng::seed_from_u64(12);
    let mut gets = |n: usize| -> Vec<Vec<u8>> {
        (0..20_000u16)
            .map(|i| {
                let keys: Vec<String> = (0..n).map(|_| zkey(zipf.sample(&mut rng))).collect();
                fl.udp(i, format!("get {}\r\n", keys.join(" ")).as_bytes())
            })
            .collect()
    };
    let (one_frames, ten_frames) = (gets(1), gets(10));
    let (one, tx1) = ns_per_frame(&f, &one_frames, 3);
    let (ten, tx10) = ns_per_frame(&f, &ten_frames, 3);
    println!(
        "{took} of {n_keys} keys cached, keys drawn Zipf 0.99, 20000 gets each, best of 3 rounds: \
         1-key get: {one} ns ({tx1} answered), 10-key get: {ten} ns ({tx10} answered), \
         each key after the first: {} ns",
        (ten as i128 - one as i128) / 9
    );
}

/// Mean ns per run of `frame` through `prog`, best of 5 rounds of 20,000; asserts XDP_PASS.
fn prog_ns(prog: &libbpf_rs::ProgramMut, frame: &[u8]) -> u128 {
    time_runs(
        prog,
        &[frame],
        20_000,
        5,
        Some(XDP_PASS),
        &String::new,
        None,
    )
    .0
}

/// The program that only returns XDP_PASS (bpf/inkcache_pass.bpf.c), loaded: the baseline.
fn load_pass(
    obj: &mut std::mem::MaybeUninit<libbpf_rs::OpenObject>,
) -> inkcache::skel::pass::InkcachePassSkel<'_> {
    use inkcache::skel::pass::InkcachePassSkelBuilder;
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    InkcachePassSkelBuilder::default()
        .open(obj)
        .unwrap()
        .load()
        .unwrap()
}

/// Runs `prog`'s BPF run-time statistics have counted (its run_cnt: 0 while they are off).
fn run_cnt(prog: &libbpf_rs::ProgramMut) -> u64 {
    let id =
        libbpf_rs::Program::id_from_fd(std::os::fd::AsFd::as_fd(prog)).expect("the program's id");
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .expect("the program's info")
        .run_cnt
}

/// The statistics the timed scripts and inklab hold by an fd (BPF_ENABLE_STATS) count runs while
/// held and stop with the holder, whatever becomes of it, and leave kernel.bpf_stats_enabled
/// alone. The scripts had set and restored the sysctl instead: two overlapping runs left it on
/// for every program on the host, and test-run measurements carried ~70 ns of clock reads
/// (docs/results/hitcost.md, twenty-third run).
#[test]
fn bpf_statistics_held_by_an_fd_end_with_the_holder() {
    assert!(
        !inkcache::sys::bpf_stats_sysctl_on(),
        "kernel.bpf_stats_enabled is 1 (left on?): this test needs it off"
    );
    let mut obj = std::mem::MaybeUninit::uninit();
    let pass = load_pass(&mut obj);
    let prog = &pass.progs.inkcache_pass;
    let frame = Flow::v4().udp(1, b"get k\r\n");
    let run = |n: u32| {
        for _ in 0..n {
            let input = libbpf_rs::ProgramInput {
                data_in: Some(&frame),
                repeat: 1,
                ..Default::default()
            };
            assert_eq!(prog.test_run(input).unwrap().return_value, XDP_PASS);
        }
    };
    run(5);
    assert_eq!(run_cnt(prog), 0, "statistics on before anything held them");
    {
        let _held = inkcache::sys::bpf_stats_hold().unwrap();
        run(5);
        assert_eq!(run_cnt(prog), 5);
        assert!(!inkcache::sys::bpf_stats_sysctl_on());
    }
    run(5);
    assert_eq!(
        run_cnt(prog),
        5,
        "statistics still on after the fd was closed"
    );

    // the scripts' holder (scripts/lib.sh's bpf_stats_hold), killed as a killed script's would be
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/bpf-stats-hold.py"
    );
    let mut holder = std::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running scripts/bpf-stats-hold.py (python3)");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    run(5);
    assert_eq!(run_cnt(prog), 10);
    holder.kill().unwrap();
    holder.wait().unwrap();
    run(5);
    assert_eq!(
        run_cnt(prog),
        10,
        "statistics still on after the holder died"
    );
    assert!(!inkcache::sys::bpf_stats_sysctl_on());
}

#[test]
#[ignore = "a measurement, run by hand"]
fn non_target_cost() {
    let f = fx();
    let mut obj = std::mem::MaybeUninit::uninit();
    let pass = load_pass(&mut obj);
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

/// What the host checks' socket lookup costs (bpf/host.h socket_lookup): hot hits alternating
/// between two of the interface's IPv4 addresses whose destinations share a slot of the ones
/// remembered (198.18.0.1 and .9: bpf/host.h sl_of), so that each looks its socket up; against
/// hot hits to one address, and alternating between two in different slots (.1 and .10), which
/// never do.
#[test]
#[ignore = "a measurement, run by hand"]
fn socket_lookup_cost() {
    let f = fx();
    let mut iface = super::fixture::server_iface(0);
    for a in ["198.18.0.9", "198.18.0.10"] {
        assert!(inkcache::host::add_addr(
            &mut iface,
            a.parse().unwrap(),
            true
        ));
    }
    f.set_iface(&iface);
    let fl = Flow::v4();
    let v = [b'v'; 32];
    write_key(&f, &fl, KEY, &v);
    f.fill(&fl, KEY, 0, &v);
    let get = format!("get {KEY}\r\n");
    let to = |dst: &str| {
        Flow {
            server: dst.parse().unwrap(),
            ..Flow::v4()
        }
        .udp(7, get.as_bytes())
    };
    let frames = |a: &[u8], b: &[u8]| -> Vec<Vec<u8>> {
        (0..2000)
            .map(|i| if i % 2 == 0 { a.to_vec() } else { b.to_vec() })
            .collect()
    };
    let one = to("198.18.0.1");
    let mut ns = Vec::new();
    for other in ["198.18.0.1", "198.18.0.10", "198.18.0.9"] {
        let (n, tx) = ns_per_frame(&f, &frames(&one, &to(other)), 5);
        assert_eq!(tx, 2000, "every get a hit");
        ns.push(n);
    }
    println!(
        "hot hit, one destination: {} ns; two in different slots: {} ns; two in one slot (a \
         socket lookup each): {} ns; the lookup: {} ns",
        ns[0],
        ns[1],
        ns[2],
        ns[2] as i128 - ns[0] as i128
    );
}

/// What the hit path's primitives cost (bpf/inkcache_prims.bpf.c): a BPF-to-BPF call, the frame
/// grown at the tail and at the head (alone, and with a request read before and a reply written
/// after), a tail call; each timed as `prog_ns` times everything here, against the program that
/// only returns XDP_PASS (docs/results/hitcost.md, twenty-seventh run).
#[test]
#[ignore = "a measurement, run by hand"]
fn primitives_cost() {
    use inkcache::skel::prims::InkcachePrimsSkelBuilder;
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    let mut pass_obj = std::mem::MaybeUninit::uninit();
    let pass = load_pass(&mut pass_obj);
    let mut obj = std::mem::MaybeUninit::uninit();
    let p = InkcachePrimsSkelBuilder::default()
        .open(&mut obj)
        .unwrap()
        .load()
        .unwrap();
    // 64 bytes (what the programs that read a request read), Ethernet with IPv4's EtherType
    let mut frame = vec![0u8; 64];
    frame[..12].fill(0xff);
    frame[12] = 0x08;
    let base = prog_ns(&pass.progs.inkcache_pass, &frame);
    println!("| the program does, before returning | ns | over XDP_PASS ({base} ns) |");
    println!("| --- | ---: | ---: |");
    let progs = &p.progs;
    for (what, prog) in [
        ("one BPF-to-BPF call", &progs.call1),
        ("three BPF-to-BPF calls", &progs.call3),
        ("bpf_xdp_adjust_tail(ctx, 56)", &progs.grow_tail),
        ("bpf_xdp_adjust_head(ctx, -56)", &progs.grow_head),
        (
            "64 bytes read, grown at the tail, 120 bytes written",
            &progs.tail_rw,
        ),
        (
            "64 bytes read, grown at the head, 120 bytes written",
            &progs.head_rw,
        ),
        ("bpf_tail_call to a program that returns", &progs.tail_call),
    ] {
        let ns = prog_ns(prog, &frame);
        println!("| {what} | {ns} | {} |", ns as i128 - base as i128);
    }
}

/// Mean ns of one run of `prog` on `frame` after user space has read `evict` (bigger than the
/// L2 cache, which on this AMD VM holds L1's lines too): the program's code and data then come
/// from L3 or memory, as they may live when other work runs on its CPU between packets. The mean
/// of `runs` runs, best of 3 rounds; asserts `want`.
fn cold_ns(
    prog: &libbpf_rs::ProgramMut,
    frame: &[u8],
    want: u32,
    evict: &[u64],
    runs: u32,
) -> u128 {
    (0..3)
        .map(|_| {
            let total: u128 = (0..runs)
                .map(|_| {
                    // one load per cache line, summed so the reads are made
                    std::hint::black_box(evict.iter().step_by(8).copied().sum::<u64>());
                    time_runs(prog, &[frame], 1, 1, Some(want), &String::new, None).0
                })
                .sum();
            total / u128::from(runs)
        })
        .min()
        .unwrap()
}

/// 8 MB: four times the L2 cache of the VM measured (2 MiB reported for 2 cores).
fn eviction_buffer() -> Vec<u64> {
    (0..(8u64 << 20) / 8).collect()
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hit_cost_by_stage_cold_caches() {
    let fl = Flow::v4();
    let evict = eviction_buffer();
    let mut prev = 0u128;
    println!("| stage | cumulative ns, L1 and L2 evicted | this stage ns |\n| --- | ---: | ---: |");
    for (i, name) in STAGES.iter().enumerate() {
        let (f, get, want) = stage_hit(i, &fl);
        let ns = cold_ns(&f.l.xdp.progs.inkcache_xdp, &get, want, &evict, 2000);
        println!("| {name} | {ns} | {} |", ns as i128 - prev as i128);
        prev = ns;
    }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn hot_hit_cost_cold_caches() {
    let f = fx();
    let mut obj = std::mem::MaybeUninit::uninit();
    let pass = load_pass(&mut obj);
    let fl = Flow::v4();
    let v = [b'v'; 32];
    write_key(&f, &fl, KEY, &v);
    f.fill(&fl, KEY, 0, &v);
    let get = fl.udp(7, format!("get {KEY}\r\n").as_bytes());
    let evict = eviction_buffer();
    let prog = &f.l.xdp.progs.inkcache_xdp;
    println!("| caches | XDP_PASS program ns | hot hit ns | hit minus XDP_PASS ns |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, ev) in [("warm", &evict[..0]), ("L1 and L2 evicted", &evict[..])] {
        let base = cold_ns(&pass.progs.inkcache_pass, &get, XDP_PASS, ev, 2000);
        let hit = cold_ns(prog, &get, XDP_TX, ev, 2000);
        println!(
            "| {name} | {base} | {hit} | {} |",
            hit as i128 - base as i128
        );
    }
}

/// `scripts/cost-ab.sh` runs two test binaries in turns, round by round, and compares their
/// rounds: run with this binary as both builds for a few rounds, in two sittings, it must end
/// (no turn lost between the two processes, nor between the sittings) and compare each of
/// `hot_hit_cost`'s three measurements over every round that has one of A's before and after it,
/// the ratio near 1, in each sitting and over both.
#[test]
fn cost_ab_compares_two_builds_round_by_round() {
    testkit::require_tool!("/usr/bin/taskset");
    testkit::skip_unless!(
        std::path::Path::new("/sys/devices/system/cpu/cpu1").exists(),
        "no CPU1 for the builds to take turns on"
    );
    let exe = std::env::current_exe().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cost-ab.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(&exe)
        .arg(&exe)
        .args(["hot_hit_cost", "4"])
        .env("COST_AB_TIMEOUT", "60") // a lost turn fails the test, it does not hang it
        .env("COST_AB_SITTINGS", "2")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (sittings, summary) = text
        .split_once("over the 2 sittings:")
        .unwrap_or_else(|| panic!("no summary of the sittings:\n{text}"));
    // the ratio column of every row that starts so: one per sitting, or the summary's
    let ratios = |part: &str, start: &str, col: usize| -> Vec<f64> {
        part.lines()
            .filter(|l| l.starts_with(start))
            .map(|l| {
                let cell = l.split('|').nth(col).unwrap().split_whitespace().next();
                cell.unwrap().parse().unwrap()
            })
            .collect()
    };
    for m in 0..3 {
        let each = ratios(sittings, &format!("| {m} | 3 | "), 5);
        assert_eq!(
            each.len(),
            2,
            "measurement {m}, 3 rounds in each sitting:\n{text}"
        );
        let over = ratios(summary, &format!("| {m} | 2 | "), 3);
        assert_eq!(over.len(), 1, "measurement {m} over the sittings:\n{text}");
        for r in each.iter().chain(&over) {
            assert!((0.5..2.0).contains(r), "measurement {m}: {r}\n{text}");
        }
    }
    assert!(
        !text.lines().any(|l| l.starts_with("| 3 | ")),
        "hot_hit_cost makes three measurements:\n{text}"
    );
}
