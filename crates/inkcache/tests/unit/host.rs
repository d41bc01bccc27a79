//! The kernel answers only what the host's own stack would deliver to the server (bpf/host.h):
//! a frame to the interface's MAC and one of its unicast addresses, from a source that is neither
//! martian nor the host's, with valid checksums. Everything else passes untouched and counts
//! `not_host`, whatever the allowlist or --max-amplification say.
use super::fixture::{pin_to_this_cpu, server_iface, udp_bound};
use super::packet::vlan_ids;
use super::*;
use inkcache::skel::xdp::types::ink_iface;

/// Offsets in an untagged IPv4 frame.
const IP4: usize = 14;
const UDP4: usize = IP4 + 20;
/// Offsets in an untagged IPv6 frame.
const UDP6: usize = 14 + 40;

/// A get of a cached key from `fl`, with `edit` applied to the frame: what XDP did.
fn get_edited(f: &Fx, fl: &Flow, edit: impl FnOnce(&mut Vec<u8>)) -> u32 {
    let mut frame = fl.udp(next_id(), b"get k\r\n");
    edit(&mut frame);
    f.xdp(&frame).action
}

/// Caches `k` and checks that an unedited get hits: every case below differs in one thing.
fn cached(fl: &Flow) -> std::sync::MutexGuard<'static, Fx> {
    let f = fx();
    f.fill(&Flow::v4(), "k", 0, b"v");
    assert_eq!(
        get_edited(&f, fl, |_| ()),
        XDP_TX,
        "the unedited get should hit"
    );
    f
}

fn passes(f: &Fx, fl: &Flow, what: &str, edit: impl FnOnce(&mut Vec<u8>)) {
    let before = f.stats().not_host;
    assert_eq!(get_edited(f, fl, edit), XDP_PASS, "{what}: answered");
    assert_eq!(f.stats().not_host, before + 1, "{what}: not counted");
}

/// Ones' complement sum of 16-bit big-endian words.
fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The checksum field a local sender leaves partial (CHECKSUM_PARTIAL): the pseudo header's sum.
fn partial_check(frame: &[u8]) -> u16 {
    let mut ph = Vec::new();
    ph.extend_from_slice(&frame[IP4 + 12..IP4 + 20]);
    ph.extend_from_slice(&[0, 17]);
    ph.extend_from_slice(&frame[UDP4 + 4..UDP4 + 6]);
    fold(sum16(&ph))
}

#[test]
fn bad_checksums_pass() {
    let fl = Flow::v4();
    let f = cached(&fl);
    passes(&f, &fl, "UDP checksum off by one", |fr| fr[UDP4 + 7] ^= 1);
    passes(&f, &fl, "IPv4 header checksum off", |fr| {
        fr[IP4 + 11] ^= 0x10
    });
    // a payload byte changed after the checksum was computed
    passes(&f, &fl, "payload changed", |fr| {
        let n = fr.len();
        fr[n - 3] = b'K';
    });
    let v6 = Flow::v6();
    passes(&f, &v6, "IPv6 UDP checksum off", |fr| fr[UDP6 + 6] ^= 0x40);
    passes(&f, &v6, "IPv6 UDP checksum 0 (not allowed)", |fr| {
        fr[UDP6 + 6] = 0;
        fr[UDP6 + 7] = 0;
    });
}

#[test]
fn good_checksums_are_answered() {
    let fl = Flow::v4();
    let f = cached(&fl);
    // IPv4 may leave the UDP checksum out
    let a = get_edited(&f, &fl, |fr| {
        fr[UDP4 + 6] = 0;
        fr[UDP4 + 7] = 0;
    });
    assert_eq!(a, XDP_TX);
    assert_eq!(get_edited(&f, &Flow::v6(), |_| ()), XDP_TX);
    // a request over 512 bytes is summed in pieces
    let long = format!("get {} k\r\n", "z".repeat(240));
    let long = format!("get {}{}", "y".repeat(250), &long[3..]);
    let mut req = long.clone();
    while req.len() < 700 {
        req = format!("get {}{}", "w".repeat(200), &req[3..]);
    }
    let before = f.stats().not_host;
    let r = f.xdp(&fl.udp(next_id(), req.as_bytes()));
    assert_eq!(r.action, XDP_PASS, "misses pass");
    assert_eq!(
        f.stats().not_host,
        before,
        "a long valid request is the host's"
    );
}

