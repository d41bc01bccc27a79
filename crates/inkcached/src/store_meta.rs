//! The store's memcached item state beyond key and value: access time and flag bits per item
//! (fetched, stale, win token sent, binary key), per slab class counters, `-M` and `-C`, and
//! the locked single-key access the meta commands need. A child module of `store`.

use super::{
    item_size, lru_push_front, lru_remove, make_item, Gone, ItemRef, Mode, Shard, Store,
    StoreResult, FLASH, NIL, RAM,
};
use crate::ext::io;
use crate::slabs::{Slabs, MAX_CLASSES};
use inkproto::request::item_total;
use std::sync::atomic::Ordering;

/// The item was fetched since it was stored (`ITEM_FETCHED`).
pub const FETCHED: u8 = 1;
/// Marked stale by `md <key> I` or stored stale by `ms ... I` (`ITEM_STALE`).
pub const STALE: u8 = 2;
/// A client was handed the win token (`ITEM_TOKEN_SENT`).
pub const WON: u8 = 4;
/// The key was sent in base64 (`ITEM_KEY_BINARY`).
pub const KEY_BINARY: u8 = 8;

/// Per-item state: memcached's `it->time` (last access) and the flag bits above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub atime: u32,
    pub bits: u8,
    /// memcached's slab class of the item, set when stored.
    pub cls: u8,
}

impl Meta {
    pub fn fresh(now: u32) -> Self {
        Meta {
            atime: now,
            bits: 0,
            cls: 0,
        }
    }
    /// A fetch with LRU bump: fetched, accessed now.
    pub fn bump(&mut self, now: u32) {
        self.bits |= FETCHED;
        self.atime = now;
    }
    pub fn has(&self, b: u8) -> bool {
        self.bits & b != 0
    }
    pub fn stale(&self) -> bool {
        self.has(STALE)
    }
    /// For [`Store::store_with`]: store stale if the CAS is lower (ms `I`).
    pub fn with_stale(mut self) -> Self {
        self.bits |= STALE;
        self
    }
    /// For [`Store::store_with`]: the key was base64.
    pub fn with_key_binary(mut self) -> Self {
        self.bits |= KEY_BINARY;
        self
    }
}

/// memcached settings the store follows.
#[derive(Clone, Debug)]
pub struct StoreOpts {
    /// CAS values (off: `-C`).
    pub use_cas: bool,
    /// Evict when full (off: `-M`, answer out of memory instead).
    pub evict: bool,
    /// Slab classes for reporting.
    pub slabs: Slabs,
}

impl Default for StoreOpts {
    fn default() -> Self {
        StoreOpts {
            use_cas: true,
            evict: true,
            slabs: Slabs::new(&crate::config::Config::default()),
        }
    }
}

/// Counters of one slab class (memcached's `itemstats_t`), summed over shards for `stats items`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassStats {
    pub get_hits: u64,
    pub cmd_set: u64,
    pub delete_hits: u64,
    pub incr_hits: u64,
    pub decr_hits: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    pub number: u64,
    /// Bytes of the items (memcached's `mem_requested`: their `ITEM_ntotal`).
    pub requested: u64,
    /// Seconds since the least recently used item was accessed.
    pub age: u32,
    pub evicted: u64,
    pub evicted_nonzero: u64,
    pub evicted_time: u32,
    pub evicted_unfetched: u64,
    pub outofmemory: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
}

/// One live item seen by [`Store::for_each`].
pub struct Seen<'a> {
    pub item: ItemRef<'a>,
    pub meta: Meta,
    pub cls: usize,
    pub ntotal: usize,
}

/// Locked access to one key (meta commands): see [`Store::with_entry`].
pub struct Entry<'a> {
    store: &'a Store,
    sh: &'a mut Shard,
    h: u64,
    key: &'a [u8],
    idx: Option<u32>,
    pub now: u32,
}

