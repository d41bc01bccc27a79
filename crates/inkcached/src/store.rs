//! The item store: a sharded hash table with one allocation per item and an LRU per shard.
//!
//! Long file: every command's store semantics (memcached's, item by item) work on the same shard,
//! LRU and item layout under one lock; they are kept side by side to be read against each other.
//!
//! Each item is a single boxed byte slice: a fixed header (CAS, flags, expiry, store time, key
//! length), the key, then the value. A shard holds a slot vector (item + LRU links as `u32`
//! indices) and a `hashbrown::HashTable<u32>` of slot indices, behind one mutex. The memory limit
//! is split evenly across shards; a store that would exceed its shard's share evicts from that
//! shard's LRU tail, as memcached evicts from the tail of a slab class.
//!
//! Time is memcached's "relative time": seconds since the process started, plus 2 so that an
//! exptime of 1 always means "already expired".
//!
//! With a flash tier ([`crate::ext`]), an item whose value is large enough is not dropped from
//! the LRU tail but written to flash: its slot keeps the header and key, with a [`Ptr`] in place
//! of the value, and moves to a second LRU of such items (dropped from its tail only when no
//! value in RAM is left to move). Reading the value of a flash item goes through
//! [`crate::ext::io`]: it is at hand (read for the current request, or still in a write buffer),
//! or the request records that it needs it and is executed again once it was read.

#[path = "store_meta.rs"]
pub mod meta;
pub use meta::{ClassStats, Meta, StoreOpts};

use crate::ext::{self, io, Ext, Ptr, Rescue};
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Exptimes above this many seconds are absolute unix times (memcached's `REALTIME_MAXDELTA`).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

const HDR: usize = 8 + 4 + 4 + 4 + 1 + 1;
const OFF_CAS: usize = 0;
const OFF_FLAGS: usize = 8;
const OFF_EXP: usize = 12;
const OFF_TIME: usize = 16;
const OFF_KLEN: usize = 20;
const OFF_KIND: usize = 21;
/// Kind bits: the value is on flash (a [`Ptr`] follows the key).
const K_FLASH: u8 = 1;
/// The flash value was read since it was written there (it gets another round on compaction).
const K_FETCHED: u8 = 2;
const NIL: u32 = u32::MAX;
/// LRU lists: items with their value in RAM, items with their value on flash.
const RAM: usize = 0;
const FLASH: usize = 1;
/// Bytes counted per item beyond its allocation: slot, hash table entry, allocator header.
const PER_ITEM_OVERHEAD: usize = 24 + 8 + 16;

/// A read-only view of a stored item.
pub struct ItemRef<'a> {
    item: &'a [u8],
    /// A flash item's value, when at hand.
    val: Option<&'a [u8]>,
}

impl<'a> ItemRef<'a> {
    fn ram(item: &'a [u8]) -> Self {
        ItemRef { item, val: None }
    }
    pub fn cas(&self) -> u64 {
        u64::from_le_bytes(self.item[OFF_CAS..OFF_CAS + 8].try_into().unwrap())
    }
    pub fn flags(&self) -> u32 {
        rd32(self.item, OFF_FLAGS)
    }
    /// Expiry in relative seconds, 0 for never.
    pub fn exptime(&self) -> u32 {
        rd32(self.item, OFF_EXP)
    }
    /// Relative time of the last store.
    pub fn time(&self) -> u32 {
        rd32(self.item, OFF_TIME)
    }
    pub fn key(&self) -> &'a [u8] {
        let k = self.item[OFF_KLEN] as usize;
        &self.item[HDR..HDR + k]
    }
    /// True if the value lives on flash.
    pub fn on_flash(&self) -> bool {
        is_flash(self.item)
    }
    /// The value. For a flash item whose value is not at hand, this records that the current
    /// request needs it read (it is then executed again: see [`crate::ext::io`]) and returns
    /// an empty placeholder that must not reach a client.
    pub fn value(&self) -> &'a [u8] {
        if !is_flash(self.item) {
            let k = self.item[OFF_KLEN] as usize;
            return &self.item[HDR + k..];
        }
        match self.val {
            Some(v) => v,
            None => {
                io::need(ptr_of(self.item), self.key(), self.cas());
                &[]
            }
        }
    }
    /// The value's length, without reading a value on flash.
    pub fn value_len(&self) -> usize {
        if is_flash(self.item) {
            ptr_of(self.item).vlen as usize
        } else {
            self.item.len() - HDR - self.item[OFF_KLEN] as usize
        }
    }
    /// Bytes this item accounts for in RAM.
    pub fn size(&self) -> usize {
        self.item.len() + PER_ITEM_OVERHEAD
    }
}

