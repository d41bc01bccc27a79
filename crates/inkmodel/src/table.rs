//! A model of the kernel table (`bpf/table.h`) for simulations: the same index and log, driven
//! one request at a time (no concurrency, no clock).
//!
//! What it reproduces, step by step as `table.h` does it:
//! - a key's set is `((hash >> 32) * sets) >> 32`, its tag the low 32 bits of the hash (0 -> 1);
//!   a way matches on its tag, and the first matching way decides (its item is then checked: a
//!   lapped item, or another key, is a miss);
//! - the log head counts 16-byte units; an item takes its header (`ITEM_HDR`) and text rounded
//!   up to 16; a reservation
//!   that would cross a segment end (`SEG_BYTES / 16` units) is abandoned (the head stays past
//!   it) and retried; positions are kept in 32 bits and compared modulo 2^32, as in the maps;
//! - an item is lapped once `head - pos > segs * SEG_UNITS`: a lookup of it misses;
//! - a hit on an item with `head - pos > 3/4` of the arena re-appends it at the head and moves
//!   its way there (`promote`);
//! - a miss fills (items up to `ITEM_MAX` bytes): the log space is reserved first, then the way
//!   is picked with the head after the reservation: the key's own way, else the first stale way
//!   (empty or lapped), else the way whose item is oldest in the log.
//!
//! Left out, because a hit-ratio simulation has none of them: expiry and `--max-age`, flush_all,
//! write invalidation and its quarantine, CAS entries, the "too big" marker (replies the frame
//! cannot take), and concurrency (several fills racing for the head, a fill arriving after
//! further requests for its key).
use inkcache::abi::ITEM_MAX;
use inkcache::layout::{log_bytes_of, Layout, SEG_BYTES, WAYS};

/// Log units (16 bytes) per segment (`SEG_UNITS`).
pub const SEG_UNITS: u64 = SEG_BYTES as u64 / 16;

/// One key as the table sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Identifies the key's bytes: two keys are equal iff their ids are (the full compare).
    pub id: u32,
    /// `inkcache::key_hash` of the key's bytes (any seed).
    pub hash: u64,
    /// Key length in bytes.
    pub len: u8,
    /// Item bytes (`VALUE <key> <flags> <bytes>\r\n<data>\r\n`).
    pub item_len: u16,
}

#[derive(Clone, Copy, Debug, Default)]
struct Way {
    tag: u32, // 0 = empty
    pos: u32,
    key: u32,
    len: u16,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Hit,
    /// A hit that also moved the item to the head (`promoted`).
    HitPromoted,
    /// No way with the key's tag.
    Absent,
    /// The first way with its tag and length holds another key (full compare failed).
    OtherKey,
    /// The way points at log bytes the head has overwritten since.
    Lapped,
}

impl Lookup {
    pub fn is_hit(self) -> bool {
        matches!(self, Lookup::Hit | Lookup::HitPromoted)
    }
}

/// Counters of a model run (what `inkcache stats` would show, plus log accounting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub hits: u64,
    pub misses: u64,
    /// Misses because the key's way pointed at lapped bytes.
    pub lapped: u64,
    pub fills: u64,
    /// Items too large to store (`> ITEM_MAX`): not filled.
    pub fill_skipped: u64,
    pub promoted: u64,
    /// Units left unused at segment ends by abandoned reservations.
    pub abandoned_units: u64,
    /// Units reserved for items (fills and promotions).
    pub item_units: u64,
}

/// The kernel table of one [`Layout`].
pub struct Table {
    layout: Layout,
    sets: Vec<[Way; WAYS as usize]>,
    head: u64,
    arena_units: u64,
    pub counters: Counters,
}

/// `tag_of` in table.h.
pub fn tag_of(hash: u64) -> u32 {
    match hash as u32 {
        0 => 1,
        t => t,
    }
}

/// `set_for` in table.h: the high half of the hash scaled to the set count.
pub fn set_of(hash: u64, sets: u32) -> usize {
    (((hash >> 32) * sets as u64) >> 32) as usize
}

/// Log units an item of `len` text bytes takes (its header included).
pub fn units_of(len: u16) -> u64 {
    log_bytes_of(len as u32) as u64 / 16
}

