//! UDP: frame header, single- and multi-datagram replies, malformed datagrams.

mod common;
use common::*;
use inkproto::client::{parse_response, Response};
use inkproto::udp::{frame_request, FrameHeader, Reassembly, HEADER_LEN, MAX_DATAGRAM};
use std::net::UdpSocket;
use std::time::Duration;

fn sock(port: u16) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// Sends one request and reassembles the reply message; returns the payload and the datagram
/// count.
fn udp_request(s: &UdpSocket, id: u16, payload: &[u8]) -> (Vec<u8>, usize) {
    s.send(&frame_request(id, payload)).unwrap();
    let mut r = Reassembly::new();
    let mut buf = [0u8; 65536];
    let mut n = 0;
    while !r.is_complete() {
        let len = s.recv(&mut buf).expect("udp reply in time");
        assert!(len <= MAX_DATAGRAM, "datagram of {len} bytes");
        let h = FrameHeader::decode(&buf[..len]).unwrap();
        assert_eq!(h.request_id, id);
        assert_eq!(h.reserved, 0);
        assert!(r.push(h, &buf[HEADER_LEN..len]));
        n += 1;
    }
    (r.finish().unwrap(), n)
}

#[test]
fn single_and_multi_datagram_replies() {
    let srv = inkcached(&[]);
    let s = sock(srv.port);
    let (p, n) = udp_request(&s, 1, b"set small 3 0 5\r\nhello\r\n");
    assert_eq!((p.as_slice(), n), (&b"STORED\r\n"[..], 1));
    let (p, n) = udp_request(&s, 2, b"get small\r\n");
    assert_eq!(n, 1);
    assert_eq!(p, b"VALUE small 3 5\r\nhello\r\nEND\r\n");

    // A value stored over TCP (too big for one request datagram), read over UDP.
    let big: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut c = connect(srv.port);
    let mut req = format!("set big 9 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(request_until(&mut c, &req, b"\r\n"), b"STORED\r\n");
    let (p, n) = udp_request(&s, 0xfffe, b"get big small missing\r\n");
    assert!(n >= 8, "expected many datagrams, got {n}");
    let (r, used) = parse_response(&p).unwrap().unwrap();
    assert_eq!(used, p.len());
    let Response::Values(items) = r else {
        panic!("{r:?}")
    };
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].data, big);
    assert_eq!(items[0].flags, 9);
    assert_eq!(items[1].data, b"hello");

    // Several requests in one datagram are all answered, in one message.
    let (p, _) = udp_request(&s, 3, b"incr nope 1\r\nset n 0 0 1\r\n5\r\nincr n 2\r\n");
    assert_eq!(p, b"NOT_FOUND\r\nSTORED\r\n7\r\n");
    // Errors come back as memcached writes them.
    let (p, _) = udp_request(&s, 4, b"bogus\r\n");
    assert_eq!(p, b"ERROR\r\n");
}

#[test]
fn malformed_datagrams_are_harmless() {
    let srv = inkcached(&[]);
    let s = sock(srv.port);
    s.send(b"abc").unwrap(); // shorter than a frame header: dropped
    let mut multi = FrameHeader {
        request_id: 7,
        seq: 0,
        total: 2,
        reserved: 0,
    }
    .encode()
    .to_vec();
    multi.extend_from_slice(b"get a\r\n");
    s.send(&multi).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).unwrap();
    assert_eq!(
        &buf[HEADER_LEN..n],
        b"SERVER_ERROR multi-packet request not supported\r\n"
    );
    // Still serving.
    let (p, _) = udp_request(&s, 8, b"version\r\n");
    assert!(p.starts_with(b"VERSION "));
}