impl Entry<'_> {
    /// The live item, if any.
    pub fn item(&self) -> Option<ItemRef<'_>> {
        self.idx
            .map(|i| ItemRef::ram(self.sh.slots[i as usize].item.as_deref().unwrap()))
    }
    pub fn meta(&self) -> Meta {
        self.idx
            .map_or(Meta::default(), |i| self.sh.slots[i as usize].meta)
    }
    pub fn meta_mut(&mut self) -> Option<&mut Meta> {
        self.idx.map(|i| &mut self.sh.slots[i as usize].meta)
    }
    /// Sets the exptime (relative seconds, 0 = never) of the live item.
    pub fn set_exptime(&mut self, rel: u32) {
        if let Some(i) = self.idx {
            let it = self.sh.slots[i as usize].item.as_deref_mut().unwrap();
            super::wr32(it, super::OFF_EXP, rel);
        }
    }
    /// A protocol exptime as relative time.
    pub fn realtime(&self, exptime: i64) -> u32 {
        self.store.realtime(exptime, self.now)
    }
    /// Gives the live item a new CAS (0 with `-C`).
    pub fn new_cas(&mut self) {
        if let Some(i) = self.idx {
            let cas = if self.store.opts.use_cas {
                self.store.next_cas()
            } else {
                0
            };
            let it = self.sh.slots[i as usize].item.as_deref_mut().unwrap();
            it[super::OFF_CAS..super::OFF_CAS + 8].copy_from_slice(&cas.to_le_bytes());
        }
    }
    /// Creates an empty item (mg `N`), unless the memory is full under `-M`. True if created.
    pub fn vivify(&mut self, exptime_rel: u32, key_binary: bool) -> bool {
        if self.idx.is_some() {
            return false;
        }
        if !self
            .store
            .fits(self.sh, None, super::item_size(self.key.len(), 0), self.now)
        {
            return false;
        }
        let cas = if self.store.opts.use_cas {
            self.store.next_cas()
        } else {
            0
        };
        let item = make_item(self.key, 0, exptime_rel, self.now, cas, &[]);
        let i = self.store.insert(self.sh, self.h, None, item);
        if key_binary {
            self.sh.slots[i as usize].meta.bits |= KEY_BINARY;
        }
        self.idx = Some(i);
        true
    }
    /// LRU bump of a fetch: marks the item fetched and accessed now.
    pub fn bump(&mut self) {
        if let Some(i) = self.idx {
            lru_remove(self.sh, i);
            lru_push_front(self.sh, i);
            let now = self.now;
            self.sh.slots[i as usize].meta.bump(now);
        }
    }
    /// A copy of the live item's value; None if it is on flash and not read yet (the
    /// request is then executed again once it is: change nothing before asking).
    pub fn value(&mut self) -> Option<Vec<u8>> {
        let i = self.idx?;
        let v = self
            .store
            .view(self.sh, self.h, i, true, |it| it.value().to_vec());
        (!io::pending_needs()).then_some(v)
    }

    /// Counts a hit on the live item in its class (`touch`: a touch hit).
    pub fn count_hit(&mut self, touch: bool) {
        if let Some(i) = self.idx {
            self.store.count_hit(self.sh, i, touch);
        }
    }

    /// Removes the live item, counted as a delete.
    pub fn delete(&mut self) {
        if let Some(i) = self.idx {
            let cls = self.sh.slots[i as usize].meta.cls.into();
            self.store.class_mut(self.sh, cls).delete_hits += 1;
        }
        self.unlink();
    }

    /// Removes the live item.
    pub fn unlink(&mut self) {
        if let Some(i) = self.idx.take() {
            self.store.unlink(self.sh, self.h, i);
        }
    }
    /// memcached's class id of the live item.
    pub fn class(&self) -> usize {
        self.item().map_or(0, |it| self.store.class_of(&it).0)
    }
    pub fn ntotal(&self) -> usize {
        self.item().map_or(0, |it| self.store.class_of(&it).1)
    }
}

