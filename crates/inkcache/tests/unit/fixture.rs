//! The programs of one attachment, loaded once per test binary and attached nowhere, run on
//! crafted frames with `BPF_PROG_TEST_RUN` (the kernel runs the real program on the real verifier's
//! output; only the packet is made up). Tests take the fixture's lock, so they run one at a time,
//! and start from an empty cache (`Fx::reset`).
use std::sync::{Mutex, MutexGuard, OnceLock};

use inkcache::{
    abi,
    attach::{load, Loaded, ObjStorage},
    skel::xdp::types::ink_global,
    AttachOpts, Stats,
};
use libbpf_rs::{MapCore, MapFlags, ProgramInput};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const TC_ACT_OK: u32 = 0;

/// The quarantine the fixture is loaded with (short, so tests can wait it out).
pub const QUARANTINE_MS: u64 = 40;

pub struct Fx {
    pub l: Loaded<'static>,
}

/// What a program did with a frame.
#[derive(Debug)]
pub struct Run {
    pub action: u32,
    /// The frame as the program left it.
    pub data: Vec<u8>,
}

static FX: OnceLock<Mutex<Fx>> = OnceLock::new();

/// The fixture, locked and reset (every test starts from an empty cache).
pub fn fx() -> MutexGuard<'static, Fx> {
    let m = FX.get_or_init(|| {
        let opts = AttachOpts {
            cache_mb: 1,
            quarantine_ms: QUARANTINE_MS,
            max_conns: 64,
            pending_entries: 1024,
            ttl_hints: 1024,
            max_age_secs: 60,
            ..AttachOpts::default()
        };
        let allow = [
            "198.18.0.0/15".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ];
        let st: &'static mut ObjStorage = Box::leak(Box::default());
        Mutex::new(Fx {
            l: load(&opts, &allow, st).expect("loading the programs (run as root)"),
        })
    });
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    g.reset();
    g
}

fn clear_hash(m: &dyn MapCore) {
    let keys: Vec<Vec<u8>> = m.keys().collect();
    for k in keys {
        let _ = m.delete(&k);
    }
}

impl Fx {
    /// Empties the cache and every table of state, and zeroes the counters.
    pub fn reset(&mut self) {
        let m = &self.l.xdp.maps;
        let zero_set = vec![0u8; m.sets.value_size() as usize];
        for i in 0..self.l.layout.sets {
            m.sets
                .update(&i.to_ne_bytes(), &zero_set, MapFlags::ANY)
                .unwrap();
        }
        for map in [
            &m.pending as &dyn MapCore,
            &m.udp_writes,
            &m.conns,
            &m.ttl_hints,
        ] {
            clear_hash(map);
        }
        let cpus = libbpf_rs::num_possible_cpus().unwrap();
        let zero = vec![vec![0u8; 8]; cpus];
        for i in 0..abi::ST_MAX as u32 {
            m.stats
                .update_percpu(&i.to_ne_bytes(), &zero, MapFlags::ANY)
                .unwrap();
        }
        let mut g = self.global();
        g = ink_global {
            realtime_off_ns: g.realtime_off_ns,
            ..Default::default()
        };
        self.set_global(&g);
    }

    pub fn global(&self) -> ink_global {
        let v = self
            .l
            .xdp
            .maps
            .global
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap();
        abi::from_bytes(&v).unwrap()
    }

    pub fn set_global(&self, g: &ink_global) {
        self.l
            .xdp
            .maps
            .global
            .update(&0u32.to_ne_bytes(), abi::bytes_of(g), MapFlags::ANY)
            .unwrap();
    }

    pub fn stats(&self) -> Stats {
        Stats::from_map(&self.l.xdp.maps.stats).unwrap()
    }

    /// Runs the XDP program on `frame`.
    pub fn xdp(&self, frame: &[u8]) -> Run {
        run(&self.l.xdp.progs.inkcache_xdp, frame)
    }

    /// Runs the TC egress program on `frame` (the server's packet on its way out).
    pub fn egress(&self, frame: &[u8]) -> Run {
        run(&self.l.tc_egress.progs.inkcache_tc_egress, frame)
    }
}

fn run(prog: &libbpf_rs::ProgramMut<'_>, frame: &[u8]) -> Run {
    let mut out = vec![0u8; frame.len() + 4096];
    let input = ProgramInput {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ..Default::default()
    };
    let o = prog.test_run(input).expect("BPF_PROG_TEST_RUN");
    let n = o.data.as_ref().map_or(0, |d| d.len());
    let action = o.return_value;
    out.truncate(n);
    Run { action, data: out }
}