impl Table {
    pub fn new(layout: Layout) -> Table {
        Table {
            layout,
            sets: vec![[Way::default(); WAYS as usize]; layout.sets as usize],
            head: 0,
            arena_units: layout.segs as u64 * SEG_UNITS,
            counters: Counters::default(),
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The log head (16-byte units reserved since the start, abandoned ones included).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// A get of `k` as the XDP program and, on a miss, the reply's fill in TC egress do it.
    /// Returns whether the kernel answered it.
    pub fn get(&mut self, k: &Key) -> bool {
        let r = self.lookup(k);
        if r.is_hit() {
            self.counters.hits += 1;
            return true;
        }
        self.counters.misses += 1;
        if r == Lookup::Lapped {
            self.counters.lapped += 1;
        }
        self.fill(k);
        false
    }

    /// `table_lookup`: finds `k`, checks it was not lapped, and promotes it if it is in the
    /// oldest quarter of the log.
    pub fn lookup(&mut self, k: &Key) -> Lookup {
        let tag = tag_of(k.hash);
        let si = set_of(k.hash, self.layout.sets);
        let Some(w) = self.sets[si].iter().position(|x| x.tag == tag) else {
            return Lookup::Absent;
        };
        let way = self.sets[si][w];
        let age = (self.head as u32).wrapping_sub(way.pos) as u64;
        if age > self.arena_units {
            return Lookup::Lapped;
        }
        if way.key != k.id {
            return Lookup::OtherKey;
        }
        if age > self.arena_units / 4 * 3 {
            // `promote`: copy to the head, move the way if it still points at the old copy
            // (it does: nothing runs in between here)
            if let Some(p) = self.reserve(units_of(way.len)) {
                self.sets[si][w].pos = p as u32;
                self.counters.promoted += 1;
                return Lookup::HitPromoted;
            }
        }
        Lookup::Hit
    }

    /// `table_fill`: appends `k`'s item and publishes it in the way `pick_way` chooses. Returns
    /// whether it was stored.
    pub fn fill(&mut self, k: &Key) -> bool {
        if k.item_len as usize > ITEM_MAX || k.item_len == 0 {
            self.counters.fill_skipped += 1;
            return false;
        }
        let Some(p) = self.reserve(units_of(k.item_len)) else {
            return false;
        };
        let tag = tag_of(k.hash);
        let si = set_of(k.hash, self.layout.sets);
        let w = self.pick_way(si, tag);
        self.sets[si][w] = Way {
            tag,
            pos: p as u32,
            key: k.id,
            len: k.item_len,
        };
        self.counters.fills += 1;
        true
    }

    /// `pick_way` with the current head.
    fn pick_way(&self, si: usize, tag: u32) -> usize {
        let head = self.head as u32;
        let (mut victim, mut stale, mut oldest) = (0, WAYS as usize, 0u32);
        for (w, x) in self.sets[si].iter().enumerate() {
            let age = head.wrapping_sub(x.pos);
            if x.tag == tag {
                return w;
            }
            if stale == WAYS as usize && (x.tag == 0 || age as u64 > self.arena_units) {
                stale = w;
            }
            if age > oldest {
                oldest = age;
                victim = w;
            }
        }
        if stale < WAYS as usize {
            stale
        } else {
            victim
        }
    }

    /// `arena_reserve`: three tries at the head; a reservation crossing a segment end is
    /// abandoned (the head has moved past it).
    fn reserve(&mut self, units: u64) -> Option<u64> {
        for _ in 0..3 {
            let p = self.head;
            self.head += units;
            if (p & (SEG_UNITS - 1)) + units <= SEG_UNITS {
                self.counters.item_units += units;
                return Some(p);
            }
            self.counters.abandoned_units += units;
        }
        None
    }

    /// Keys whose items a lookup would find now (not lapped), and their log bytes.
    pub fn resident(&self) -> (u64, u64) {
        let head = self.head as u32;
        let mut n = 0;
        let mut bytes = 0;
        for x in self.sets.iter().flatten() {
            if x.tag != 0 && (head.wrapping_sub(x.pos) as u64) <= self.arena_units {
                n += 1;
                bytes += units_of(x.len) * 16;
            }
        }
        (n, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of `item_len` bytes in set `set` (of `sets`), with tag `tag`.
    fn key(id: u32, set: u32, sets: u32, tag: u32, item_len: u16) -> Key {
        // the high half h must give ((h * sets) >> 32) == set: take the middle of the range
        let hi = ((set as u64) << 32).div_ceil(sets as u64) + (1u64 << 32) / sets as u64 / 2;
        let k = Key {
            id,
            hash: (hi << 32) | tag as u64,
            len: 16,
            item_len,
        };
        assert_eq!(set_of(k.hash, sets), set as usize);
        k
    }

    fn table(sets: u32, segs: u32) -> Table {
        Table::new(Layout { sets, segs })
    }

    #[test]
    fn set_and_tag_follow_cache_h() {
        assert_eq!(tag_of(0xdead_beef_0000_0000), 1);
        assert_eq!(tag_of(0x0000_0001_0000_0007), 7);
        assert_eq!(set_of(0, 100), 0);
        assert_eq!(set_of(u64::MAX, 100), 99);
        assert_eq!(set_of(0x8000_0000_0000_0000, 100), 50);
        // the 24-byte header, then the text
        assert_eq!(units_of(39), 4);
        assert_eq!(units_of(40), 4);
        assert_eq!(units_of(41), 5);
    }

    #[test]
    fn miss_fills_then_hits_and_full_compare_rejects_another_key() {
        let mut t = table(16, 2);
        let a = key(1, 3, 16, 42, 40);
        assert!(!t.get(&a));
        assert_eq!(t.head(), 4);
        assert!(t.get(&a));
        // same set and tag, other bytes: the way is found, the compare fails, and the fill takes
        // that same way (the key's "own" way by tag)
        let b = Key { id: 2, ..a };
        assert_eq!(t.lookup(&b), Lookup::OtherKey);
        assert!(!t.get(&b));
        assert_eq!(t.lookup(&a), Lookup::OtherKey);
        assert_eq!(t.lookup(&b), Lookup::Hit);
        // the key length is the item's: a key of another length with the tag finds the way
        let c = Key {
            id: 3,
            len: 17,
            ..a
        };
        assert_eq!(t.lookup(&c), Lookup::OtherKey);
        assert_eq!(t.counters.fills, 2);
        assert_eq!(t.counters.hits, 1);
    }

    #[test]
    fn reservation_crossing_a_segment_end_is_abandoned() {
        let mut t = table(16, 2);
        // 4095 units taken by 91 items of 45 units (696 bytes and the header), one unit left in
        // segment 0
        for i in 0..91 {
            assert!(t.fill(&key(i, i % 16, 16, 100 + i, 696)));
        }
        assert_eq!(t.head(), 4095);
        // a 2-unit item would cross: abandoned (head 4097), retried at 4097, which fits
        assert!(t.fill(&key(500, 0, 16, 7, 8)));
        assert_eq!(t.head(), 4099);
        assert_eq!(t.counters.abandoned_units, 2);
        // a 2-unit item exactly at the end of a segment fits
        let mut t = table(16, 2);
        for i in 0..90 {
            t.fill(&key(i, i % 16, 16, 100 + i, 696));
        }
        t.fill(&key(90, 3, 16, 190, 680)); // 44 units: head 4094
        assert!(t.fill(&key(500, 0, 16, 7, 8)));
        assert_eq!((t.head(), t.counters.abandoned_units), (4096, 0));
    }

    #[test]
    fn items_are_lapped_after_a_whole_arena() {
        // 2 segments = 8192 units; a 1368-byte item is 87 units with its header
        let mut t = table(64, 2);
        let a = key(0, 0, 64, 1, 40);
        t.fill(&a); // pos 0, 4 units
        let mut i = 1;
        // append other keys (in other sets) until the head is exactly one arena past a
        while t.head() + 87 <= 8192 {
            t.fill(&key(i, 1 + i % 63, 64, 1000 + i, 1368));
            i += 1;
        }
        while t.head() < 8192 {
            // 2 units, or 3 to make the rest even
            let len = if (8192 - t.head()) % 2 == 1 { 24 } else { 8 };
            t.fill(&key(i, 1 + i % 63, 64, 1000 + i, len));
            i += 1;
        }
        assert_eq!(t.head(), 8192);
        // head - pos == arena: not lapped (table.h tests `>`), and it is in the oldest quarter
        assert_eq!(t.lookup(&a), Lookup::HitPromoted);
        assert_eq!(t.counters.promoted, 1);
        let b = key(9999, 0, 64, 2, 40);
        t.fill(&b); // pos 8196
        t.fill(&key(i, 1, 64, 77, 8)); // head 8202
                                       // lap b by two units
        while t.head() <= 8196 + 8192 {
            i += 1;
            t.fill(&key(i, 1 + i % 63, 64, 1000 + i, 8));
        }
        assert_eq!(t.head(), 8196 + 8192 + 2);
        assert_eq!(t.lookup(&b), Lookup::Lapped);
        assert!(!t.get(&b));
        assert_eq!(t.counters.lapped, 1);
        // the refill reuses b's own way
        assert!(t.get(&b));
    }

    #[test]
    fn promotion_only_in_the_oldest_quarter() {
        let mut t = table(64, 2); // arena 8192 units; promotion when age > 6144
        let a = key(0, 0, 64, 1, 40); // 4 units
        t.fill(&a);
        let mut i = 1;
        while t.head() < 6144 + 4 {
            t.fill(&key(i, 1 + i % 63, 64, 1000 + i, 8)); // 2 units
            i += 1;
        }
        assert_eq!(t.head(), 6148); // age of a: 6148 > 6144
        assert_eq!(t.lookup(&a), Lookup::HitPromoted);
        assert_eq!(t.head(), 6152); // re-appended: 4 units
        assert_eq!(t.lookup(&a), Lookup::Hit); // young again
        let b = key(1, 5, 64, 9, 40);
        t.fill(&b); // pos 6152
        while t.head() < 6152 + 6144 {
            t.fill(&key(i, 6 + i % 50, 64, 1000 + i, 8));
            i += 1;
        }
        // age exactly 3/4: no promotion
        assert_eq!(t.lookup(&b), Lookup::Hit);
        assert_eq!(t.counters.promoted, 1);
    }

    #[test]
    fn way_choice_own_then_stale_then_oldest() {
        let mut t = table(16, 2); // arena 8192 units
        let ks: Vec<Key> = (0..8).map(|i| key(i, 2, 16, 10 + i, 136)).collect(); // 10 units
        for k in &ks {
            t.fill(k);
        }
        // the set is full: a new key evicts the oldest (the first filled, at pos 0)
        let n = key(100, 2, 16, 99, 136);
        t.fill(&n);
        assert_eq!(t.lookup(&ks[0]), Lookup::Absent);
        for k in &ks[1..] {
            assert!(t.lookup(k).is_hit());
        }
        // refilling a present key takes its own way (no eviction)
        t.fill(&ks[3]);
        for k in &ks[1..] {
            assert!(t.lookup(k).is_hit());
        }
        assert!(t.lookup(&n).is_hit());
        // now the oldest is ks[1] (pos 10): evicted next
        t.fill(&key(101, 2, 16, 98, 136));
        assert_eq!(t.lookup(&ks[1]), Lookup::Absent);
        assert!(t.lookup(&ks[2]).is_hit());

        // a lapped way is taken before an older-looking live one: lap everything in set 2, then
        // refill two keys; the third newcomer takes the first stale way in way order
        let mut t = table(16, 2);
        for k in &ks {
            t.fill(k); // ways 0..8 = ks[0..8]
        }
        let mut i = 1000;
        while t.head() <= 80 + 8192 {
            t.fill(&key(i, 5, 16, i, 1387));
            i += 1;
        }
        t.fill(&ks[5]); // own way 5, fresh
        let z = key(200, 2, 16, 55, 136);
        t.fill(&z); // first stale way: way 0 (ks[0])
        assert_eq!(t.lookup(&ks[0]), Lookup::Absent);
        assert_eq!(t.lookup(&ks[1]), Lookup::Lapped);
        assert!(t.lookup(&z).is_hit());
        assert!(t.lookup(&ks[5]).is_hit());
    }

    #[test]
    fn oversized_items_are_not_filled() {
        let mut t = table(16, 2);
        let k = key(1, 0, 16, 1, ITEM_MAX as u16 + 1);
        assert!(!t.get(&k));
        assert!(!t.get(&k));
        assert_eq!(t.counters.fill_skipped, 2);
        assert_eq!(t.head(), 0);
    }

    #[test]
    fn resident_counts_unlapped_items() {
        let mut t = table(16, 2);
        for i in 0..10 {
            t.fill(&key(i, i, 16, 1 + i, 64)); // 88 bytes: 96 in the log
        }
        assert_eq!(t.resident(), (10, 10 * 96));
    }
}