fn is_flash(item: &[u8]) -> bool {
    item[OFF_KIND] & K_FLASH != 0
}

fn ptr_of(item: &[u8]) -> Ptr {
    let k = item[OFF_KLEN] as usize;
    Ptr::decode(&item[HDR + k..HDR + k + Ptr::LEN])
}

fn key_of(item: &[u8]) -> &[u8] {
    &item[HDR..HDR + item[OFF_KLEN] as usize]
}

fn list_of(item: &[u8]) -> usize {
    if is_flash(item) {
        FLASH
    } else {
        RAM
    }
}

fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Bytes an item of this key and value length accounts for (see [`ItemRef::size`]).
fn item_size(klen: usize, vlen: usize) -> usize {
    HDR + klen + vlen + PER_ITEM_OVERHEAD
}

fn make_item(key: &[u8], flags: u32, exp: u32, time: u32, cas: u64, parts: &[&[u8]]) -> Box<[u8]> {
    let vlen: usize = parts.iter().map(|p| p.len()).sum();
    let mut v = Vec::with_capacity(HDR + key.len() + vlen);
    v.extend_from_slice(&cas.to_le_bytes());
    v.extend_from_slice(&flags.to_le_bytes());
    v.extend_from_slice(&exp.to_le_bytes());
    v.extend_from_slice(&time.to_le_bytes());
    v.push(key.len() as u8);
    v.push(0);
    v.extend_from_slice(key);
    for p in parts {
        v.extend_from_slice(p);
    }
    v.into_boxed_slice()
}

/// The same item with its value replaced by a pointer to flash.
fn flash_item(item: &[u8], p: &Ptr) -> Box<[u8]> {
    let k = item[OFF_KLEN] as usize;
    let mut v = Vec::with_capacity(HDR + k + Ptr::LEN);
    v.extend_from_slice(&item[..HDR + k]);
    v[OFF_KIND] = K_FLASH;
    v.extend_from_slice(&p.encode());
    v.into_boxed_slice()
}

struct Slot {
    item: Option<Box<[u8]>>,
    prev: u32,
    next: u32,
    /// Access time and flag bits (memcached's `it->time` and `it_flags`).
    meta: Meta,
}

#[derive(Default)]
struct Shard {
    table: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    heads: [u32; 2],
    tails: [u32; 2],
    bytes: usize,
    items: usize,
    evictions: u64,
    reclaimed: u64,
    total_items: u64,
    /// Lookups that found their key expired or flushed (memcached's `get_expired`,
    /// `get_flushed`).
    get_expired: u64,
    get_flushed: u64,
    /// Per slab class counters (`stats items`), allocated on first use.
    classes: Vec<ClassStats>,
}

/// Storage command modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Compare-and-swap against the given unique.
    Cas(u64),
}

/// Result of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreResult {
    /// Stored, with the item's new CAS unique.
    Stored(u64),
    NotStored,
    Exists,
    NotFound,
    /// -M and no room without evicting (memcached's `SERVER_ERROR out of memory ...`).
    NoMemory,
}

/// Result of incr/decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaResult {
    /// New value and CAS.
    Ok(u64, u64),
    NotFound,
    NonNumeric,
    /// CAS given and not matching.
    Exists,
}

/// Counters the store keeps (summed over shards on demand).
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
}

/// Why a stored item is no longer served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    Flushed,
    Expired,
}

pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    ext: Option<Arc<Ext>>,
    recache_counter: AtomicU64,
    shard_shift: u32,
    hasher: hashbrown::DefaultHashBuilder,
    next_cas: AtomicU64,
    /// Items whose CAS is below this were flushed (immediate `flush_all`).
    oldest_cas: AtomicU64,
    /// Items stored at or before this relative time are invalid once it is reached (delayed
    /// `flush_all`); 0 if none.
    oldest_live: AtomicU32,
    shard_limit: AtomicUsize,
    /// Bytes of all shards, kept under `-M` only (see `fits`).
    used: AtomicUsize,
    opts: StoreOpts,
    started: Instant,
    /// Unix time at relative time 0.
    process_started: i64,
}