#[test]
fn partial_checksums_only_on_virtual_interfaces() {
    let fl = Flow::v4();
    let f = cached(&fl);
    let partial = |fr: &mut Vec<u8>| {
        let c = partial_check(fr);
        fr[UDP4 + 6..UDP4 + 8].copy_from_slice(&c.to_be_bytes());
    };
    passes(&f, &fl, "partial checksum on a physical interface", partial);
    f.set_iface(&server_iface(inkcache::abi::IFACE_CSUM_PARTIAL as u8));
    assert_eq!(
        get_edited(&f, &fl, partial),
        XDP_TX,
        "veth: partial is fine"
    );
    passes(&f, &fl, "veth: a wrong checksum still", |fr| {
        fr[UDP4 + 7] ^= 1
    });
}

#[test]
fn foreign_destinations_pass() {
    let fl = Flow::v4();
    let f = cached(&fl);
    passes(&f, &fl, "another host's MAC", |fr| fr[5] ^= 0x80);
    passes(&f, &fl, "broadcast MAC", |fr| fr[..6].fill(0xff));
    for dst in [
        "198.18.0.9",   // a host this one would route to
        "198.18.0.255", // the subnet's broadcast
        "255.255.255.255",
        "224.0.0.1",
        "198.18.0.3", // another interface's address (weak host: passed to the stack to decide)
    ] {
        let to = Flow {
            server: dst.parse().unwrap(),
            ..Flow::v4()
        };
        passes(&f, &to, dst, |_| ());
    }
    let to = Flow {
        server: "ff02::1".parse().unwrap(),
        ..Flow::v6()
    };
    passes(&f, &to, "ff02::1", |_| ());
    // the host's IPv4 address written v4-mapped in an IPv6 header: no IPv6 route delivers it
    // to the host (the stack has no such IPv6 address), so neither may the kernel answer it
    let to = Flow {
        server: "::ffff:198.18.0.1".parse().unwrap(),
        ..Flow::v6()
    };
    passes(&f, &to, "::ffff:198.18.0.1 over IPv6", |_| ());
}

#[test]
fn martian_and_own_sources_pass() {
    let fl = Flow::v4();
    let f = cached(&fl);
    // the first three and 127.0.0.1 are in the allowlist: the check does not depend on it
    for src in [
        "198.18.0.1",   // the host itself
        "198.18.0.3",   // another of its addresses
        "198.18.0.255", // a broadcast
        "127.0.0.1",
        "0.0.0.0",
        "224.0.0.5",
        "255.255.255.255",
        "240.0.0.1",
    ] {
        passes(&f, &Flow::v4().from(src), src, |_| ());
    }
    for src in ["::1", "::", "ff02::1", "::ffff:198.18.0.2", "fd00::1"] {
        passes(&f, &Flow::v6().from(src), src, |_| ());
    }
    // source port 0: memcached's reply fails there (sendmsg refuses port 0), so it sends none
    for fl in [Flow::v4(), Flow::v6()] {
        let what = format!("{} from port 0", fl.client);
        passes(&f, &Flow { cport: 0, ..fl }, &what, |_| ());
    }
}

#[test]
fn loopback_answers_the_host_itself() {
    let f = fx();
    f.set_iface(&server_iface(
        (inkcache::abi::IFACE_LOOPBACK | inkcache::abi::IFACE_CSUM_PARTIAL) as u8,
    ));
    f.fill(&Flow::v4(), "k", 0, b"v");
    // a client on the host, to the host's own address, over lo
    let own = Flow::v4().from("198.18.0.1");
    assert_eq!(get_edited(&f, &own, |_| ()), XDP_TX);
    let before = f.stats().not_host;
    let to = Flow {
        server: "198.18.0.9".parse().unwrap(),
        ..own
    };
    assert_eq!(
        get_edited(&f, &to, |_| ()),
        XDP_PASS,
        "not the host's address"
    );
    assert_eq!(f.stats().not_host, before + 1);
}

