//! `cargo bench -p inkproto`: request parse and response compose throughput (std only).

use inkproto::request::parse_request;
use inkproto::response;
use std::hint::black_box;
use std::time::Instant;

fn bench(name: &str, iters: u64, mut f: impl FnMut()) {
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    println!("{name:<28} {ns:>8.1} ns/op");
}

fn main() {
    let get = b"get user:12345678\r\n".to_vec();
    let mget = b"get k1 k2 k3 k4 k5 k6 k7 k8 k9 k10\r\n".to_vec();
    let mut set = b"set user:12345678 0 0 100\r\n".to_vec();
    set.extend_from_slice(&[b'v'; 100]);
    set.extend_from_slice(b"\r\n");
    let mg = b"mg user:12345678 v f t\r\n".to_vec();
    let n = 2_000_000;
    bench("parse get", n, || {
        black_box(parse_request(black_box(&get)).unwrap());
    });
    bench("parse get 10 keys", n, || {
        let (r, _) = parse_request(black_box(&mget)).unwrap().unwrap();
        if let inkproto::request::Request::Get { keys, .. } = r {
            black_box(keys.iter().count());
        }
    });
    bench("parse set 100B", n, || {
        black_box(parse_request(black_box(&set)).unwrap());
    });
    bench("parse mg", n, || {
        black_box(parse_request(black_box(&mg)).unwrap());
    });
    let mut out = Vec::with_capacity(4096);
    let val = [b'v'; 100];
    bench("compose VALUE 100B + END", n, || {
        out.clear();
        response::value(&mut out, b"user:12345678", 0, &val, None);
        response::end(&mut out);
        black_box(&out);
    });
}