impl Store {
    /// A store holding at most `limit` bytes, for items up to `max_item` bytes.
    #[cfg(test)]
    pub fn new(limit: usize, max_item: usize) -> Self {
        Self::with_ext(limit, max_item, StoreOpts::default(), None)
    }

    /// The same with memcached's `-C`, `-M` and slab classes, and a flash tier for values
    /// evicted from RAM.
    pub fn with_ext(limit: usize, max_item: usize, opts: StoreOpts, ext: Option<Arc<Ext>>) -> Self {
        // Enough shards for concurrency, few enough that each can hold a few max-size items.
        let want = (limit / (2 * max_item.max(1))).clamp(1, 256);
        let n = if want.is_power_of_two() {
            want
        } else {
            want.next_power_of_two() / 2
        };
        let shards = (0..n)
            .map(|_| {
                Mutex::new(Shard {
                    heads: [NIL; 2],
                    tails: [NIL; 2],
                    ..Default::default()
                })
            })
            .collect();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Store {
            shards,
            ext,
            recache_counter: AtomicU64::new(0),
            shard_shift: 64 - n.trailing_zeros(),
            hasher: Default::default(),
            next_cas: AtomicU64::new(1),
            oldest_cas: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            shard_limit: AtomicUsize::new(limit / n),
            used: AtomicUsize::new(0),
            opts,
            started: Instant::now(),
            process_started: now - 2,
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The flash tier, if one runs.
    pub fn ext(&self) -> Option<&Arc<Ext>> {
        self.ext.as_ref()
    }

    /// Runs the flash tier's maintainer (writes, compaction) until `stop`; returns at once
    /// without a flash tier.
    pub fn run_ext_maintainer(&self, stop: &AtomicBool) {
        if let Some(e) = &self.ext {
            e.maintain(self, stop);
        }
    }

    /// Current relative time in seconds.
    pub fn now(&self) -> u32 {
        self.started.elapsed().as_secs() as u32 + 2
    }

    /// Unix time at relative time 0.
    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    /// memcached's `realtime()`: a protocol exptime to relative time (0 = never).
    pub fn realtime(&self, exptime: i64, now: u32) -> u32 {
        if exptime == 0 {
            return 0;
        }
        if exptime < 0 {
            return 1;
        }
        if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started {
                return 1;
            }
            return (exptime - self.process_started).min(u32::MAX as i64) as u32;
        }
        (exptime + now as i64).min(u32::MAX as i64) as u32
    }

    fn next_cas(&self) -> u64 {
        self.next_cas.fetch_add(1, Ordering::Relaxed)
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, h: u64) -> std::sync::MutexGuard<'_, Shard> {
        let i = if self.shards.len() == 1 {
            0
        } else {
            (h >> self.shard_shift) as usize
        };
        // A panic while holding a shard lock cannot leave the table half-updated in a way that
        // breaks memory safety; keep serving.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, item: &[u8], now: u32) -> bool {
        self.gone(item, now).is_none()
    }

    /// Why an item is no longer served, if it is not: flushed is checked first, as memcached's
    /// `do_item_get` does (an item both flushed and expired counts as flushed).
    fn gone(&self, item: &[u8], now: u32) -> Option<Gone> {
        let it = ItemRef::ram(item);
        if it.cas() != 0 && it.cas() < self.oldest_cas.load(Ordering::Relaxed) {
            return Some(Gone::Flushed);
        }
        let ol = self.oldest_live.load(Ordering::Relaxed);
        if ol != 0 && ol <= now && it.time() <= ol {
            return Some(Gone::Flushed);
        }
        let exp = it.exptime();
        if exp != 0 && exp <= now {
            return Some(Gone::Expired);
        }
        None
    }

    /// A flash item whose page was reclaimed since: its value is gone.
    fn stale(&self, item: &[u8]) -> bool {
        is_flash(item) && self.ext.as_ref().is_none_or(|e| !e.valid(&ptr_of(item)))
    }

