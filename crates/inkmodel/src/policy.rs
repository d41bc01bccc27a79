//! The policies the kernel table is compared with, at the same memory: the direct-mapped table
//! it replaced and an exact LRU.

use crate::hitratio::ITEM_MAX;

/// Bytes of one slot of the direct-mapped table (`struct ink_entry` before the item log: lock 4,
/// len 4, hash 8, filled 8, stable 8, expire 8, key_len 2, flags 2, pad 4, item 1392).
pub const ENTRY_BYTES: u64 = 1440;

/// The direct-mapped table the item log replaced.
pub struct DirectMapped {
    slots: Vec<u32>, // key id + 1; 0 = empty
    mask: u64,
}

impl DirectMapped {
    /// `slots_for` of the old control plane, for any budget in bytes.
    pub fn slots_for(budget: u64) -> u64 {
        let n = (budget / ENTRY_BYTES).max(16);
        1u64 << n.ilog2().min(31)
    }

    pub fn new(budget: u64) -> DirectMapped {
        let n = Self::slots_for(budget);
        DirectMapped {
            slots: vec![0; n as usize],
            mask: n - 1,
        }
    }

    pub fn slots(&self) -> u64 {
        self.slots.len() as u64
    }

    /// A get and, on a miss, the fill. Returns whether it hit.
    pub fn get(&mut self, id: u32, hash: u64, item_len: u16) -> bool {
        let s = &mut self.slots[((hash as u32) as u64 & self.mask) as usize];
        if *s == id + 1 {
            return true;
        }
        if item_len as u32 <= ITEM_MAX {
            *s = id + 1;
        }
        false
    }
}

const NIL: u32 = u32::MAX;

/// Exact LRU by bytes over key ids `0..n`: an intrusive doubly linked list in arrays.
pub struct Lru {
    budget: u64,
    used: u64,
    items: u64,
    prev: Vec<u32>,
    next: Vec<u32>,
    size: Vec<u16>, // 0 = not cached
    mru: u32,
    lru: u32,
}

impl Lru {
    pub fn new(keys: usize, budget: u64) -> Lru {
        Lru {
            budget,
            used: 0,
            items: 0,
            prev: vec![NIL; keys],
            next: vec![NIL; keys],
            size: vec![0; keys],
            mru: NIL,
            lru: NIL,
        }
    }

    /// Items and bytes held.
    pub fn held(&self) -> (u64, u64) {
        (self.items, self.used)
    }

    pub fn contains(&self, id: u32) -> bool {
        self.size[id as usize] != 0
    }

    fn unlink(&mut self, id: u32) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        if p == NIL {
            self.mru = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.lru = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    fn push_front(&mut self, id: u32) {
        self.prev[id as usize] = NIL;
        self.next[id as usize] = self.mru;
        if self.mru == NIL {
            self.lru = id;
        } else {
            self.prev[self.mru as usize] = id;
        }
        self.mru = id;
    }

    /// A get of key `id` (of `bytes`, > 0) and, on a miss, its insertion, evicting from the
    /// least recently used end until the items fit the budget. Returns whether it hit.
    pub fn get(&mut self, id: u32, bytes: u16) -> bool {
        if self.size[id as usize] != 0 {
            if self.mru != id {
                self.unlink(id);
                self.push_front(id);
            }
            return true;
        }
        if bytes == 0 || bytes as u64 > self.budget {
            return false;
        }
        self.size[id as usize] = bytes;
        self.used += bytes as u64;
        self.items += 1;
        self.push_front(id);
        while self.used > self.budget {
            let v = self.lru;
            self.unlink(v);
            self.used -= self.size[v as usize] as u64;
            self.size[v as usize] = 0;
            self.items -= 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recent_by_bytes() {
        let mut l = Lru::new(10, 100);
        assert!(!l.get(0, 40));
        assert!(!l.get(1, 40));
        assert!(!l.get(2, 30)); // 110 > 100: 0 goes
        assert!(!l.contains(0) && l.contains(1) && l.contains(2));
        assert_eq!(l.held(), (2, 70));
        assert!(l.get(1, 40)); // order now 1, 2
        assert!(!l.get(3, 50)); // 120: 2 goes (least recent), 90 left
        assert!(l.contains(1) && !l.contains(2) && l.contains(3));
        assert_eq!(l.held(), (2, 90));
        assert!(!l.get(4, 100)); // evicts both
        assert_eq!(l.held(), (1, 100));
        assert!(!l.get(5, 101)); // larger than the budget: never held
        assert!(l.contains(4) && !l.contains(5));
        assert!(l.get(4, 100));
        // many small ones evict one large one
        let mut l = Lru::new(10, 100);
        l.get(0, 90);
        l.get(1, 5);
        l.get(2, 5);
        assert_eq!(l.held(), (3, 100));
        l.get(3, 1);
        assert!(!l.contains(0));
        assert_eq!(l.held(), (3, 11));
    }

    #[test]
    fn direct_mapped_slots_and_conflicts() {
        assert_eq!(DirectMapped::slots_for(256 << 20), 131072);
        assert_eq!(DirectMapped::slots_for(1440 * 1000), 512);
        assert_eq!(DirectMapped::slots_for(1440 * 1024), 1024);
        assert_eq!(DirectMapped::slots_for(1000), 16);
        let mut d = DirectMapped::new(1440 * 16);
        // same low bits: the same slot, each fill replaces the other
        let (a, b) = (0x1234_0000_0000_0003u64, 0x9999_0000_0000_0013u64);
        assert!(!d.get(1, a, 63));
        assert!(d.get(1, a, 63));
        assert!(!d.get(2, b, 63));
        assert!(!d.get(1, a, 63));
        assert!(!d.get(2, b, 63));
        // another slot is independent
        assert!(!d.get(3, 4, 63));
        assert!(d.get(3, 4, 63));
        assert!(d.get(2, b, 63));
        // too large to store
        assert!(!d.get(4, 5, ITEM_MAX as u16 + 1));
        assert!(!d.get(4, 5, ITEM_MAX as u16 + 1));
    }
}
