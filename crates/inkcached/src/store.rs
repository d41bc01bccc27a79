//! The item store: a sharded hash table with one allocation per item and an LRU per shard.
//!
//! Each item is a single boxed byte slice: a fixed header (CAS, flags, expiry, store time, key
//! length), the key, then the value. A shard holds a slot vector (item + LRU links as `u32`
//! indices) and a `hashbrown::HashTable<u32>` of slot indices, behind one mutex. The memory limit
//! is split evenly across shards; a store that would exceed its shard's share evicts from that
//! shard's LRU tail, as memcached evicts from the tail of a slab class.
//!
//! Time is memcached's "relative time": seconds since the process started, plus 2 so that an
//! exptime of 1 always means "already expired".

#[path = "store_meta.rs"]
pub mod meta;
pub use meta::{ClassStats, Meta, StoreOpts};

use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Exptimes above this many seconds are absolute unix times (memcached's `REALTIME_MAXDELTA`).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

const HDR: usize = 8 + 4 + 4 + 4 + 1;
const OFF_CAS: usize = 0;
const OFF_FLAGS: usize = 8;
const OFF_EXP: usize = 12;
const OFF_TIME: usize = 16;
const OFF_KLEN: usize = 20;
const NIL: u32 = u32::MAX;
/// Bytes counted per item beyond its allocation: slot, hash table entry, allocator header.
const PER_ITEM_OVERHEAD: usize = 24 + 8 + 16;

/// A read-only view of a stored item.
pub struct ItemRef<'a>(&'a [u8]);

impl<'a> ItemRef<'a> {
    pub fn cas(&self) -> u64 {
        u64::from_le_bytes(self.0[OFF_CAS..OFF_CAS + 8].try_into().unwrap())
    }
    pub fn flags(&self) -> u32 {
        rd32(self.0, OFF_FLAGS)
    }
    /// Expiry in relative seconds, 0 for never.
    pub fn exptime(&self) -> u32 {
        rd32(self.0, OFF_EXP)
    }
    /// Relative time of the last store.
    pub fn time(&self) -> u32 {
        rd32(self.0, OFF_TIME)
    }
    pub fn key(&self) -> &'a [u8] {
        let k = self.0[OFF_KLEN] as usize;
        &self.0[HDR..HDR + k]
    }
    pub fn value(&self) -> &'a [u8] {
        let k = self.0[OFF_KLEN] as usize;
        &self.0[HDR + k..]
    }
    /// Bytes this item accounts for.
    pub fn size(&self) -> usize {
        self.0.len() + PER_ITEM_OVERHEAD
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
    v.extend_from_slice(key);
    for p in parts {
        v.extend_from_slice(p);
    }
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
    head: u32,
    tail: u32,
    bytes: usize,
    items: usize,
    evictions: u64,
    reclaimed: u64,
    total_items: u64,
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
}