    /// Looks `key` up; expired or flushed items are removed. Returns the slot index.
    fn find(&self, sh: &mut Shard, h: u64, key: &[u8], now: u32) -> Option<u32> {
        let slots = &sh.slots;
        let Some(&idx) = sh.table.find(h, |&i| {
            key_of(slots[i as usize].item.as_deref().unwrap()) == key
        }) else {
            crate::watch::on_fetch(key, None, None);
            return None;
        };
        let item = sh.slots[idx as usize].item.as_deref().unwrap();
        if let Some(why) = self.gone(item, now) {
            // memcached's do_item_get: unlinked and counted as a get of a flushed or expired
            // item (whatever the command), not as reclaimed (that is the LRU tail's count)
            self.log_gone(sh, idx, why);
            match why {
                Gone::Flushed => sh.get_flushed += 1,
                Gone::Expired => sh.get_expired += 1,
            }
            self.unlink(sh, h, idx);
            None
        } else if self.stale(item) {
            if let Some(e) = &self.ext {
                e.stats.miss_from_extstore.fetch_add(1, Ordering::Relaxed);
            }
            self.unlink(sh, h, idx);
            None
        } else {
            self.log_fetch(sh, idx);
            Some(idx)
        }
    }

    fn unlink(&self, sh: &mut Shard, h: u64, idx: u32) {
        if let Ok(e) = sh.table.find_entry(h, |&i| i == idx) {
            e.remove();
        }
        lru_remove(sh, idx);
        let item = sh.slots[idx as usize].item.take().unwrap();
        self.release(&item);
        sh.bytes -= ItemRef::ram(&item).size();
        self.account(-(ItemRef::ram(&item).size() as isize));
        sh.items -= 1;
        sh.free.push(idx);
    }

    /// A flash item leaves RAM: its bytes on flash are dead.
    fn release(&self, item: &[u8]) {
        if is_flash(item) {
            if let Some(e) = &self.ext {
                e.release(&ptr_of(item), item[OFF_KLEN] as usize);
            }
        }
    }

    /// Inserts a new item, replacing `old` if given; evicts from the LRU tail to stay in budget.
    /// The item starts with fresh [`Meta`]; returns its slot.
    fn insert(&self, sh: &mut Shard, h: u64, old: Option<u32>, item: Box<[u8]>) -> u32 {
        let size = ItemRef::ram(&item).size();
        let fresh = Meta::fresh(self.now());
        let slot = if let Some(o) = old {
            lru_remove(sh, o);
            let prev = sh.slots[o as usize].item.replace(item).unwrap();
            self.release(&prev);
            sh.slots[o as usize].meta = fresh;
            sh.bytes = sh.bytes - ItemRef::ram(&prev).size() + size;
            self.account(size as isize - ItemRef::ram(&prev).size() as isize);
            lru_push_front(sh, o);
            o
        } else {
            let idx = match sh.free.pop() {
                Some(i) => {
                    sh.slots[i as usize].item = Some(item);
                    i
                }
                None => {
                    sh.slots.push(Slot {
                        item: Some(item),
                        prev: NIL,
                        next: NIL,
                        meta: fresh,
                    });
                    (sh.slots.len() - 1) as u32
                }
            };
            sh.slots[idx as usize].meta = fresh;
            let slots = &sh.slots;
            sh.table.insert_unique(h, idx, |&i| {
                self.hash(key_of(slots[i as usize].item.as_deref().unwrap()))
            });
            lru_push_front(sh, idx);
            sh.bytes += size;
            self.account(size as isize);
            sh.items += 1;
            idx
        };
        sh.total_items += 1;
        self.set_class(sh, slot);
        self.make_room(sh);
        slot
    }

    /// Reclaims up to `max` expired or flushed items at the LRU tail (counted `reclaimed`,
    /// and `expired_unfetched` if never fetched); a live one stops it. Returns how many. Before
    /// each store, and each incr/decr whose result needs a new item, with `max` 5, it is what
    /// memcached's `do_item_alloc_pull` does before it allocates (with a flat LRU,
    /// `lru_pull_tail`).
    fn pull_tail(&self, sh: &mut Shard, now: u32, max: usize) -> usize {
        for n in 0..max {
            let t = sh.tails[RAM];
            if t == NIL {
                return n;
            }
            let item = sh.slots[t as usize].item.as_deref().unwrap();
            if self.live(item, now) {
                return n;
            }
            let th = self.hash(key_of(item));
            self.reclaim(sh, th, t);
        }
        max
    }

