//! `cargo bench -p inkmodel`: the cost of one simulated request on each policy (the kernel table
//! model, the direct-mapped table, the LRU), on a Zipf trace over 100,000 keys with a budget of 1%
//! of the item bytes. How long `inkmodel hitratio` takes follows from these.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use inkbench::zipf::Zipf;
use inkcache::Layout;
use inkmodel::hitratio::{HitRatioConfig, Keys, Mix};
use inkmodel::policy::{DirectMapped, Lru};
use inkmodel::table::Table;
use rand::{rngs::StdRng, SeedableRng};
use std::hint::black_box;

const KEYS: u64 = 100_000;
const TRACE: usize = 1 << 16;

fn policies(c: &mut Criterion) {
    let mut cfg = HitRatioConfig::new();
    cfg.keys = KEYS;
    let keys = Keys::new(&cfg, Mix::Fixed(32)).expect("keys");
    let budget = keys.total_bytes() / 100;
    let zipf = Zipf::new(KEYS, 0.99);
    let mut rng = StdRng::seed_from_u64(1);
    let trace: Vec<u32> = (0..TRACE).map(|_| zipf.sample(&mut rng) as u32).collect();

    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Elements(TRACE as u64));
    let mut table = Table::new(Layout::for_bytes(budget, 63));
    g.bench_function(BenchmarkId::new("kernel_table", "1%"), |b| {
        b.iter(|| {
            for &id in &trace {
                black_box(table.get(&keys.key(id)));
            }
        })
    });
    let mut direct = DirectMapped::new(budget);
    g.bench_function(BenchmarkId::new("direct_mapped", "1%"), |b| {
        b.iter(|| {
            for &id in &trace {
                let k = keys.key(id);
                black_box(direct.get(id, k.hash, k.item_len));
            }
        })
    });
    let mut lru = Lru::new(KEYS as usize, budget);
    g.bench_function(BenchmarkId::new("lru", "1%"), |b| {
        b.iter(|| {
            for &id in &trace {
                black_box(lru.get(id, keys.key(id).item_len));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
