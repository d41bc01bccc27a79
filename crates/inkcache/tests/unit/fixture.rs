//! The programs of one attachment, loaded once per test binary and attached nowhere, run on
//! crafted frames with `BPF_PROG_TEST_RUN` (the kernel runs the real program on the real verifier's
//! output; only the packet is made up). Tests take the fixture's lock, so they run one at a time,
//! and start from an empty cache (`Fx::reset`).
use std::sync::{Mutex, MutexGuard, OnceLock};

use inkcache::{
    abi,
    attach::{load, Loaded, ObjStorage},
    skel::xdp::types::{ink_global, ink_iface, ink_vlan_key, xdp_room},
    AttachOpts, Stats,
};
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapFlags, ProgramInput};

use super::packet;

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
/// A cgroup_skb program's verdict that lets the packet go on.
pub const CG_PASS: u32 = 1;

/// The quarantine the fixture is loaded with (short, so tests can wait it out).
pub const QUARANTINE_MS: u64 = 40;
/// The key hash's seed the fixture is loaded with (tests craft keys whose hashes collide).
pub const HASH_SEED: u64 = 0x5eed_1234_abcd_0042;

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

/// A UDP socket bound to `addr`:`port` in this namespace, with SO_REUSEADDR (a memcached of the
/// host's, or another test process, may have the port too); an IPv6 one takes IPv6 only.
pub fn udp_bound(addr: &str, port: u16) -> std::os::fd::OwnedFd {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
    };
    let a = std::net::SocketAddr::new(addr.parse().unwrap(), port);
    let fam = if a.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(fam, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None).unwrap();
    setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap();
    if a.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true).unwrap();
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(a))
        .unwrap_or_else(|e| panic!("binding a UDP socket to {a}: {e}"));
    fd
}

/// Pins the calling test's thread to the CPU it runs on, for state XDP keeps per CPU; returns it.
pub fn pin_to_this_cpu() -> usize {
    let cpu = nix::sched::sched_getcpu().expect("sched_getcpu");
    let mut one = nix::sched::CpuSet::new();
    one.set(cpu).expect("a CPU set");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("pinning");
    cpu
}

/// The server's UDP sockets on packet::PORT, any address of either family, in this namespace
/// (the test runs' interface, `lo`, is in it): XDP answers only a get some socket would receive
/// (bpf/host.h server_listens). Bound once, for the process.
fn server_sockets() {
    static S: OnceLock<[std::os::fd::OwnedFd; 2]> = OnceLock::new();
    S.get_or_init(|| {
        [
            udp_bound("0.0.0.0", packet::PORT),
            udp_bound("::", packet::PORT),
        ]
    });
}

/// The fixture, locked and reset (every test starts from an empty cache).
pub fn fx() -> MutexGuard<'static, Fx> {
    let m = FX.get_or_init(|| Mutex::new(Fx::load(0)));
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    g.reset();
    g
}

impl Fx {
    /// The programs loaded anew (`stop_stage`: see AttachOpts::debug_stop_stage), reset.
    pub fn load(stop_stage: u32) -> Fx {
        Fx::load_sized(stop_stage, 1)
    }

    /// As `load`, with a cache of `cache_mb` (the measurements that fill many keys: over 1 MB,
    /// the expiry hints table has its production size too, so every key written keeps its hint).
    pub fn load_sized(stop_stage: u32, cache_mb: u32) -> Fx {
        Fx::load_with(stop_stage, cache_mb, |_| {})
    }