    /// Removes the dead item at `idx` (key hash `h`) from the LRU tail, counted as reclaimed.
    fn reclaim(&self, sh: &mut Shard, h: u64, idx: u32) {
        sh.reclaimed += 1;
        self.count_reclaimed(sh, idx);
        self.unlink(sh, h, idx);
    }

    /// Evicts from the LRU tails until the shard is within its budget: values large enough
    /// move to flash (their item stays, smaller), others are dropped; items whose value is on
    /// flash are dropped only when no other value is left in RAM. Never the newest item.
    fn make_room(&self, sh: &mut Shard) {
        let newest = sh.heads[RAM];
        let now = self.now();
        let limit = self.shard_limit.load(Ordering::Relaxed);
        loop {
            if sh.bytes <= limit {
                // Within budget: only values stored long enough ago go (ext_item_age).
                let Some(e) = self.ext.as_ref().filter(|e| e.cfg.item_age != u32::MAX) else {
                    break;
                };
                let t = sh.tails[RAM];
                if t == NIL || t == newest {
                    break;
                }
                let item = sh.slots[t as usize].item.as_deref().unwrap();
                if !self.live(item, now) {
                    let th = self.hash(key_of(item));
                    self.reclaim(sh, th, t);
                    continue;
                }
                if now.saturating_sub(ItemRef::ram(item).time()) < e.cfg.item_age
                    || !self.to_flash(sh, t, e)
                {
                    break;
                }
                continue;
            }
            let ft = sh.tails[FLASH];
            if ft != NIL && self.stale(sh.slots[ft as usize].item.as_deref().unwrap()) {
                let th = self.hash(key_of(sh.slots[ft as usize].item.as_deref().unwrap()));
                sh.reclaimed += 1;
                self.unlink(sh, th, ft);
                continue;
            }
            let t = sh.tails[RAM];
            let victim = if t != NIL && t != newest {
                let item = sh.slots[t as usize].item.as_deref().unwrap();
                let th = self.hash(key_of(item));
                if !self.live(item, now) {
                    self.reclaim(sh, th, t);
                    continue;
                }
                if !self.opts.evict {
                    // -M: never evict; a store that does not fit was refused (see `fits`)
                    break;
                }
                if let Some(e) = &self.ext {
                    if self.to_flash(sh, t, e) {
                        continue;
                    }
                }
                t
            } else if ft != NIL {
                ft
            } else {
                break;
            };
            if !self.opts.evict {
                break;
            }
            let th = self.hash(key_of(sh.slots[victim as usize].item.as_deref().unwrap()));
            sh.evictions += 1;
            self.log_evicted(sh, victim, now);
            self.count_evicted(sh, victim, now);
            self.unlink(sh, th, victim);
        }
    }

    /// Moves the value of the RAM item at `t` to flash; false if it cannot go.
    fn to_flash(&self, sh: &mut Shard, t: u32, e: &Ext) -> bool {
        let item = sh.slots[t as usize].item.as_deref().unwrap();
        let it = ItemRef::ram(item);
        let Some(p) = e.append(self.hash(it.key()), it.key(), it.cas(), it.value()) else {
            return false;
        };
        let small = flash_item(item, &p);
        // a value smaller than its flash pointer grows in RAM (memcached moves it all the same,
        // as ext_item_size says): the change is signed
        let delta = small.len() as isize - item.len() as isize;
        lru_remove(sh, t);
        sh.slots[t as usize].item = Some(small);
        sh.bytes = sh.bytes.saturating_add_signed(delta);
        self.account(delta);
        lru_push_front(sh, t);
        true
    }