impl Store {
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
    /// win token; `extra`'s [`KEY_BINARY`] marks a key that was sent in base64.
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
        // memcached allocates the item for the data before it looks the key up
        self.pull_tail(&mut sh, now, 5);
        let old = self.find(&mut sh, h, key, now);
        // memcached counts the set in the class of the item it allocated for the data
        let cls =
            self.opts
                .slabs
                .class_of(item_total(key.len(), flags, data.len(), self.opts.use_cas));
        self.class_mut(&mut sh, cls.max(1)).cmd_set += 1;
        // With -C, items carry no CAS and a request's CAS is never seen (memcached's CAS_NONE).
        let req_cas = if self.opts.use_cas { req_cas } else { 0 };
        let mut meta_bits = extra.bits & KEY_BINARY;
        let (flags, exp, join) = match (mode, old) {
            (Mode::Add, Some(o)) => {
                // memcached bumps the existing item on a failed add.
                lru_remove(&mut sh, o);
                lru_push_front(&mut sh, o);
                return StoreResult::NotStored;
            }
            (Mode::Replace | Mode::Append | Mode::Prepend, None) => return StoreResult::NotStored,
            (Mode::Cas(_), None) => return StoreResult::NotFound,
            (Mode::Cas(_), Some(o)) => {
                let it = ItemRef::ram(sh.slots[o as usize].item.as_deref().unwrap());
                let (cas, exptime) = (it.cas(), it.exptime());
                let ocls = sh.slots[o as usize].meta.cls.into();
                if req_cas != 0 && req_cas == cas {
                    self.class_mut(&mut sh, ocls).cas_hits += 1;
                    (flags, exp, None)
                } else if req_cas != 0 && extra.stale() && req_cas < cas {
                    meta_bits |= STALE | (sh.slots[o as usize].meta.bits & WON);
                    self.class_mut(&mut sh, ocls).cas_hits += 1;
                    (flags, exptime, None)
                } else {
                    self.class_mut(&mut sh, ocls).cas_badval += 1;
                    return StoreResult::Exists;
                }
            }
            (Mode::Append | Mode::Prepend, Some(o)) => {
                let it = ItemRef::ram(sh.slots[o as usize].item.as_deref().unwrap());
                if req_cas != 0 && req_cas != it.cas() {
                    return StoreResult::Exists;
                }
                // the old value, read from flash if it lives there
                let (f, e) = (it.flags(), it.exptime());
                let prev = self.view(&mut sh, h, o, false, |it| it.value().to_vec());
                if io::pending_needs() {
                    // not read yet: nothing changes until it is (the request runs again)
                    return StoreResult::NotStored;
                }
                (f, e, Some((mode == Mode::Append, prev)))
            }
            _ => (flags, exp, None),
        };
        let vlen = data.len() + join.as_ref().map_or(0, |(_, p)| p.len());
        *vlen_out = vlen;
        if !self.fits(&mut sh, old, item_size(key.len(), vlen), now) {
            self.count_outofmemory(&mut sh, key.len(), flags, vlen);
            return StoreResult::NoMemory;
        }
        let cas = self.new_cas();
        let item = match &join {
            Some((true, prev)) => make_item(key, flags, exp, now, cas, &[prev, data]),
            Some((false, prev)) => make_item(key, flags, exp, now, cas, &[data, prev]),
            None => make_item(key, flags, exp, now, cas, &[data]),
        };
        let slot = self.insert(&mut sh, h, old, item);
        sh.slots[slot as usize].meta.bits |= meta_bits;
        StoreResult::Stored(cas)
    }

    /// memcached's class of an item and its `ITEM_ntotal`.
    pub fn class_of(&self, it: &ItemRef<'_>) -> (usize, usize) {
        let n = item_total(
            it.key().len(),
            it.flags(),
            it.value_len(),
            self.opts.use_cas,
        );
        (self.opts.slabs.class_of(n).max(1), n)
    }

    /// A fetch hit (`touch`: by gat/touch/mg T) on the item at `idx`.
    pub(super) fn count_hit(&self, sh: &mut Shard, idx: u32, touch: bool) {
        let cls = sh.slots[idx as usize].meta.cls.into();
        let c = self.class_mut(sh, cls);
        if touch {
            c.touch_hits += 1;
        } else {
            c.get_hits += 1;
        }
    }

    /// `watch fetchers`: a live item was looked up.
    pub(super) fn log_fetch(&self, sh: &Shard, idx: u32) {
        if crate::watch::WATCH.count() == 0 {
            return;
        }
        let slot = &sh.slots[idx as usize];
        let it = ItemRef::ram(slot.item.as_deref().unwrap());
        crate::watch::on_fetch(it.key(), Some((slot.meta.cls.into(), it.value_len())), None);
    }

    /// `watch fetchers`: a stored item was found gone, for the reason `gone()` gave (flushed
    /// before expired, as memcached's `do_item_get` logs it).
    pub(super) fn log_gone(&self, sh: &Shard, idx: u32, why: Gone) {
        if crate::watch::WATCH.count() == 0 {
            return;
        }
        let it = ItemRef::ram(sh.slots[idx as usize].item.as_deref().unwrap());
        let status = match why {
            Gone::Flushed => "flushed",
            Gone::Expired => "expired",
        };
        crate::watch::on_fetch(it.key(), None, Some(status));
    }

    /// `watch evictions`: the item at `idx` is evicted.
    pub(super) fn log_evicted(&self, sh: &Shard, idx: u32, now: u32) {
        if crate::watch::WATCH.count() == 0 {
            return;
        }
        let slot = &sh.slots[idx as usize];
        let it = ItemRef::ram(slot.item.as_deref().unwrap());
        let ttl = if it.exptime() != 0 {
            i64::from(it.exptime()) - i64::from(now)
        } else {
            -1
        };
        crate::watch::on_evict(
            it.key(),
            slot.meta.has(FETCHED),
            ttl,
            now.saturating_sub(slot.meta.atime),
            self.class_of(&it).0,
            it.value_len(),
        );
    }

    /// `watch mutations`: a store and its result.
    pub(super) fn log_store(
        &self,
        key: &[u8],
        mode: super::Mode,
        flags: u32,
        exptime: i64,
        vlen: usize,
        r: super::StoreResult,
    ) {
        if crate::watch::WATCH.count() == 0 {
            return;
        }
        let cmd = match mode {
            Mode::Add => "add",
            Mode::Set => "set",
            Mode::Replace => "replace",
            Mode::Append => "append",
            Mode::Prepend => "prepend",
            Mode::Cas(_) => "cas",
        };
        let now = self.now();
        let exp = self.realtime(exptime, now);
        let ttl = if exp == 0 { 0 } else { exp.wrapping_sub(now) };
        let cls = self
            .opts
            .slabs
            .class_of(item_total(key.len(), flags, vlen, self.opts.use_cas));
        crate::watch::on_store(key, cmd, r, ttl, cls, vlen);
    }

    /// The class of the item at `idx`, kept in its meta.
    pub(super) fn set_class(&self, sh: &mut Shard, idx: u32) {
        let (cls, _) = self.class_of(&ItemRef::ram(
            sh.slots[idx as usize].item.as_deref().unwrap(),
        ));
        sh.slots[idx as usize].meta.cls = cls as u8;
    }

    /// Removes `key` without counting a delete (a failed store's stale value).
    pub fn unlink_key(&self, key: &[u8]) {
        self.with_entry(key, |e| e.unlink());
    }

    pub(super) fn class_mut<'s>(&self, sh: &'s mut Shard, cls: usize) -> &'s mut ClassStats {
        if sh.classes.is_empty() {
            sh.classes = vec![ClassStats::default(); MAX_CLASSES];
        }
        &mut sh.classes[cls.min(MAX_CLASSES - 1)]
    }

    pub(super) fn count_evicted(&self, sh: &mut Shard, idx: u32, now: u32) {
        let slot = &sh.slots[idx as usize];
        let it = ItemRef::ram(slot.item.as_deref().unwrap());
        let (cls, _) = self.class_of(&it);
        let (nonzero, meta) = (it.exptime() != 0, slot.meta);
        let c = self.class_mut(sh, cls);
        c.evicted += 1;
        c.evicted_nonzero += u64::from(nonzero);
        c.evicted_time = now.saturating_sub(meta.atime);
        c.evicted_unfetched += u64::from(!meta.has(FETCHED));
    }

    pub(super) fn count_reclaimed(&self, sh: &mut Shard, idx: u32) {
        let slot = &sh.slots[idx as usize];
        let (cls, _) = self.class_of(&ItemRef::ram(slot.item.as_deref().unwrap()));
        let unfetched = !slot.meta.has(FETCHED);
        let c = self.class_mut(sh, cls);
        c.reclaimed += 1;
        c.expired_unfetched += u64::from(unfetched);
    }

    pub(super) fn count_outofmemory(&self, sh: &mut Shard, klen: usize, flags: u32, vlen: usize) {
        let n = item_total(klen, flags, vlen, self.opts.use_cas);
        let cls = self.opts.slabs.class_of(n).max(1);
        self.class_mut(sh, cls).outofmemory += 1;
    }

    /// Under `-M`, the bytes of every shard are counted together: the memory limit is the
    /// whole cache's, as memcached's is.
    pub(super) fn account(&self, delta: isize) {
        if !self.opts.evict {
            if delta >= 0 {
                self.used.fetch_add(delta as usize, Ordering::Relaxed);
            } else {
                self.used.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
            }
        }
    }

    /// Under `-M`: whether an item of `size` bytes (replacing `old`) fits in the cache's
    /// memory, after dropping expired items from this shard's LRU tail (memcached still
    /// reclaims those). Always true otherwise.
    pub(super) fn fits(&self, sh: &mut Shard, old: Option<u32>, size: usize, now: u32) -> bool {
        if self.opts.evict {
            return true;
        }
        let limit = self.shard_limit.load(Ordering::Relaxed) * self.shards.len();
        let freed = old.map_or(0, |o| {
            ItemRef::ram(sh.slots[o as usize].item.as_deref().unwrap()).size()
        });
        let over = |s: &Self| s.used.load(Ordering::Relaxed) + size > limit + freed;
        // `old` is live (found by `find`, which removes dead items): the tail stops there too
        let mut looked = 0;
        while over(self) && looked < 50 && self.pull_tail(sh, now, 1) == 1 {
            looked += 1;
        }
        !over(self)
    }

    /// Runs `f` with locked access to `key` (its live item, if any), as memcached's meta
    /// commands hold the item lock: nothing else changes the key meanwhile.
    pub fn with_entry<R>(&self, key: &[u8], f: impl FnOnce(&mut Entry<'_>) -> R) -> R {
        let h = self.hash(key);
        let now = self.now();
        let mut sh = self.shard(h);
        let idx = self.find(&mut sh, h, key, now);
        let mut e = Entry {
            store: self,
            sh: &mut sh,
            h,
            key,
            idx,
            now,
        };
        f(&mut e)
    }

    /// Calls `f` for every live item (shard by shard, each locked meanwhile) until it returns
    /// false: least recently used first, or most recently used first with `mru`. Expired and
    /// flushed items are skipped.
    pub fn for_each(&self, mru: bool, mut f: impl FnMut(&Seen<'_>) -> bool) {
        let now = self.now();
        for s in self.shards.iter() {
            let sh = s.lock().unwrap_or_else(|p| p.into_inner());
            // items with their value in RAM, then those with it on flash
            for list in [RAM, FLASH] {
                let mut i = if mru { sh.heads[list] } else { sh.tails[list] };
                while i != NIL {
                    let slot = &sh.slots[i as usize];
                    let it = ItemRef::ram(slot.item.as_deref().unwrap());
                    if self.live(slot.item.as_deref().unwrap(), now) {
                        let (cls, ntotal) = self.class_of(&it);
                        let seen = Seen {
                            item: it,
                            meta: slot.meta,
                            cls,
                            ntotal,
                        };
                        if !f(&seen) {
                            return;
                        }
                    }
                    i = if mru { slot.next } else { slot.prev };
                }
            }
        }
    }

    /// The LRU crawler: drops expired and flushed items of the given classes (all if empty);
    /// returns how many it checked and dropped.
    pub fn crawl(&self, classes: &[usize]) -> (u64, u64) {
        let now = self.now();
        let (mut checked, mut dropped) = (0, 0);
        for s in self.shards.iter() {
            let mut sh = s.lock().unwrap_or_else(|p| p.into_inner());
            for list in [RAM, FLASH] {
                let mut i = sh.tails[list];
                while i != NIL {
                    let prev = sh.slots[i as usize].prev;
                    let item = sh.slots[i as usize].item.as_deref().unwrap();
                    let (cls, _) = self.class_of(&ItemRef::ram(item));
                    if classes.is_empty() || classes.contains(&cls) {
                        checked += 1;
                        self.class_mut(&mut sh, cls).crawler_items_checked += 1;
                        let item = sh.slots[i as usize].item.as_deref().unwrap();
                        if !self.live(item, now) {
                            let h = self.hash(ItemRef::ram(item).key());
                            sh.reclaimed += 1;
                            self.class_mut(&mut sh, cls).crawler_reclaimed += 1;
                            self.unlink(&mut sh, h, i);
                            dropped += 1;
                        }
                    }
                    i = prev;
                }
            }
        }
        (checked, dropped)
    }

    /// Per class counters, index = class id (live items counted now).
    pub fn class_stats(&self) -> Vec<ClassStats> {
        let now = self.now();
        let mut out = vec![ClassStats::default(); MAX_CLASSES];
        let mut oldest = vec![u32::MAX; MAX_CLASSES];
        for s in self.shards.iter() {
            let sh = s.lock().unwrap_or_else(|p| p.into_inner());
            for (o, c) in out.iter_mut().zip(&sh.classes) {
                o.get_hits += c.get_hits;
                o.cmd_set += c.cmd_set;
                o.delete_hits += c.delete_hits;
                o.incr_hits += c.incr_hits;
                o.decr_hits += c.decr_hits;
                o.cas_hits += c.cas_hits;
                o.cas_badval += c.cas_badval;
                o.touch_hits += c.touch_hits;
                o.evicted += c.evicted;
                o.evicted_nonzero += c.evicted_nonzero;
                o.evicted_time = o.evicted_time.max(c.evicted_time);
                o.evicted_unfetched += c.evicted_unfetched;
                o.outofmemory += c.outofmemory;
                o.reclaimed += c.reclaimed;
                o.expired_unfetched += c.expired_unfetched;
                o.crawler_reclaimed += c.crawler_reclaimed;
                o.crawler_items_checked += c.crawler_items_checked;
            }
            for slot in sh.slots.iter() {
                let Some(item) = slot.item.as_deref() else {
                    continue;
                };
                let (cls, n) = self.class_of(&ItemRef::ram(item));
                out[cls].number += 1;
                out[cls].requested += n as u64;
                oldest[cls] = oldest[cls].min(slot.meta.atime);
            }
        }
        for (o, t) in out.iter_mut().zip(oldest) {
            if t != u32::MAX {
                o.age = now.saturating_sub(t);
            }
        }
        out
    }

    /// `cache_memlimit`: a new memory limit in bytes (items beyond it go as stores need room).
    pub fn set_limit(&self, limit: usize) {
        self.shard_limit
            .store(limit / self.shards.len(), Ordering::Relaxed);
    }

    /// A CAS for a changed item (0 with `-C`).
    pub(super) fn new_cas(&self) -> u64 {
        if self.opts.use_cas {
            self.next_cas()
        } else {
            0
        }
    }

    /// An incr or decr hit on the item at `idx`, in its class.
    pub(super) fn count_delta(&self, sh: &mut Shard, idx: u32, incr: bool) {
        let cls = sh.slots[idx as usize].meta.cls.into();
        let c = self.class_mut(sh, cls);
        if incr {
            c.incr_hits += 1;
        } else {
            c.decr_hits += 1;
        }
    }

    /// The CAS the next stored item gets.
    pub fn peek_next_cas(&self) -> u64 {
        self.next_cas.load(Ordering::Relaxed)
    }

    pub fn slabs(&self) -> &Slabs {
        &self.opts.slabs
    }
}
