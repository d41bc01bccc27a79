//! How `--cache-mb` is split between the index and the arena (see `bpf/inkcache_common.h`).
//!
//! Items are appended to a log (the arena) and found through a set-associative index of
//! [`WAYS`]-way sets. Each stored item costs its header and text rounded up to 16 in the arena
//! plus one index way (`WAY_BYTES`: its share of the set's line, coherence state and hot slot), so the
//! split follows the expected average item size: with `item_bytes` per item, the index gets just
//! enough ways for the items the arena holds.
use serde::{Deserialize, Serialize};

use crate::skel::xdp::types::{ink_seg, ink_set, ink_set_state};

/// Ways per index set (`WAYS`).
pub const WAYS: u32 = crate::abi::WAYS as u32;
/// Bytes of one index set: its ways (`struct ink_set`, one cache line) and its coherence state
/// (`struct ink_set_state`, in the `set_state` map).
pub const SET_BYTES: u32 =
    (std::mem::size_of::<ink_set>() + std::mem::size_of::<ink_set_state>()) as u32;
/// Bytes of a hot slot (`SLOT_BYTES`): a copy of a recently hit small item, found from its key's
/// hash; one per [`SETS_PER_SLOT`] sets, in arena segments after the log's.
pub const SLOT_BYTES: u32 = crate::abi::SLOT_BYTES as u32;
/// Index sets per hot slot (`SETS_PER_SLOT`).
pub const SETS_PER_SLOT: u32 = crate::abi::SETS_PER_SLOT as u32;
/// Index memory per way: its share of its set's line and coherence state, and of a hot slot.
pub const WAY_BYTES: u32 = (SET_BYTES + SLOT_BYTES / SETS_PER_SLOT) / WAYS;
/// Bytes of one arena map value (`struct ink_seg`); `SEG_BYTES` of it hold items.
pub const SEG_VALUE_BYTES: u32 = std::mem::size_of::<ink_seg>() as u32;
/// Item bytes per arena segment (`SEG_BYTES`).
pub const SEG_BYTES: u32 = crate::abi::SEG_BYTES as u32;
/// Bytes of an item's header in the log, before its text (`ITEM_HDR`).
pub const ITEM_HDR: u32 = crate::abi::ITEM_HDR as u32;
/// Largest cache: arena positions are kept in 32 bits of 16-byte units, compared modulo 2^32.
pub const CACHE_MB_MAX: u32 = 16384;
/// Default expected average item size (`VALUE <key> <flags> <bytes>\r\n<data>\r\n`).
pub const DEFAULT_ITEM_BYTES: u32 = 128;

/// The sizes of the `sets` and `arena` maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub sets: u32,
    pub segs: u32,
}

impl Layout {
    /// The split of `cache_mb` MiB for items of `item_bytes` bytes on average.
    pub fn for_budget(cache_mb: u32, item_bytes: u32) -> Layout {
        Layout::for_bytes(
            cache_mb.clamp(1, CACHE_MB_MAX) as u64 * 1024 * 1024,
            item_bytes,
        )
    }

    /// The split of `budget` bytes (any amount, not only whole MiB) for items of `item_bytes`
    /// bytes on average, as [`Layout::for_budget`] splits whole MiB. A budget too small for the
    /// minimum layout (16 sets, 2 segments) gets the minimum layout, which exceeds it.
    pub fn for_bytes(budget: u64, item_bytes: u32) -> Layout {
        let per_item = log_bytes_of(item_bytes.clamp(16, crate::abi::ITEM_CAP as u32)) as u64;
        let items = budget / (per_item + WAY_BYTES as u64);
        let sets = (items.div_ceil(WAYS as u64)).max(16) as u32;
        let index = Layout { sets, segs: 0 }.index_bytes();
        let arena = budget.saturating_sub(index);
        let segs = (arena / SEG_VALUE_BYTES as u64).max(2);
        Layout {
            sets,
            segs: segs as u32,
        }
    }

    /// Hot slots: one per [`SETS_PER_SLOT`] sets.
    pub fn slots(&self) -> u32 {
        self.sets.div_ceil(SETS_PER_SLOT)
    }