    /// As `load_sized`, with the options `edit` changes.
    pub fn load_with(stop_stage: u32, cache_mb: u32, edit: impl FnOnce(&mut AttachOpts)) -> Fx {
        let mut opts = AttachOpts {
            cache_mb,
            quarantine_ms: QUARANTINE_MS,
            max_conns: 64,
            pending_entries: 1024,
            ttl_hints: if cache_mb > 1 {
                AttachOpts::default().ttl_hints
            } else {
                1024
            },
            max_age_secs: 60,
            hash_seed: Some(HASH_SEED),
            debug_stop_stage: stop_stage,
            any_netns: true,
            ..AttachOpts::default()
        };
        edit(&mut opts);
        // the test flows' subnets, and lo's (attach's default there): the host's own gets
        let allow = [
            "198.18.0.0/15".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
            "127.0.0.0/8".parse().unwrap(),
        ];
        server_sockets();
        let st: &'static mut ObjStorage = Box::leak(Box::default());
        let l = load(&opts, &allow, st).expect("loading the programs (run as root)");
        // as attach does: the stream verdict walks every socket put in conn_socks
        l.requests
            .progs
            .inkcache_stream
            .attach_sockmap(l.xdp.maps.conn_socks.as_fd().as_raw_fd())
            .expect("attaching the stream verdict to conn_socks");
        let mut f = Fx { l };
        f.reset();
        f
    }
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
        let zero_state = vec![0u8; m.set_state.value_size() as usize];
        for i in 0..self.l.layout.sets {
            m.sets
                .update(&i.to_ne_bytes(), &zero_set, MapFlags::ANY)
                .unwrap();
            m.set_state
                .update(&i.to_ne_bytes(), &zero_state, MapFlags::ANY)
                .unwrap();
        }
        // the hot slots name log positions, which start again from 0 with the head below
        let zero_seg = vec![0u8; m.arena.value_size() as usize];
        for i in self.l.layout.segs..self.l.layout.arena_entries() {
            m.arena
                .update(&i.to_ne_bytes(), &zero_seg, MapFlags::ANY)
                .unwrap();
        }
        for map in [
            &m.pending as &dyn MapCore,
            &m.udp_writes,
            &m.conns,
            &m.ttl_hints,
            &m.conn_socks,
            &m.vlans,
        ] {
            clear_hash(map);
        }
        m.ports
            .update(
                &0u32.to_ne_bytes(),
                &inkcache::attach::ports_bitmap(&[packet::PORT]),
                MapFlags::ANY,
            )
            .unwrap();
        let none = ink_iface::default();
        for i in 0..abi::IFACE_SLOTS as u32 {
            m.ifaces
                .update(&i.to_ne_bytes(), abi::bytes_of(&none), MapFlags::ANY)
                .unwrap();
        }
        self.set_iface(&server_iface(0));
        let cpus = libbpf_rs::num_possible_cpus().unwrap();
        let zero = vec![vec![0u8; 8]; cpus];
        for i in 0..abi::ST_MAX as u32 {
            m.stats
                .update_percpu(&i.to_ne_bytes(), &zero, MapFlags::ANY)
                .unwrap();
        }
        self.set_room(&xdp_room::default());
        self.forget_sockets();
        let mut g = self.global();
        g = ink_global {
            realtime_off_ns: g.realtime_off_ns,
            ..Default::default()
        };
        self.set_global(&g);
    }

    /// What XDP knows of the test runs' interface's frames (its `xdp_room` slot, every CPU's).
    /// `no_tail` set: the frames have no tailroom, and replies grow at the head (as on veth).
    pub fn set_room(&self, r: &xdp_room) {
        let m = &self.l.xdp.maps.xdp_room;
        let cpus = libbpf_rs::num_possible_cpus().unwrap();
        let v = vec![abi::bytes_of(r).to_vec(); cpus];
        m.update_percpu(&1u32.to_ne_bytes(), &v, MapFlags::ANY)
            .unwrap();
    }

    /// The `xdp_room` slot of the test runs' interface, one per CPU.
    pub fn rooms(&self) -> Vec<xdp_room> {
        let m = &self.l.xdp.maps.xdp_room;
        let v = m
            .lookup_percpu(&1u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap();
        v.iter()
            .map(|b| abi::from_bytes::<xdp_room>(b).unwrap())
            .collect()
    }

    /// The `xdp_room` slot of the test runs' interface, summed over the CPUs' `skips` (replies
    /// grown at the head since the tail was last tried).
    pub fn room_skips(&self) -> u64 {
        self.rooms().iter().map(|r| r.skips as u64).sum()
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

    /// Makes XDP forget the server's sockets it found (scratch.sl, every CPU's): each test
    /// starts knowing none, whatever sockets earlier tests bound (bpf/host.h server_listens).
    fn forget_sockets(&self) {
        use inkcache::skel::xdp::types::scratch;
        let m = &self.l.xdp.maps.scratch;
        let at = std::mem::offset_of!(scratch, sl);
        let len = std::mem::size_of_val(&scratch::default().sl);
        let mut v = m
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap();
        for cpu in &mut v {
            cpu[at..at + len].fill(0);
        }
        m.update_percpu(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
            .unwrap();
    }

    /// What the socket hooks do when a socket binds or releases a cached port (they are not
    /// attached here): a new server generation, so XDP's sockets found before are void.
    pub fn sockets_changed(&self) {
        let mut g = self.global();
        g.gen += 1;
        self.set_global(&g);
    }

    pub fn set_global(&self, g: &ink_global) {
        self.l
            .xdp
            .maps
            .global
            .update(&0u32.to_ne_bytes(), abi::bytes_of(g), MapFlags::ANY)
            .unwrap();
    }

    /// Describes the interface test runs arrive on (BPF_PROG_TEST_RUN: the loopback device,
    /// ifindex 1) as the control plane would: its MAC, addresses, flags.
    pub fn set_iface(&self, e: &ink_iface) {
        self.l
            .xdp
            .maps
            .ifaces
            .update(&1u32.to_ne_bytes(), abi::bytes_of(e), MapFlags::ANY)
            .unwrap();
    }

    /// Describes a VLAN device on the test runs' interface (ifindex 1), reached by `tags`
    /// (outermost first, each TPID << 16 | VLAN id), as the control plane would: `e` is the
    /// device, its `ifindex` its own.
    pub fn set_vlan(&self, tags: [u32; 2], e: &ink_iface) {
        let m = &self.l.xdp.maps;
        let k = ink_vlan_key {
            ifindex: 1,
            tag: tags,
        };
        m.vlans
            .update(abi::bytes_of(&k), &e.ifindex.to_ne_bytes(), MapFlags::ANY)
            .unwrap();
        m.ifaces
            .update(
                &inkcache::host::slot(e.ifindex).to_ne_bytes(),
                abi::bytes_of(e),
                MapFlags::ANY,
            )
            .unwrap();
    }

    pub fn stats(&self) -> Stats {
        Stats::from_map(&self.l.xdp.maps.stats).unwrap()
    }

    /// Runs the XDP program on `frame`.
    pub fn xdp(&self, frame: &[u8]) -> Run {
        run(&self.l.xdp.progs.inkcache_xdp, frame)
    }

    /// Runs the answers program (cgroup egress) on `frame` (the server's packet on its way out;
    /// the program sees it from its IP header).
    pub fn egress(&self, frame: &[u8]) -> Run {
        run(&self.l.answers.progs.inkcache_answers, frame)
    }

    /// A UDP datagram from a client as the host handles it: XDP first, and if it passes, the
    /// server socket's cgroup ingress program. Returns XDP's action.
    pub fn udp_in(&self, frame: &[u8]) -> u32 {
        let x = self.xdp(frame);
        if x.action == XDP_PASS {
            let r = run(&self.l.requests.progs.inkcache_udp_requests, frame);
            assert_eq!(
                r.action, CG_PASS,
                "cgroup ingress must let requests through"
            );
        }
        x.action
    }

    /// `key`'s tag and index set (its number and its ways as 64-bit words: tag low, position
    /// high).
    fn set_of_key(&self, key: &str) -> (u32, u32, Vec<u64>) {
        let h = inkcache::key_hash(HASH_SEED, key.as_bytes());
        let idx = inkmodel::table::set_of(h, self.l.layout.sets) as u32;
        let v = self
            .l
            .xdp
            .maps
            .sets
            .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .expect("the set");
        let ways = v
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .collect();
        (inkmodel::table::tag_of(h), idx, ways)
    }

    /// The log position (16-byte units, low 32 bits) of the item `key`'s way names, if any.
    pub fn way_pos(&self, key: &str) -> Option<u32> {
        let (tag, _, ways) = self.set_of_key(key);
        ways.iter()
            .find(|w| **w as u32 == tag)
            .map(|w| (*w >> 32) as u32)
    }

    /// Makes `key`'s way (or, if it has none, an empty way of its set) name log position `pos`.
    pub fn put_way(&self, key: &str, pos: u32) {
        let (tag, idx, mut ways) = self.set_of_key(key);
        let w = ways
            .iter()
            .position(|w| *w as u32 == tag)
            .or_else(|| ways.iter().position(|w| *w as u32 == 0))
            .expect("a way for the key");
        ways[w] = ((pos as u64) << 32) | tag as u64;
        let v: Vec<u8> = ways.iter().flat_map(|w| w.to_ne_bytes()).collect();
        self.l
            .xdp
            .maps
            .sets
            .update(&idx.to_ne_bytes(), &v, MapFlags::ANY)
            .unwrap();
    }

    /// Adds `port` to the server's ports.
    pub fn add_port(&self, port: u16) {
        let m = &self.l.xdp.maps.ports;
        let mut v = m
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap();
        inkcache::attach::set_port(&mut v, port);
        m.update(&0u32.to_ne_bytes(), &v, MapFlags::ANY).unwrap();
    }

    /// Puts the server side of a connection in conn_socks, as socket ops does for a connection
    /// the server accepts; with `isn`, with its state in `conns` (followed from its first byte,
    /// the server's answers numbered from `isn`), without, as for a connection accepted before
    /// attach.
    pub fn follow(&self, flow: &packet::Flow, server: &std::net::TcpStream, isn: Option<u32>) {
        use std::os::fd::AsRawFd;
        let m = &self.l.xdp.maps;
        let key = conn_key(flow);
        if let Some(isn) = isn {
            let c = inkcache::skel::xdp::types::ink_conn {
                flags: abi::CONN_OUT_OK as u64,
                out_seq: isn,
                ..Default::default()
            };
            m.conns
                .update(&key, abi::bytes_of(&c), MapFlags::NO_EXIST)
                .unwrap();
        }
        let fd = server.as_raw_fd() as u64;
        m.conn_socks
            .update(&key, &fd.to_ne_bytes(), MapFlags::NO_EXIST)
            .expect("putting the socket in conn_socks");
    }
}

/// The server's interface: SERVER_MAC, the server addresses of Flow::v4 and Flow::v6 (its own),
/// 198.18.0.255 (a broadcast) and 198.18.0.3 (another interface's); `flags` IFACE_*.
pub fn server_iface(flags: u8) -> ink_iface {
    let mut e = ink_iface {
        ifindex: 1,
        mac: packet::SERVER_MAC,
        flags,
        ..Default::default()
    };
    for (a, local) in [
        ("198.18.0.1", true),
        ("fd00::1", true),
        ("198.18.0.255", false),
        ("198.18.0.3", false),
    ] {
        assert!(inkcache::host::add_addr(&mut e, a.parse().unwrap(), local));
    }
    e
}

/// struct ink_conn_key of a client/server flow (IPv4 mapped into IPv6, ports in network order).
pub fn conn_key(flow: &packet::Flow) -> Vec<u8> {
    let v6 = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v) => v.octets(),
    };
    let mut k = Vec::with_capacity(36);
    k.extend_from_slice(&v6(flow.client));
    k.extend_from_slice(&v6(flow.server));
    k.extend_from_slice(&flow.cport.to_be_bytes());
    k.extend_from_slice(&flow.sport.to_be_bytes());
    k
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