pub struct Store {
    shards: Box<[Mutex<Shard>]>,
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
        Self::with_opts(limit, max_item, StoreOpts::default())
    }

    /// The same with memcached's `-C`, `-M` and slab classes.
    pub fn with_opts(limit: usize, max_item: usize, opts: StoreOpts) -> Self {
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
                    head: NIL,
                    tail: NIL,
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
        let it = ItemRef(item);
        let exp = it.exptime();
        if exp != 0 && exp <= now {
            return false;
        }
        if it.cas() != 0 && it.cas() < self.oldest_cas.load(Ordering::Relaxed) {
            return false;
        }
        let ol = self.oldest_live.load(Ordering::Relaxed);
        if ol != 0 && ol <= now && it.time() <= ol {
            return false;
        }
        true
    }

    /// Looks `key` up; expired or flushed items are removed. Returns the slot index.
    fn find(&self, sh: &mut Shard, h: u64, key: &[u8], now: u32) -> Option<u32> {
        let slots = &sh.slots;
        let Some(&idx) = sh.table.find(h, |&i| {
            ItemRef(slots[i as usize].item.as_deref().unwrap()).key() == key
        }) else {
            crate::watch::on_fetch(key, None, None);
            return None;
        };
        if self.live(sh.slots[idx as usize].item.as_deref().unwrap(), now) {
            self.log_fetch(sh, idx);
            Some(idx)
        } else {
            self.log_gone(sh, idx, now);
            sh.reclaimed += 1;
            self.count_reclaimed(sh, idx);
            self.unlink(sh, h, idx);
            None
        }
    }

    fn unlink(&self, sh: &mut Shard, h: u64, idx: u32) {
        if let Ok(e) = sh.table.find_entry(h, |&i| i == idx) {
            e.remove();
        }
        lru_remove(sh, idx);
        let item = sh.slots[idx as usize].item.take().unwrap();
        sh.bytes -= ItemRef(&item).size();
        self.account(-(ItemRef(&item).size() as isize));
        sh.items -= 1;
        sh.free.push(idx);
    }

    /// Inserts a new item, replacing `old` if given; evicts from the LRU tail to stay in budget.
    /// The item starts with fresh [`Meta`]; returns its slot.
    fn insert(&self, sh: &mut Shard, h: u64, old: Option<u32>, item: Box<[u8]>) -> u32 {
        let size = ItemRef(&item).size();
        let fresh = Meta::fresh(self.now());
        let slot = if let Some(o) = old {
            let prev = sh.slots[o as usize].item.replace(item).unwrap();
            sh.slots[o as usize].meta = fresh;
            sh.bytes = sh.bytes - ItemRef(&prev).size() + size;
            self.account(size as isize - ItemRef(&prev).size() as isize);
            lru_remove(sh, o);
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
                self.hash(ItemRef(slots[i as usize].item.as_deref().unwrap()).key())
            });
            lru_push_front(sh, idx);
            sh.bytes += size;
            self.account(size as isize);
            sh.items += 1;
            idx
        };
        sh.total_items += 1;
        self.set_class(sh, slot);
        let newest = sh.head;
        let limit = self.shard_limit.load(Ordering::Relaxed);
        while sh.bytes > limit && sh.tail != NIL && sh.tail != newest {
            let t = sh.tail;
            let th = self.hash(ItemRef(sh.slots[t as usize].item.as_deref().unwrap()).key());
            let now = self.now();
            if self.live(sh.slots[t as usize].item.as_deref().unwrap(), now) {
                if !self.opts.evict {
                    // -M: never evict; only a store that fits gets here (see `fits`).
                    break;
                }
                sh.evictions += 1;
                self.count_evicted(sh, t, now);
            } else {
                sh.reclaimed += 1;
                self.count_reclaimed(sh, t);
            }
            self.unlink(sh, th, t);
        }
        slot
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
        if sh.head != idx {
            lru_remove(&mut sh, idx);
            lru_push_front(&mut sh, idx);
        }
        sh.slots[idx as usize].meta.bump(now);
        self.count_hit(&mut sh, idx, touch.is_some());
        Some(f(ItemRef(sh.slots[idx as usize].item.as_deref().unwrap())))
    }

    /// Like [`Store::get`] but without LRU bump.
    #[allow(dead_code)]
    pub fn peek<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let idx = self.find(&mut sh, h, key, now)?;
        Some(f(ItemRef(sh.slots[idx as usize].item.as_deref().unwrap())))
    }

    /// Stores `data` under `key` according to `mode`. `exptime` is the protocol value.
    pub fn store(
        &self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
    ) -> StoreResult {
        let cas = match mode {
            Mode::Cas(c) => c,
            _ => 0,
        };
        self.store_with(mode, key, flags, exptime, data, cas, Meta::default())
    }

    /// memcached's `do_store_item`. `req_cas` (0: none) is compared for `Cas` (where 0 never
    /// matches), `Append` and `Prepend`; `Add` ignores it. `extra.stale()` (ms with `I`) lets a
    /// `Cas` with a lower CAS than the item's store anyway, as a stale item keeping its TTL and
    /// win token; `extra.key_binary()` marks a key that was sent in base64.
    #[allow(clippy::too_many_arguments)]
    pub fn store_with(
        &self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
        req_cas: u64,
        extra: Meta,
    ) -> StoreResult {
        let mut logged = data.len();
        let r = self.store_inner(mode, key, flags, exptime, data, req_cas, extra, &mut logged);
        self.log_store(key, mode, flags, exptime, logged, r);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn store_inner(
        &self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
        req_cas: u64,
        extra: Meta,
        vlen_out: &mut usize,
    ) -> StoreResult {
        let h = self.hash(key);
        let now = self.now();
        let exp = self.realtime(exptime, now);
        let mut sh = self.shard(h);
        let old = self.find(&mut sh, h, key, now);
        // memcached counts the set in the class of the item it allocated for the data
        let cls = self.opts.slabs.class_of(inkproto::request::item_total(
            key.len(),
            flags,
            data.len(),
            self.opts.use_cas,
        ));
        self.class_mut(&mut sh, cls.max(1)).cmd_set += 1;
        // With -C, items carry no CAS and a request's CAS is never seen (memcached's CAS_NONE).
        let req_cas = if self.opts.use_cas { req_cas } else { 0 };
        let mut meta_bits = extra.bits & meta::KEY_BINARY;
        // (flags, exptime, old value goes before (Some(false)) or after (Some(true)) the data)
        let (flags, exp, join): (u32, u32, Option<bool>) = match (mode, old) {
            (Mode::Add, Some(o)) => {
                // memcached bumps the existing item on a failed add.
                lru_remove(&mut sh, o);
                lru_push_front(&mut sh, o);
                return StoreResult::NotStored;
            }
            (Mode::Replace | Mode::Append | Mode::Prepend, None) => return StoreResult::NotStored,
            (Mode::Cas(_), None) => return StoreResult::NotFound,
            (Mode::Cas(_), Some(o)) => {
                let it = ItemRef(sh.slots[o as usize].item.as_deref().unwrap());
                let ocls = sh.slots[o as usize].meta.cls.into();
                if req_cas != 0 && req_cas == it.cas() {
                    self.class_mut(&mut sh, ocls).cas_hits += 1;
                    (flags, exp, None)
                } else if req_cas != 0 && extra.stale() && req_cas < it.cas() {
                    let exptime = it.exptime();
                    meta_bits |= meta::STALE | (sh.slots[o as usize].meta.bits & meta::WON);
                    self.class_mut(&mut sh, ocls).cas_hits += 1;
                    (flags, exptime, None)
                } else {
                    self.class_mut(&mut sh, ocls).cas_badval += 1;
                    return StoreResult::Exists;
                }
            }
            (Mode::Append | Mode::Prepend, Some(o)) => {
                let it = ItemRef(sh.slots[o as usize].item.as_deref().unwrap());
                if req_cas != 0 && req_cas != it.cas() {
                    return StoreResult::Exists;
                }
                (it.flags(), it.exptime(), Some(mode == Mode::Append))
            }
            _ => (flags, exp, None),
        };
        let old_len = match (join, old) {
            (Some(_), Some(o)) => ItemRef(sh.slots[o as usize].item.as_deref().unwrap())
                .value()
                .len(),
            _ => 0,
        };
        let vlen = data.len() + old_len;
        *vlen_out = vlen;
        if !self.fits(&mut sh, old, item_size(key.len(), vlen), now) {
            self.count_outofmemory(&mut sh, key.len(), flags, vlen);
            return StoreResult::NoMemory;
        }
        let cas = if self.opts.use_cas {
            self.next_cas()
        } else {
            0
        };
        let item = match (join, old) {
            (Some(after), Some(o)) => {
                let prev = ItemRef(sh.slots[o as usize].item.as_deref().unwrap()).value();
                let parts: [&[u8]; 2] = if after { [prev, data] } else { [data, prev] };
                make_item(key, flags, exp, now, cas, &parts)
            }
            _ => make_item(key, flags, exp, now, cas, &[data]),
        };
        let slot = self.insert(&mut sh, h, old, item);
        sh.slots[slot as usize].meta.bits |= meta_bits;
        StoreResult::Stored(cas)
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
            if ItemRef(sh.slots[idx as usize].item.as_deref().unwrap()).cas() != c {
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
        let it = ItemRef(sh.slots[idx as usize].item.as_deref().unwrap());
        if let Some(c) = cas.filter(|&c| c != 0) {
            if it.cas() != c {
                return DeltaResult::Exists;
            }
        }
        let Some(cur) = parse_counter(it.value()) else {
            return DeltaResult::NonNumeric;
        };
        let cls = sh.slots[idx as usize].meta.cls.into();
        let c = self.class_mut(&mut sh, cls);
        if incr {
            c.incr_hits += 1;
        } else {
            c.decr_hits += 1;
        }
        let it = ItemRef(sh.slots[idx as usize].item.as_deref().unwrap());
        let new = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let digits = new.to_string();
        let newcas = if self.opts.use_cas {
            self.next_cas()
        } else {
            0
        };
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
            self.insert(&mut sh, h, Some(idx), item);
        }
        DeltaResult::Ok(new, newcas)
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
        }
        s
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

fn lru_remove(sh: &mut Shard, idx: u32) {
    let (p, n) = {
        let s = &sh.slots[idx as usize];
        (s.prev, s.next)
    };
    if p != NIL {
        sh.slots[p as usize].next = n;
    } else if sh.head == idx {
        sh.head = n;
    }
    if n != NIL {
        sh.slots[n as usize].prev = p;
    } else if sh.tail == idx {
        sh.tail = p;
    }
    let s = &mut sh.slots[idx as usize];
    s.prev = NIL;
    s.next = NIL;
}

fn lru_push_front(sh: &mut Shard, idx: u32) {
    let old = sh.head;
    {
        let s = &mut sh.slots[idx as usize];
        s.prev = NIL;
        s.next = old;
    }
    if old != NIL {
        sh.slots[old as usize].prev = idx;
    } else {
        sh.tail = idx;
    }
    sh.head = idx;
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