/// 802.1Q and 802.1ad tags as `vlans` keys them: TPID << 16 | VLAN id.
const Q: u32 = 0x8100 << 16;
const AD: u32 = 0x88a8 << 16;

/// A VLAN device with the server's MAC and addresses (server_iface), ifindex `ifindex`.
fn vlan_dev(ifindex: u32) -> ink_iface {
    ink_iface {
        ifindex,
        ..server_iface(0)
    }
}

/// A tagged frame is the host's only through a VLAN device for its tags (this kernel may have no
/// VLAN support at all): with none, the stack marks it for another host and drops it, except a tag
/// of VLAN id 0 (priority only), which it ignores. So do the host checks, tag by tag, TPID
/// included (Flow's single tag is 802.1Q, its outer one of two 802.1ad).
#[test]
fn tagged_gets_pass_unless_a_vlan_device_takes_them() {
    let f = cached(&Flow::v4());
    let tagged = |tags: &[u16]| Flow::v4().vlans(tags);
    let answered = |f: &Fx, tags: &[u16]| {
        assert_eq!(
            get_edited(f, &tagged(tags), |_| ()),
            XDP_TX,
            "tags {tags:?}: not answered"
        );
    };
    for tags in [&[42u16][..], &[100, 42], &[0, 42], &[42, 0]] {
        passes(
            &f,
            &tagged(tags),
            &format!("no device, tags {tags:?}"),
            |_| (),
        );
    }
    for tags in [&[0u16][..], &[0, 0]] {
        answered(&f, tags); // priority tags: the interface's own
    }
    f.set_vlan([Q | 42, 0], &vlan_dev(100));
    answered(&f, &[42]);
    answered(&f, &[0, 42]); // the priority tag ignored, then the device's
    passes(&f, &tagged(&[100, 42]), "no device for 802.1ad 100", |_| ());
    passes(&f, &tagged(&[42, 0]), "802.1ad 42 is not 802.1Q 42", |_| ());
    f.set_vlan([AD | 100, 0], &vlan_dev(101));
    passes(&f, &tagged(&[100, 42]), "no device for 42 on 100", |_| ());
    answered(&f, &[100, 0]); // 100's own, the inner tag a priority tag
    f.set_vlan([AD | 100, Q | 42], &vlan_dev(102));
    answered(&f, &[100, 42]);
}

/// A VLAN device is checked as the interface it is: its own MAC and addresses, not those of the
/// interface it is on.
#[test]
fn a_vlan_device_is_checked_as_itself() {
    let f = cached(&Flow::v4());
    let fl = Flow::v4().vlans(&[42]);
    let mut other = vlan_dev(100);
    other.mac[5] ^= 1;
    f.set_vlan([Q | 42, 0], &other);
    passes(&f, &fl, "to the interface's MAC, not the device's", |_| ());
    let mut dev = ink_iface {
        ifindex: 100,
        mac: packet::SERVER_MAC,
        ..Default::default()
    };
    assert!(inkcache::host::add_addr(
        &mut dev,
        "198.18.42.1".parse().unwrap(),
        true
    ));
    f.set_vlan([Q | 42, 0], &dev);
    passes(&f, &fl, "to an address the device does not have", |_| ());
    let to_dev = Flow {
        server: "198.18.42.1".parse().unwrap(),
        ..fl
    };
    assert_eq!(
        get_edited(&f, &to_dev, |_| ()),
        XDP_TX,
        "to the device's address"
    );
}

