//! The table model the hit-ratio benchmark simulates (crates/inkmodel: `inkmodel::table`) checked
//! against the kernel's own table, request by request: the same sequence of gets (a miss filled
//! at once from the server's reply) must hit and miss at the same requests, through promotions,
//! lapped items and evictions. A model that drifts from bpf/table.h fails here.
use super::fixture::HASH_SEED;
use super::*;
use inkmodel::table::{Key, Table};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn item_len(key: &str, value: &[u8]) -> u16 {
    (format!("VALUE {key} 0 {}\r\n", value.len()).len() + value.len() + 2) as u16
}

#[test]
fn the_model_hits_and_misses_where_the_kernel_does() {
    let f = fx();
    let fl = Flow::v4();
    let mut model = Table::new(f.l.layout);
    let mut rng = StdRng::seed_from_u64(42);
    // more item bytes than the log holds: items are lapped and promoted, ways replaced
    let keys: Vec<(String, Vec<u8>)> = (0..3200)
        .map(|i| {
            let len = 100 + (i * 37) % 600;
            (format!("mk:{i:05}"), vec![b'a' + (i % 26) as u8; len])
        })
        .collect();
    let (mut hits, mut diverged) = (0u32, Vec::new());
    for n in 0..6000u32 {
        // skewed: a hot tenth of the keys gets half of the requests
        let i = if rng.gen_bool(0.5) {
            rng.gen_range(0..keys.len() / 10)
        } else {
            rng.gen_range(0..keys.len())
        };
        let (key, value) = &keys[i];
        let k = Key {
            id: i as u32,
            hash: inkcache::key_hash(HASH_SEED, key.as_bytes()),
            len: key.len() as u8,
            item_len: item_len(key, value),
        };
        let model_hit = model.get(&k);
        let id = next_id();
        let a = f.udp_in(&fl.udp(id, format!("get {key}\r\n").as_bytes()));
        let kernel_hit = a == XDP_TX;
        if !kernel_hit {
            let e = f.egress(&fl.udp_reply(id, &value_reply(key, 0, value)));
            assert_eq!(e.action, CG_PASS);
        }
        hits += kernel_hit as u32;
        if kernel_hit != model_hit && diverged.len() < 10 {
            diverged.push((n, key.clone(), kernel_hit, model_hit));
        }
    }
    let st = f.stats();
    assert!(
        diverged.is_empty(),
        "model and kernel disagree (request, key, kernel hit, model hit): {diverged:?}\n\
         kernel {st:?}\nmodel {:?}",
        model.counters
    );
    assert!(hits > 1000, "too few hits to mean anything: {hits}");
    assert!(st.promoted > 0, "no promotion exercised: {st:?}");
    assert!(
        model.counters.lapped > 0,
        "no lapped item exercised: {:?}",
        model.counters
    );
    assert_eq!(st.promoted, model.counters.promoted);
    assert_eq!(st.fills, model.counters.fills);
}
