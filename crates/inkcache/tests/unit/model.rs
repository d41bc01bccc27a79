//! The table model the hit-ratio benchmark simulates (crates/inkmodel: `inkmodel::table`) checked
//! against the kernel's own table, request by request: the same sequence of gets (a miss filled
//! at once from the server's reply) must hit and miss at the same requests, through promotions,
//! lapped items and evictions. A model that drifts from bpf/table.h fails here.
//! And the promotions the model assumes, made by every kind of get that reads the table.
use super::fixture::HASH_SEED;
use super::gets::{mg, set_key};
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

/// An item read when the log is about to come round to it moves to the log head, whichever get
/// reads it: a 1-key get, each key of a multi-key get, a meta get. The lookup leaves the move to
/// its caller (bpf/table.h's lookup_upkeep), so each caller is checked.
#[test]
fn every_kind_of_get_moves_an_item_about_to_be_overwritten() {
    let f = fx();
    let fl = Flow::v4();
    for k in ["pr:one", "pr:two", "pr:three"] {
        f.fill(&fl, k, 5, k.as_bytes());
    }
    set_key(&f, &fl, "pr:meta", 0, b"mv");
    assert!(f.fill_with(&fl, "get pr:meta\r\n", &value_reply("pr:meta", 0, b"mv")));
    // the head seven eighths of the log further on: every item is old enough to be moved
    let mut g = f.global();
    g.head += f.l.layout.segs as u64 * inkcache::abi::SEG_UNITS as u64 / 8 * 7;
    f.set_global(&g);
    let at = |k: &str| f.way_pos(k).expect("the key's way");
    let moved = |what: &str, keys: &[&str], before: &[u32], promoted: u64| {
        for (k, b) in keys.iter().zip(before) {
            let now = at(k);
            assert!(
                now != *b && now.wrapping_sub(g.head as u32) < 1 << 20,
                "{what}: {k} not moved to the head (way at {now}, was {b}, head {})",
                g.head as u32
            );
        }
        assert_eq!(f.stats().promoted, promoted, "{what}: {:?}", f.stats());
    };
    let p0 = f.stats().promoted;

    let before = [at("pr:one")];
    f.assert_hit(&fl, "pr:one", 5, b"pr:one");
    moved("1-key get", &["pr:one"], &before, p0 + 1);

    let before = [at("pr:two"), at("pr:three")];
    let (a, reply) = f.request(&fl, b"get pr:two pr:three\r\n");
    assert_eq!(a, XDP_TX, "{:?}", f.stats());
    let want = values_reply(&[("pr:two", 5, &b"pr:two"[..]), ("pr:three", 5, b"pr:three")]);
    assert_eq!(reply.unwrap(), want);
    moved("2-key get", &["pr:two", "pr:three"], &before, p0 + 3);

    let before = [at("pr:meta")];
    assert_eq!(
        mg(&f, &fl, "mg pr:meta v\r\n").as_deref(),
        Some("VA 2\r\nmv\r\n")
    );
    moved("meta get", &["pr:meta"], &before, p0 + 4);

    // each moved item is served from its new place
    f.assert_hit(&fl, "pr:one", 5, b"pr:one");
    f.assert_hit(&fl, "pr:three", 5, b"pr:three");
    assert_eq!(f.stats().promoted, p0 + 4, "moved twice");
}

/// A way keeps 32 bits of its item's log position and the lookups take the rest from the head
/// (bpf/table.h's full_pos): items are found, by 1-key and multi-key gets, wherever the head has
/// come to, across the 32-bit wrap of positions (64 GiB written) and far past it.
#[test]
fn items_are_found_across_the_wrap_of_log_positions() {
    let f = fx();
    let fl = Flow::v4();
    let unit = inkcache::abi::SEG_UNITS as u64;
    let value = vec![b'w'; 400]; // too large for a hot slot: every hit reads the log
    let put = |at: u64, key: &str| {
        let mut g = f.global();
        g.head = at;
        f.set_global(&g);
        f.fill(&fl, key, 3, &value);
    };
    let hit_both = |a: &str, b: &str| {
        f.assert_hit(&fl, a, 3, &value);
        f.assert_hit(&fl, b, 3, &value);
        let (act, reply) = f.request(&fl, format!("get {a} {b}\r\n").as_bytes());
        assert_eq!(
            act,
            XDP_TX,
            "get {a} {b}: not a kernel hit: {:?}",
            f.stats()
        );
        let want = values_reply(&[(a, 3, &value[..]), (b, 3, &value[..])]);
        assert_eq!(reply.unwrap(), want, "get {a} {b}");
    };
    for (i, wrap) in [1u64 << 32, 7 << 32, 1 << 44].into_iter().enumerate() {
        // one item a segment and more before the wrap, the next just past it
        let (a, b) = (format!("wrap:{i}:before"), format!("wrap:{i}:after"));
        put(wrap - unit - 900, &a);
        put(wrap + 100, &b);
        hit_both(&a, &b);
    }
}