/// A tagged get the host would take is answered with its tags kept.
#[test]
fn vlan_tags_stay_on_the_reply() {
    let f = fx();
    f.fill(&Flow::v4(), "tagged", 1, b"in a vlan");
    f.set_vlan([Q | 42, 0], &vlan_dev(100));
    f.set_vlan([AD | 100, 0], &vlan_dev(101));
    f.set_vlan([AD | 100, Q | 42], &vlan_dev(102));
    for tags in [&[42u16][..], &[100, 42], &[0]] {
        let fl = Flow::v4().vlans(tags);
        let id = next_id();
        let r = f.xdp(&fl.udp(id, b"get tagged\r\n"));
        assert_eq!(r.action, XDP_TX, "tags {tags:?}");
        assert_eq!(vlan_ids(&r.data), tags);
        assert_eq!(
            reply_payload(&fl, id, &r.data),
            value_reply("tagged", 1, b"in a vlan")
        );
    }
}

/// `hdr`, an IPv6 extension header of type `next`, inserted before the UDP header of an untagged
/// IPv6 frame (the UDP checksum stays valid: it covers neither).
fn insert_ext(frame: &mut Vec<u8>, next: u8, hdr: &[u8]) {
    assert_eq!(frame[IP4 + 6], 17, "an IPv6 header straight before UDP");
    frame[IP4 + 6] = next;
    let plen = u16::from_be_bytes([frame[IP4 + 4], frame[IP4 + 5]]) + hdr.len() as u16;
    frame[IP4 + 4..IP4 + 6].copy_from_slice(&plen.to_be_bytes());
    frame.splice(UDP6..UDP6, hdr.iter().copied());
}

/// A get behind IPv6 extension headers passes, as one with IPv4 options does: the stack may drop
/// the packet for them (an option it does not know whose type says "discard", a routing header,
/// an authentication header with no security association), and the kernel cache does not know
/// which. Each header here is walked to the UDP header (the get is parsed) and its next header
/// is UDP.
#[test]
fn gets_behind_ipv6_extension_headers_pass() {
    let fl = Flow::v6();
    let f = cached(&fl);
    for (what, next, hdr) in [
        (
            "hop-by-hop, padding only",
            0u8,
            &[17u8, 0, 1, 4, 0, 0, 0, 0][..],
        ),
        (
            "hop-by-hop, an unknown option to discard",
            0,
            &[17, 0, 0x41, 4, 0, 0, 0, 0],
        ),
        ("destination options", 60, &[17, 0, 1, 4, 0, 0, 0, 0]),
        (
            "segment routing, no segment left",
            43,
            &[17, 0, 4, 0, 0, 0, 0, 0],
        ),
        ("authentication", 51, &[17, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]),
    ] {
        let (hits, passed) = (f.stats().hits, f.stats().passed);
        assert_eq!(
            get_edited(&f, &fl, |fr| insert_ext(fr, next, hdr)),
            XDP_PASS,
            "{what}: answered"
        );
        assert_eq!(f.stats().hits, hits, "{what}");
        assert_eq!(f.stats().passed, passed + 1, "{what}: not counted");
    }
}