    /// Arena segments the hot slots take, after the log's `segs`.
    pub fn slot_segs(&self) -> u32 {
        self.slots().div_ceil(SEG_BYTES / SLOT_BYTES)
    }

    /// Entries of the arena map: the log's segments, then the hot slots'.
    pub fn arena_entries(&self) -> u32 {
        self.segs + self.slot_segs()
    }

    pub fn ways(&self) -> u64 {
        self.sets as u64 * WAYS as u64
    }

    /// The sets, their coherence state and the hot slots.
    pub fn index_bytes(&self) -> u64 {
        self.sets as u64 * SET_BYTES as u64 + self.slot_segs() as u64 * SEG_VALUE_BYTES as u64
    }

    /// Map memory of the log's arena segments (and their slack).
    pub fn arena_bytes(&self) -> u64 {
        self.segs as u64 * SEG_VALUE_BYTES as u64
    }

    /// Bytes items can occupy in the arena.
    pub fn log_bytes(&self) -> u64 {
        self.segs as u64 * SEG_BYTES as u64
    }

    pub fn total_bytes(&self) -> u64 {
        self.index_bytes() + self.arena_bytes()
    }

    /// Memory one stored item of `item_bytes` costs: its log bytes and its index way.
    pub fn bytes_per_item(item_bytes: u32) -> u32 {
        log_bytes_of(item_bytes) + WAY_BYTES
    }
}

/// Log bytes an item of `item_bytes` text bytes takes: its header and text, in 16-byte units.
pub fn log_bytes_of(item_bytes: u32) -> u32 {
    (ITEM_HDR + item_bytes).next_multiple_of(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_stays_within_budget_and_fits_the_expected_items() {
        for mb in [1, 2, 64, 256, 1024] {
            for item in [48, 128, 600, 1392] {
                let l = Layout::for_budget(mb, item);
                let budget = mb as u64 * 1024 * 1024;
                assert!(l.total_bytes() <= budget, "{mb} MiB, {item} B: {l:?}");
                assert!(
                    l.total_bytes() * 10 >= budget * 9,
                    "{mb} MiB, {item} B: {l:?}"
                );
                let items = l.log_bytes() / log_bytes_of(item) as u64;
                // enough ways for the items the log holds (within rounding to whole segments)
                assert!(l.ways() * 11 >= items * 10, "{mb} MiB, {item} B: {l:?}");
            }
        }
    }

    #[test]
    fn for_bytes_is_for_budget_on_whole_mib_and_fits_any_budget() {
        for mb in [1, 3, 10, 256] {
            for item in [63, 128, 300] {
                assert_eq!(
                    Layout::for_bytes(mb as u64 * 1024 * 1024, item),
                    Layout::for_budget(mb, item)
                );
            }
        }
        for budget in [300_000u64, 655_360, 1_500_000, 6_300_000, 29_000_123] {
            for item in [63, 290] {
                let l = Layout::for_bytes(budget, item);
                assert!(l.total_bytes() <= budget, "{budget} B, {item} B: {l:?}");
                // whole segments: at most one segment's memory left over, plus the index rounding
                assert!(
                    budget - l.total_bytes() <= SEG_VALUE_BYTES as u64 + WAY_BYTES as u64 * 8,
                    "{budget} B, {item} B: {l:?}"
                );
            }
        }
        // below the minimum layout the minimum is returned (and exceeds the budget)
        let tiny = Layout::for_bytes(10_000, 64);
        assert_eq!((tiny.sets, tiny.segs), (16, 2));
    }

    #[test]
    fn struct_sizes_match_the_kernel_layout() {
        // the ways, 8 bytes each, in one cache line; the coherence state apart, 32 bytes
        assert_eq!(std::mem::size_of::<ink_set>(), 64);
        assert_eq!(SET_BYTES, 64 + 32);
        assert_eq!(WAY_BYTES, 20); // with a quarter of a 256-byte hot slot per set
        assert_eq!(ITEM_HDR, 24); // struct ink_item, checked against it in C
        assert_eq!(SEG_VALUE_BYTES, SEG_BYTES + 2048);
    }
}