    /// Calls `f` with the item at `idx`, its flash value attached when at hand. With `fetch`,
    /// a flash value at hand marks the item as read (and may bring it back to RAM).
    fn view<R>(
        &self,
        sh: &mut Shard,
        h: u64,
        idx: u32,
        fetch: bool,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> R {
        let item = sh.slots[idx as usize].item.as_deref().unwrap();
        let Some(e) = self.ext.as_ref().filter(|_| is_flash(item)) else {
            return f(ItemRef::ram(item));
        };
        let p = ptr_of(item);
        io::with_value(e, &p, |v| {
            let Some(v) = v else {
                return f(ItemRef::ram(
                    sh.slots[idx as usize].item.as_deref().unwrap(),
                ));
            };
            if fetch {
                let item = sh.slots[idx as usize].item.as_deref_mut().unwrap();
                let again = item[OFF_KIND] & K_FETCHED != 0;
                item[OFF_KIND] |= K_FETCHED;
                let rate = u64::from(e.cfg.recache_rate);
                if again
                    && rate > 0
                    && self
                        .recache_counter
                        .fetch_add(1, Ordering::Relaxed)
                        .is_multiple_of(rate)
                {
                    // Read again from flash: bring the value back to RAM.
                    let it = ItemRef::ram(item);
                    let ram = make_item(
                        it.key(),
                        it.flags(),
                        it.exptime(),
                        it.time(),
                        it.cas(),
                        &[v],
                    );
                    self.insert(sh, h, Some(idx), ram);
                    e.stats
                        .recache_from_extstore
                        .fetch_add(1, Ordering::Relaxed);
                    return f(ItemRef::ram(
                        sh.slots[idx as usize].item.as_deref().unwrap(),
                    ));
                }
            }
            f(ItemRef {
                item: sh.slots[idx as usize].item.as_deref().unwrap(),
                val: Some(v),
            })
        })
    }

    /// Calls `f` with the item for `key` if present and live; bumps it in the LRU. If `touch` is
    /// given, sets the item's exptime first (gat).
    pub fn get<R>(
        &self,
        key: &[u8],
        touch: Option<i64>,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let idx = self.find(&mut sh, h, key, now)?;
        if let Some(e) = touch {
            let exp = self.realtime(e, now);
            wr32(
                sh.slots[idx as usize].item.as_deref_mut().unwrap(),
                OFF_EXP,
                exp,
            );
        }
        lru_remove(&mut sh, idx);
        lru_push_front(&mut sh, idx);
        sh.slots[idx as usize].meta.bump(now);
        self.count_hit(&mut sh, idx, touch.is_some());
        Some(self.view(&mut sh, h, idx, true, f))
    }

    /// Like [`Store::get`] but without LRU bump.
    #[allow(dead_code)]
    pub fn peek<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let idx = self.find(&mut sh, h, key, now)?;
        Some(self.view(&mut sh, h, idx, false, f))
    }

    /// Removes `key`; with `cas` given, only if it matches. Returns Ok(true) if deleted,
    /// Ok(false) if not found, Err(()) on CAS mismatch.
    pub fn delete(&self, key: &[u8], cas: Option<u64>) -> Result<bool, ()> {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let Some(idx) = self.find(&mut sh, h, key, now) else {
            return Ok(false);
        };
        if let Some(c) = cas {
            if ItemRef::ram(sh.slots[idx as usize].item.as_deref().unwrap()).cas() != c {
                return Err(());
            }
        }
        let cls = sh.slots[idx as usize].meta.cls;
        self.class_mut(&mut sh, cls.into()).delete_hits += 1;
        self.unlink(&mut sh, h, idx);
        Ok(true)
    }

    /// Sets a new exptime; false if not found.
    pub fn touch(&self, key: &[u8], exptime: i64) -> bool {
        self.get(key, Some(exptime), |_| ()).is_some()
    }

