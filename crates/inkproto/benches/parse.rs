//! `cargo bench -p inkproto` (criterion): request parse and response compose throughput.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use inkproto::request::{parse_request, Request};
use inkproto::response;
use std::hint::black_box;

fn parse(c: &mut Criterion) {
    let get = b"get user:12345678\r\n".to_vec();
    let mget = b"get k1 k2 k3 k4 k5 k6 k7 k8 k9 k10\r\n".to_vec();
    let mut set = b"set user:12345678 0 0 100\r\n".to_vec();
    set.extend_from_slice(&[b'v'; 100]);
    set.extend_from_slice(b"\r\n");
    let mg = b"mg user:12345678 v f t\r\n".to_vec();

    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("get", |b| {
        b.iter(|| black_box(parse_request(black_box(&get)).unwrap()))
    });
    g.bench_function("get 10 keys", |b| {
        b.iter(|| {
            let (r, _) = parse_request(black_box(&mget)).unwrap().unwrap();
            if let Request::Get { keys, .. } = r {
                black_box(keys.iter().count());
            }
        })
    });
    g.bench_function("set 100B", |b| {
        b.iter(|| black_box(parse_request(black_box(&set)).unwrap()))
    });
    g.bench_function("mg", |b| {
        b.iter(|| black_box(parse_request(black_box(&mg)).unwrap()))
    });
    g.finish();
}

fn compose(c: &mut Criterion) {
    let mut out = Vec::with_capacity(4096);
    let val = [b'v'; 100];
    c.bench_function("compose VALUE 100B + END", |b| {
        b.iter(|| {
            out.clear();
            response::value(&mut out, b"user:12345678", 0, &val, None);
            response::end(&mut out);
            black_box(&out);
        })
    });
}

criterion_group!(benches, parse, compose);
criterion_main!(benches);
