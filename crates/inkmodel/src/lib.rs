//! inkmodel: a model of inkcache's kernel table ([`table`]) and the hit-ratio simulation built on
//! it (`inkmodel hitratio`): the kernel cache's hit ratio, simulated, against the direct-mapped table
//! it replaced (same memory) and an ideal LRU (same memory, all of it for item bytes).
//!
//! One request trace (Zipf over `keys` keys, key `i` being rank `i`, named as `inkbench run`
//! names them) is played against every policy and budget; each key's value size comes from a
//! value mix ([`hitratio::Mix`]), fixed per key. A miss is followed at once by a fill (what a get that
//! passes to the server and whose reply the kernel stores amounts to), and every request after
//! the warm-up counts: the hit ratio is hits / requests over the measured window.
//!
//! - **kernel**: [`table::Table`], the set-associative index and item log of
//!   `bpf/table.h` with the `--cache-mb` split of [`inkcache::Layout::for_bytes`].
//! - **direct**: the table before it: `slots` entries of [`policy::ENTRY_BYTES`], `slots` the largest
//!   power of two with `slots * ENTRY_BYTES <= budget` (at least 16, as `slots_for` had it), a
//!   key in slot `hash & (slots - 1)`, a fill replacing whatever the slot held.
//! - **lru**: exact least-recently-used eviction by item bytes, the whole budget for items.
//! - **lru_log** (for analysis): the same LRU with only the bytes the kernel table's log has
//!   (`segs * 64 KiB`) and items rounded up to 16 bytes as the log stores them: the kernel table's
//!   capacity with an ideal policy. `lru - lru_log` is what the index and the segment rounding
//!   cost; `lru_log - kernel` is what its policy (FIFO with promotion, 8-way sets) costs.
//!
//! Files: [`table`] (the model of `bpf/table.h`), [`policy`] (direct-mapped, LRU), [`hitratio`]
//! (the trace, the mixes, the simulation, the preload for a kernel measurement), `report.rs`
//! (tables and plot).

pub mod hitratio;
pub mod policy;
mod report;
pub mod table;

pub use hitratio::{preload, run, Budget, HitRatioConfig, HitRatioResults, Mix};
pub use report::plot;