    /// incr (`incr` true) or decr by `delta`, memcached style: incr wraps at 2^64, decr stops at
    /// 0, a shorter result is padded with spaces in place. With `cas`, only if it matches.
    pub fn delta(&self, key: &[u8], incr: bool, delta: u64, cas: Option<u64>) -> DeltaResult {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let Some(idx) = self.find(&mut sh, h, key, now) else {
            return DeltaResult::NotFound;
        };
        let it = ItemRef::ram(sh.slots[idx as usize].item.as_deref().unwrap());
        if let Some(c) = cas.filter(|&c| c != 0) {
            if it.cas() != c {
                return DeltaResult::Exists;
            }
        }
        if it.on_flash() {
            return self.delta_flash(&mut sh, h, idx, incr, delta, now);
        }
        let Some(cur) = parse_counter(it.value()) else {
            return DeltaResult::NonNumeric;
        };
        self.count_delta(&mut sh, idx, incr);
        let it = ItemRef::ram(sh.slots[idx as usize].item.as_deref().unwrap());
        let new = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let digits = new.to_string();
        let newcas = self.new_cas();
        let old_len = it.value().len();
        if digits.len() <= old_len {
            let slot = sh.slots[idx as usize].item.as_deref_mut().unwrap();
            let k = slot[OFF_KLEN] as usize;
            let v = &mut slot[HDR + k..];
            v[..digits.len()].copy_from_slice(digits.as_bytes());
            v[digits.len()..].fill(b' ');
            slot[OFF_CAS..OFF_CAS + 8].copy_from_slice(&newcas.to_le_bytes());
            lru_remove(&mut sh, idx);
            lru_push_front(&mut sh, idx);
        } else {
            let item = make_item(
                key,
                it.flags(),
                it.exptime(),
                it.time(),
                newcas,
                &[digits.as_bytes()],
            );
            // a new item, allocated as memcached's do_add_delta does: the LRU tail is pulled
            // first, as for a store (the key's own item is live: the pull stops there at most)
            self.pull_tail(&mut sh, now, 5);
            self.insert(&mut sh, h, Some(idx), item);
        }
        DeltaResult::Ok(new, newcas)
    }

    /// incr/decr of an item whose value is on flash: the same result as in RAM (a shorter
    /// number padded with spaces to the old length), as a new item in RAM.
    fn delta_flash(
        &self,
        sh: &mut Shard,
        h: u64,
        idx: u32,
        incr: bool,
        delta: u64,
        now: u32,
    ) -> DeltaResult {
        let r = self.view(sh, h, idx, false, |it| {
            let v = it.value();
            if io::pending_needs() {
                return None;
            }
            let Some(cur) = parse_counter(v) else {
                return Some(Err(()));
            };
            let new = if incr {
                cur.wrapping_add(delta)
            } else {
                cur.saturating_sub(delta)
            };
            let mut digits = new.to_string().into_bytes();
            if digits.len() < v.len() {
                digits.resize(v.len(), b' ');
            }
            Some(Ok((new, digits, it.flags(), it.exptime(), it.time())))
        });
        match r {
            // Not read yet: the attempt is executed again (the answer is discarded).
            None => DeltaResult::NotFound,
            Some(Err(())) => DeltaResult::NonNumeric,
            Some(Ok((new, digits, flags, exp, time))) => {
                self.count_delta(sh, idx, incr);
                let newcas = self.new_cas();
                let key = key_of(sh.slots[idx as usize].item.as_deref().unwrap()).to_vec();
                let item = make_item(&key, flags, exp, time, newcas, &[&digits]);
                self.pull_tail(sh, now, 5); // a new item: as in RAM when it grows
                self.insert(sh, h, Some(idx), item);
                DeltaResult::Ok(new, newcas)
            }
        }
    }

    /// Where the value of `key` is on flash, and its CAS: None if it is absent, expired, in
    /// RAM, or its page was reclaimed. Changes nothing (no LRU bump, no reclaim).
    pub fn flash_ref(&self, key: &[u8]) -> Option<(Ptr, u64)> {
        let h = self.hash(key);
        let now = self.now();
        let sh = self.shard(h);
        let slots = &sh.slots;
        let &idx = sh.table.find(h, |&i| {
            key_of(slots[i as usize].item.as_deref().unwrap()) == key
        })?;
        let item = sh.slots[idx as usize].item.as_deref().unwrap();
        (is_flash(item) && self.live(item, now) && !self.stale(item))
            .then(|| (ptr_of(item), ItemRef::ram(item).cas()))
    }

    /// Drops `key` if its value is still the one at `p` on flash (a failed read).
    pub fn drop_flash(&self, key: &[u8], p: &Ptr) {
        let h = self.hash(key);
        let mut sh = self.shard(h);
        let slots = &sh.slots;
        let Some(&idx) = sh.table.find(h, |&i| {
            key_of(slots[i as usize].item.as_deref().unwrap()) == key
        }) else {
            return;
        };
        let item = sh.slots[idx as usize].item.as_deref().unwrap();
        if is_flash(item) && ptr_of(item) == *p {
            self.unlink(&mut sh, h, idx);
        }
    }

