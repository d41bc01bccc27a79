//! Frames for the eBPF unit tests: a client/server flow over Ethernet (VLAN tags optional), IPv4 or
//! IPv6, UDP with memcached's frame header or TCP; and the parsing of what comes back.
use std::net::IpAddr;

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const PORT: u16 = 11211;

/// A client talking to the server (port 11211).
#[derive(Clone, Debug)]
pub struct Flow {
    pub client: IpAddr,
    pub server: IpAddr,
    pub cport: u16,
    pub sport: u16,
    /// VLAN ids, outermost first (0, 1 or 2 of them).
    pub vlans: Vec<u16>,
}

impl Flow {
    /// An IPv4 client in the allowlist (198.18.0.0/15).
    pub fn v4() -> Flow {
        Flow {
            client: "198.18.0.2".parse().unwrap(),
            server: "198.18.0.1".parse().unwrap(),
            cport: 40000,
            sport: PORT,
            vlans: vec![],
        }
    }

    /// An IPv6 client in the allowlist (fd00::/8).
    pub fn v6() -> Flow {
        Flow {
            client: "fd00::2".parse().unwrap(),
            server: "fd00::1".parse().unwrap(),
            ..Flow::v4()
        }
    }

    pub fn from(mut self, client: &str) -> Flow {
        self.client = client.parse().unwrap();
        self
    }

    pub fn cport(mut self, p: u16) -> Flow {
        self.cport = p;
        self
    }

    pub fn sport(mut self, p: u16) -> Flow {
        self.sport = p;
        self
    }

    pub fn vlans(mut self, v: &[u16]) -> Flow {
        self.vlans = v.to_vec();
        self
    }

    fn builder(&self, to_server: bool) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
        let (smac, dmac) = if to_server {
            (CLIENT_MAC, SERVER_MAC)
        } else {
            (SERVER_MAC, CLIENT_MAC)
        };
        let (src, dst) = if to_server {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let eth = PacketBuilder::ethernet2(smac, dmac);
        macro_rules! ip {
            ($b:expr) => {
                match (src, dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => $b.ipv4(s.octets(), d.octets(), 64),
                    (IpAddr::V6(s), IpAddr::V6(d)) => $b.ipv6(s.octets(), d.octets(), 64),
                    _ => panic!("mixed address families"),
                }
            };
        }
        match self.vlans.as_slice() {
            [] => ip!(eth),
            [v] => ip!(eth.single_vlan((*v).try_into().unwrap())),
            [o, i] => ip!(eth.double_vlan((*o).try_into().unwrap(), (*i).try_into().unwrap())),
            _ => panic!("at most two VLAN tags"),
        }
    }

    /// A UDP datagram from the client carrying `payload` as is.
    pub fn udp_raw(&self, payload: &[u8]) -> Vec<u8> {
        let b = self.builder(true).udp(self.cport, self.sport);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    /// A one-datagram memcached request (frame header: id, sequence 0, 1 datagram).
    pub fn udp(&self, req_id: u16, request: &[u8]) -> Vec<u8> {
        self.udp_raw(&mc_frame(req_id, 0, 1, request))
    }

    /// The server's one-datagram answer to request `req_id`.
    pub fn udp_reply(&self, req_id: u16, answer: &[u8]) -> Vec<u8> {
        let b = self.builder(false).udp(self.sport, self.cport);
        let mut v = Vec::new();
        b.write(&mut v, &mc_frame(req_id, 0, 1, answer)).unwrap();
        v
    }

    /// A TCP segment from the client (`flags`: "S", "A", "PA", "R", "F", ...).
    pub fn tcp(&self, seq: u32, ack: u32, flags: &str, payload: &[u8]) -> Vec<u8> {
        tcp_frame(
            self.builder(true),
            self.cport,
            self.sport,
            seq,
            ack,
            flags,
            payload,
        )
    }

    /// A TCP segment from the server.
    pub fn tcp_reply(&self, seq: u32, ack: u32, flags: &str, payload: &[u8]) -> Vec<u8> {
        tcp_frame(
            self.builder(false),
            self.sport,
            self.cport,
            seq,
            ack,
            flags,
            payload,
        )
    }
}

fn tcp_frame(
    b: etherparse::PacketBuilderStep<etherparse::IpHeaders>,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: &str,
    payload: &[u8],
) -> Vec<u8> {
    let mut t = b.tcp(sport, dport, seq, 65535);
    for f in flags.chars() {
        t = match f {
            'S' => t.syn(),
            'A' => t.ack(ack),
            'P' => t.psh(),
            'R' => t.rst(),
            'F' => t.fin(),
            _ => panic!("flag {f}"),
        };
    }
    let mut v = Vec::new();
    t.write(&mut v, payload).unwrap();
    v
}

/// memcached's UDP frame header before `body`.
pub fn mc_frame(req_id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + body.len());
    for x in [req_id, seq, total, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(body);
    v
}

/// A reply frame the XDP program sent back, checked: addresses and ports swapped, checksums
/// right, a one-datagram memcached frame for `req_id`. Returns the memcached payload.
pub fn reply_payload(flow: &Flow, req_id: u16, frame: &[u8]) -> Vec<u8> {
    let p = SlicedPacket::from_ethernet(frame).expect("a parsable reply frame");
    let eth = p
        .link
        .as_ref()
        .and_then(|l| l.to_header())
        .expect("ethernet");
    if let Some(etherparse::LinkHeader::Ethernet2(e)) = Some(eth) {
        assert_eq!(
            (e.source, e.destination),
            (SERVER_MAC, CLIENT_MAC),
            "MACs swapped"
        );
    }
    let (src, dst, ip_ok) = match p.net.as_ref().expect("an IP header") {
        etherparse::NetSlice::Ipv4(ip) => {
            let h = ip.header().to_header();
            let ok = h.header_checksum == h.calc_header_checksum();
            (IpAddr::from(h.source), IpAddr::from(h.destination), ok)
        }
        etherparse::NetSlice::Ipv6(ip) => {
            let h = ip.header().to_header();
            (IpAddr::from(h.source), IpAddr::from(h.destination), true)
        }
        _ => panic!("not IP"),
    };
    assert!(ip_ok, "IPv4 header checksum");
    assert_eq!((src, dst), (flow.server, flow.client), "addresses swapped");
    let TransportSlice::Udp(udp) = p.transport.expect("a transport header") else {
        panic!("not UDP")
    };
    assert_eq!(
        (udp.source_port(), udp.destination_port()),
        (flow.sport, flow.cport)
    );
    let payload = udp.payload().to_vec();
    let h = udp.to_header();
    let want = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.calc_checksum_ipv4_raw(s.octets(), d.octets(), &payload)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            h.calc_checksum_ipv6_raw(s.octets(), d.octets(), &payload)
        }
        _ => unreachable!(),
    }
    .unwrap();
    assert_eq!(h.checksum, want, "UDP checksum");
    assert_eq!(
        &payload[..8],
        &mc_frame(req_id, 0, 1, b"")[..],
        "frame header"
    );
    payload[8..].to_vec()
}

/// The VLAN ids of a frame, outermost first.
pub fn vlan_ids(frame: &[u8]) -> Vec<u16> {
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    match p.vlan() {
        None => vec![],
        Some(etherparse::VlanSlice::SingleVlan(v)) => vec![v.vlan_identifier().value()],
        Some(etherparse::VlanSlice::DoubleVlan(d)) => {
            let h = d.to_header();
            vec![h.outer.vlan_id.value(), h.inner.vlan_id.value()]
        }
    }
}