/// What the control plane writes for the VLAN devices it found (host::publish_vlans, here with
/// `lo` standing in for the device and the interface): each device in `ifaces` as itself, the
/// interface's checksum rule and not loopback's, and in `vlans` by its tags; a device whose slot
/// another interface has is left out, and nothing of it written.
#[test]
fn the_control_plane_describes_vlan_devices_by_their_tags() {
    use inkcache::abi::{self, IFACE_SLOTS};
    use inkcache::host::VlanDev;
    use inkcache::skel::xdp::types::ink_vlan_key;
    use libbpf_rs::{MapCore, MapFlags};
    let f = fx();
    let m = &f.l.xdp.maps;
    let dev = |ifindex, tags| VlanDev {
        name: "lo".into(),
        ifindex,
        tags,
    };
    let taken = 1 + IFACE_SLOTS as u32; // ifindex 1's slot: the test runs' interface has it
    inkcache::host::publish(&m.ifaces, 1, "lo").unwrap(); // as attach does first
    let (done, left) = inkcache::host::publish_vlans(
        &m.ifaces,
        &m.vlans,
        1,
        "lo",
        &[dev(300, [Q | 42, 0]), dev(taken, [Q | 43, 0])],
    )
    .unwrap();
    assert_eq!(done, vec![dev(300, [Q | 42, 0])]);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("lo (802.1Q 43)"), "{left:?}");
    let lookup = |map: &dyn MapCore, k: &[u8]| map.lookup(k, MapFlags::ANY).unwrap();
    let e: ink_iface =
        abi::from_bytes(&lookup(&m.ifaces, &inkcache::host::slot(300).to_ne_bytes()).unwrap())
            .unwrap();
    let lo = inkcache::host::describe("lo").unwrap();
    assert_eq!((e.ifindex, e.mac, e.nv4), (300, lo.mac, lo.nv4));
    assert_eq!(e.flags, lo.flags & inkcache::abi::IFACE_CSUM_PARTIAL as u8);
    let key = |tag| ink_vlan_key {
        ifindex: 1,
        tag: [tag, 0],
    };
    let v = lookup(&m.vlans, abi::bytes_of(&key(Q | 42))).expect("the device by its tag");
    assert_eq!(v, 300u32.to_ne_bytes());
    assert!(lookup(&m.vlans, abi::bytes_of(&key(Q | 43))).is_none());
    let e1: ink_iface = abi::from_bytes(&lookup(&m.ifaces, &1u32.to_ne_bytes()).unwrap()).unwrap();
    assert_eq!(e1.ifindex, 1, "the interface's slot kept");
    // a full `vlans` map: the device is left out, its slot in `ifaces` not written
    for i in 0..abi::VLAN_DEVS as u32 {
        let k = ink_vlan_key {
            ifindex: 2,
            tag: [Q | i, 0],
        };
        let _ = m
            .vlans
            .update(abi::bytes_of(&k), &7u32.to_ne_bytes(), MapFlags::ANY);
    }
    let (done, left) =
        inkcache::host::publish_vlans(&m.ifaces, &m.vlans, 1, "lo", &[dev(301, [Q | 44, 0])])
            .unwrap();
    assert!(done.is_empty(), "{done:?}");
    assert!(left[0].contains("at most 256 VLAN devices"), "{left:?}");
    let e: ink_iface =
        abi::from_bytes(&lookup(&m.ifaces, &inkcache::host::slot(301).to_ne_bytes()).unwrap())
            .unwrap();
    assert_eq!(e.ifindex, 0, "nothing of it written");
}

#[test]
fn unknown_interface_passes() {
    let fl = Flow::v4();
    let f = cached(&fl);
    // the slot of ifindex 1 describing another interface (257 % 256 == 1), then nothing
    f.set_iface(&inkcache::skel::xdp::types::ink_iface {
        ifindex: 1 + inkcache::abi::IFACE_SLOTS as u32,
        ..server_iface(0)
    });
    passes(&f, &fl, "another interface's slot", |_| ());
    f.set_iface(&inkcache::skel::xdp::types::ink_iface::default());
    passes(
        &f,
        &fl,
        "an interface the control plane did not describe",
        |_| (),
    );
}

#[test]
fn gets_no_socket_would_receive_pass() {
    let fl = Flow::v4();
    let f = cached(&fl);
    // a second cached port, where the server listens on loopback only (as Debian's memcached,
    // -l 127.0.0.1): the host would not deliver a get from the network to it
    let port = packet::PORT + 1;
    let lo = udp_bound("127.0.0.1", port);
    f.add_port(port);
    let to = fl.clone().sport(port);
    let to6 = Flow::v6().sport(port);
    passes(&f, &to, "to an address no socket listens on", |_| ());
    passes(&f, &to6, "IPv6, to a port only an IPv4 socket has", |_| ());
    // listening on every IPv4 address: answered, and IPv6 still not
    let any = udp_bound("0.0.0.0", port);
    assert_eq!(get_edited(&f, &to, |_| ()), XDP_TX, "a socket receives it");
    passes(&f, &to6, "IPv6, to an IPv4 socket's port", |_| ());
    // the socket released: the destination remembered is forgotten
    drop(any);
    f.sockets_changed();
    passes(&f, &to, "its socket released", |_| ());
    drop(lo);
}