    /// `flush_all [delay]`.
    pub fn flush_all(&self, delay: i64) {
        let now = self.now();
        if !self.opts.use_cas {
            // Without CAS, memcached invalidates by time alone: everything stored up to the
            // second the flush takes effect, that second included.
            let t = if delay > 0 {
                self.realtime(delay, now)
            } else {
                now
            };
            self.oldest_live.store(t.max(1), Ordering::Relaxed);
        } else if delay > 0 {
            let t = self.realtime(delay, now).saturating_sub(1);
            self.oldest_live.store(t.max(1), Ordering::Relaxed);
        } else {
            self.oldest_live.store(0, Ordering::Relaxed);
            self.oldest_cas.store(self.next_cas(), Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats::default();
        for sh in self.shards.iter() {
            let sh = sh.lock().unwrap_or_else(|p| p.into_inner());
            s.curr_items += sh.items as u64;
            s.total_items += sh.total_items;
            s.bytes += sh.bytes as u64;
            s.evictions += sh.evictions;
            s.reclaimed += sh.reclaimed;
            s.get_expired += sh.get_expired;
            s.get_flushed += sh.get_flushed;
        }
        s
    }

    /// `stats reset`: what memcached's `stats_reset` zeroes of the store's counters (the
    /// global `total_items`, every per-class item and slab counter); the items and their bytes
    /// stay.
    pub fn reset_stats(&self) {
        for sh in self.shards.iter() {
            let mut sh = sh.lock().unwrap_or_else(|p| p.into_inner());
            sh.total_items = 0;
            sh.evictions = 0;
            sh.reclaimed = 0;
            sh.get_expired = 0;
            sh.get_flushed = 0;
            sh.classes.clear(); // allocated again on first use (class_mut)
        }
    }
}

/// memcached's `safe_strtoull` on a stored value: digits, then optional whitespace.
fn parse_counter(v: &[u8]) -> Option<u64> {
    let end = v
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(v.len());
    if end == 0 || !v[end..].iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &v[..end] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

impl ext::Rescuer for Store {
    fn rescue(&self, _khash: u64, key: &[u8], old: &Ptr, value: &[u8]) -> Rescue {
        let Some(e) = &self.ext else {
            return Rescue::Skipped;
        };
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let slots = &sh.slots;
        let Some(&idx) = sh.table.find(h, |&i| {
            key_of(slots[i as usize].item.as_deref().unwrap()) == key
        }) else {
            return Rescue::Skipped;
        };
        let item = sh.slots[idx as usize].item.as_deref().unwrap();
        if !is_flash(item)
            || ptr_of(item) != *old
            || item[OFF_KIND] & K_FETCHED == 0
            || !self.live(item, now)
        {
            return Rescue::Skipped;
        }
        let cas = ItemRef::ram(item).cas();
        let Some(p) = e.append(h, key, cas, value) else {
            return Rescue::NoRoom;
        };
        let item = sh.slots[idx as usize].item.as_deref_mut().unwrap();
        let k = item[OFF_KLEN] as usize;
        item[HDR + k..HDR + k + Ptr::LEN].copy_from_slice(&p.encode());
        // Read again before the next round, or it goes with its page.
        item[OFF_KIND] &= !K_FETCHED;
        e.release(old, k);
        Rescue::Moved
    }
}

fn lru_remove(sh: &mut Shard, idx: u32) {
    let l = list_of(sh.slots[idx as usize].item.as_deref().unwrap());
    let (p, n) = {
        let s = &sh.slots[idx as usize];
        (s.prev, s.next)
    };
    if p != NIL {
        sh.slots[p as usize].next = n;
    } else if sh.heads[l] == idx {
        sh.heads[l] = n;
    }
    if n != NIL {
        sh.slots[n as usize].prev = p;
    } else if sh.tails[l] == idx {
        sh.tails[l] = p;
    }
    let s = &mut sh.slots[idx as usize];
    s.prev = NIL;
    s.next = NIL;
}

fn lru_push_front(sh: &mut Shard, idx: u32) {
    let l = list_of(sh.slots[idx as usize].item.as_deref().unwrap());
    let old = sh.heads[l];
    {
        let s = &mut sh.slots[idx as usize];
        s.prev = NIL;
        s.next = old;
    }
    if old != NIL {
        sh.slots[old as usize].prev = idx;
    } else {
        sh.tails[l] = idx;
    }
    sh.heads[l] = idx;
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
