//! Unit tests of the store (a file of their own to keep store.rs short).
use super::*;

fn get(s: &Store, k: &[u8]) -> Option<Vec<u8>> {
    s.get(k, None, |i| i.value().to_vec())
}

#[test]
fn modes() {
    let s = Store::new(64 << 20, 1 << 20);
    assert!(matches!(
        s.store(Mode::Set, b"a", 3, 0, b"x"),
        StoreResult::Stored(_)
    ));
    assert_eq!(s.store(Mode::Add, b"a", 0, 0, b"y"), StoreResult::NotStored);
    assert_eq!(
        s.store(Mode::Replace, b"b", 0, 0, b"y"),
        StoreResult::NotStored
    );
    s.store(Mode::Append, b"a", 0, 0, b"z");
    s.store(Mode::Prepend, b"a", 0, 0, b"w");
    assert_eq!(get(&s, b"a").unwrap(), b"wxz");
    assert_eq!(s.get(b"a", None, |i| i.flags()), Some(3));
    let cas = s.get(b"a", None, |i| i.cas()).unwrap();
    assert_eq!(
        s.store(Mode::Cas(cas + 100), b"a", 0, 0, b"q"),
        StoreResult::Exists
    );
    assert!(matches!(
        s.store(Mode::Cas(cas), b"a", 0, 0, b"q"),
        StoreResult::Stored(_)
    ));
    assert_eq!(
        s.store(Mode::Cas(1), b"nope", 0, 0, b"q"),
        StoreResult::NotFound
    );
    assert_eq!(s.delete(b"a", None), Ok(true));
    assert_eq!(get(&s, b"a"), None);
    assert_eq!(s.delete(b"a", None), Ok(false));
}

#[test]
fn counters() {
    let s = Store::new(64 << 20, 1 << 20);
    s.store(Mode::Set, b"n", 0, 0, b"10");
    assert!(matches!(
        s.delta(b"n", false, 1, None),
        DeltaResult::Ok(9, _)
    ));
    assert_eq!(get(&s, b"n").unwrap(), b"9 ");
    assert!(matches!(
        s.delta(b"n", false, 100, None),
        DeltaResult::Ok(0, _)
    ));
    s.store(Mode::Set, b"n", 0, 0, b"18446744073709551615");
    assert!(matches!(
        s.delta(b"n", true, 2, None),
        DeltaResult::Ok(1, _)
    ));
    s.store(Mode::Set, b"n", 0, 0, b"9");
    assert!(matches!(
        s.delta(b"n", true, 1, None),
        DeltaResult::Ok(10, _)
    ));
    assert_eq!(get(&s, b"n").unwrap(), b"10");
    s.store(Mode::Set, b"t", 0, 0, b"abc");
    assert_eq!(s.delta(b"t", true, 1, None), DeltaResult::NonNumeric);
    assert_eq!(s.delta(b"none", true, 1, None), DeltaResult::NotFound);
}

#[test]
fn expiry_and_flush() {
    let s = Store::new(64 << 20, 1 << 20);
    s.store(Mode::Set, b"neg", 0, -1, b"x");
    assert_eq!(get(&s, b"neg"), None);
    s.store(Mode::Set, b"old", 0, 2_600_000, b"x"); // > 30 days: absolute, in 1970
    assert_eq!(get(&s, b"old"), None);
    s.store(Mode::Set, b"rel", 0, 100, b"x");
    assert!(get(&s, b"rel").is_some());
    s.flush_all(0);
    assert_eq!(get(&s, b"rel"), None);
    s.store(Mode::Set, b"after", 0, 0, b"x");
    assert!(get(&s, b"after").is_some());
}

#[test]
fn lru_eviction_keeps_recent() {
    let s = Store::new(1 << 20, 1 << 20);
    assert_eq!(s.shard_count(), 1);
    let v = vec![b'x'; 1000];
    for i in 0..5000 {
        s.store(Mode::Set, format!("k{i}").as_bytes(), 0, 0, &v);
        // keep k0 hot
        assert!(get(&s, b"k0").is_some(), "k0 evicted at {i}");
    }
    let st = s.stats();
    assert!(st.bytes <= 1 << 20);
    assert!(st.evictions > 3000);
    assert!(get(&s, b"k4999").is_some());
    assert!(get(&s, b"k1").is_none());
}