/// A socket bound to the interface (SO_BINDTODEVICE) does not receive a get the stack takes up at
/// a VLAN device on it, though the helper's lookup, made as for the interface XDP runs on, finds
/// it; nor is the answer found for the interface remembered for the device.
#[test]
fn a_socket_bound_to_the_interface_misses_its_vlan_devices_gets() {
    use nix::sys::socket::{setsockopt, sockopt};
    pin_to_this_cpu(); // what XDP remembers is per CPU: every get on the one that remembered
    let fl = Flow::v4();
    let f = cached(&fl);
    let port = packet::PORT + 2;
    let bound = udp_bound("0.0.0.0", port);
    setsockopt(&bound, sockopt::BindToDevice, &"lo".into()).unwrap();
    f.add_port(port);
    f.sockets_changed();
    f.set_vlan([Q | 42, 0], &vlan_dev(100));
    let to = fl.clone().sport(port);
    let tagged = to.clone().vlans(&[42]);
    assert_eq!(
        get_edited(&f, &to, |_| ()),
        XDP_TX,
        "to the socket's device"
    );
    passes(
        &f,
        &tagged,
        "at the VLAN device, after the interface's",
        |_| (),
    );
    f.sockets_changed();
    passes(&f, &tagged, "at the VLAN device, first", |_| ());
    // bound to no device, a socket receives it wherever the stack takes it up
    drop(bound);
    let any = udp_bound("0.0.0.0", port);
    f.sockets_changed();
    assert_eq!(
        get_edited(&f, &tagged, |_| ()),
        XDP_TX,
        "a socket bound to no device"
    );
    drop(any);
}

/// A connected UDP socket receives from its peer only (its address, and its port unless it
/// connected to port 0): the socket found for a get from the peer is not taken to receive one
/// from anywhere else (over `lo`, where the peer is the host itself and any source is checked
/// by the socket lookup alone).
#[test]
fn a_connected_socket_is_not_remembered_for_other_sources() {
    use inkcache::abi::{IFACE_CSUM_PARTIAL, IFACE_LOOPBACK};
    use nix::sys::socket::{connect, SockaddrIn};
    use std::os::fd::AsRawFd;
    pin_to_this_cpu(); // what XDP remembers is per CPU: every get on the one that remembered
    let f = fx();
    let mut lo = server_iface((IFACE_LOOPBACK | IFACE_CSUM_PARTIAL) as u8);
    assert!(inkcache::host::add_addr(
        &mut lo,
        "127.0.0.1".parse().unwrap(),
        true
    ));
    f.set_iface(&lo);
    f.fill(&Flow::v4(), "k", 0, b"v");
    let port = packet::PORT + 3;
    f.add_port(port);
    let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let peer = Flow {
        client: local,
        server: local,
        ..Flow::v4().sport(port)
    };
    for (to_port, other, what) in [
        (40000, peer.clone().cport(40001), "from another port"),
        (0, peer.clone().from("127.0.0.2"), "from another address"),
    ] {
        let connected = udp_bound("127.0.0.1", port);
        connect(
            connected.as_raw_fd(),
            &SockaddrIn::new(127, 0, 0, 1, to_port),
        )
        .unwrap();
        f.sockets_changed();
        assert_eq!(
            get_edited(&f, &peer, |_| ()),
            XDP_TX,
            "from the peer (port {to_port})"
        );
        passes(&f, &other, what, |_| ());
        assert_eq!(
            get_edited(&f, &peer, |_| ()),
            XDP_TX,
            "from the peer again (port {to_port})"
        );
    }
}
