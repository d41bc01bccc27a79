//! The flash tier ("extstore"): values of items evicted from RAM are written to a storage file,
//!
//! Long file: the page format, the write buffers, reclaim and compaction share the tier's private
//! state (pages, generations, counters); splitting them would only widen their interfaces.
//!
//! while their keys, flags, CAS and expiry stay in RAM with a [`Ptr`] to the value.
//!
//! Layout: the file is cut into pages (`ext_page_size`, 64 MB); a page is filled by write
//! buffers (`ext_wbuf_size`, 4 MB) appended to in memory and written out whole, with O_DIRECT,
//! by the maintainer thread. Each item on flash is a header (magic, CRC32, page generation,
//! value length, CAS, key hash, key length), the key and the value, 8-byte aligned; an item never
//! crosses a write buffer. A pointer names (page, generation, offset, value length): a page that
//! is reclaimed gets a new generation, so every pointer into its old contents is stale and a
//! lookup through it is a miss, never another item's bytes (the header's generation, CAS, key
//! and CRC are checked again after every read).
//!
//! Reads never block a worker: values still in a write buffer are copied from memory, the others
//! are read by the worker's own io_uring ([`io`]), whose completions wake its event loop; the
//! request that needed them is executed again once they are in (see [`io::attempt`]).
//!
//! Space: when fewer than a reserve of pages are free, the maintainer reads the oldest page,
//! rewrites the items still live that were read since they were written (a second chance, as
//! memcached's compaction with `ext_drop_unread`), and frees it; a writer that finds no free page
//! at all drops the oldest page outright.

pub mod io;

use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Alignment of every O_DIRECT buffer, offset and length (covers 512 and 4096-byte sectors).
pub const ALIGN: usize = 4096;
const MAGIC: u32 = 0x3146_4b49; // "IKF1"
/// Bytes of an item's header on flash.
pub const FHDR: usize = 40;
const F_MAGIC: usize = 0;
const F_CRC: usize = 4;
const F_GEN: usize = 8;
const F_VLEN: usize = 12;
const F_CAS: usize = 16;
const F_KHASH: usize = 24;
const F_KLEN: usize = 32;

/// Bytes an item takes on flash.
pub fn item_len(klen: usize, vlen: usize) -> usize {
    (FHDR + klen + vlen + 7) & !7
}

/// Where an item's value lives on flash (kept in RAM in place of the value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ptr {
    pub page: u32,
    pub gen: u32,
    pub off: u32,
    pub vlen: u32,
}

impl Ptr {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.page.to_le_bytes());
        b[4..8].copy_from_slice(&self.gen.to_le_bytes());
        b[8..12].copy_from_slice(&self.off.to_le_bytes());
        b[12..16].copy_from_slice(&self.vlen.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Ptr {
        let r = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        Ptr {
            page: r(0),
            gen: r(4),
            off: r(8),
            vlen: r(12),
        }
    }
}

// ---- configuration ----

/// A validated flash configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtConfig {
    pub path: PathBuf,
    pub size: u64,
    pub page_size: u64,
    pub wbuf_size: usize,
    pub item_size: usize,
    pub recache_rate: u32,
    /// Seconds since stored after which a value goes to flash even without memory pressure
    /// (u32::MAX: never).
    pub item_age: u32,
    /// Write buffers in memory at most (the one being filled and those waiting to be written).
    pub wbufs: usize,
}

/// What `-o ext_*` keys and long options set, before validation.
#[derive(Clone, Debug, Default)]
pub struct ExtOpts {
    path: Option<String>,
    item_size: Option<usize>,
    page_size: Option<u64>,
    wbuf_size: Option<u64>,
    recache_rate: Option<u32>,
    item_age: Option<u32>,
}

/// memcached's size suffixes for ext_path: K, M, G, T (any case), or bytes.
fn parse_bytes(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        b't' | b'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// A size in megabytes as memcached takes it (a bare number), or with a K or M suffix (at least
/// 64 KB, a multiple of 4 KB: small pages and buffers for tests).
fn mb_or_size(key: &str, v: Option<&str>) -> Result<u64> {
    let v = v.with_context(|| format!("missing {key} argument"))?;
    let b = match v.as_bytes().last() {
        Some(b'k' | b'K' | b'm' | b'M') => parse_bytes(v),
        _ => v.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << 20)),
    }
    .with_context(|| format!("could not parse argument to {key}: {v:?}"))?;
    if b < 64 << 10 || b % ALIGN as u64 != 0 || b > 1 << 30 {
        bail!("{key} must be 64k to 1024m, in 4k steps");
    }
    Ok(b)
}

fn num<T: std::str::FromStr>(key: &str, v: Option<&str>) -> Result<T> {
    let v = v.with_context(|| format!("missing {key} argument"))?;
    v.parse()
        .ok()
        .with_context(|| format!("could not parse argument to {key}: {v:?}"))
}

/// Reads one `-o` key of the flash tier. Ok(false) if the key is not one of ours. Keys of
/// memcached's extstore that tune its own internals (threads, I/O depth, TTL buckets, sleep,
/// fragmentation thresholds) are accepted and ignored.
pub fn parse_opt(o: &mut ExtOpts, key: &str, val: Option<&str>) -> Result<bool> {
    match key {
        "ext_path" => {
            if o.path.is_some() {
                bail!("only one ext_path is supported");
            }
            o.path = Some(val.context("missing ext_path argument")?.to_string());
        }
        "ext_item_size" => o.item_size = Some(num(key, val)?),
        "ext_page_size" => {
            if o.path.is_some() {
                bail!("ext_page_size must come before ext_path");
            }
            o.page_size = Some(mb_or_size(key, val)?)
        }
        "ext_wbuf_size" => o.wbuf_size = Some(mb_or_size(key, val)?),
        "ext_recache_rate" => o.recache_rate = Some(num(key, val)?),
        "ext_item_age" => o.item_age = Some(num(key, val)?),
        "ext_threads" | "ext_io_depth" | "ext_low_ttl" | "ext_compact_under" | "ext_drop_under"
        | "ext_max_sleep" => {
            let _: u64 = num(key, val)?;
        }
        "ext_max_frag" | "slab_automove_freeratio" => {
            let _: f64 = num(key, val)?;
        }
        "ext_drop_unread" => {}
        _ => return Ok(false),
    }
    Ok(true)
}

impl ExtOpts {
    /// The validated configuration, None without ext_path. `max_item` is the item size limit.
    pub fn config(&self, max_item: usize) -> Result<Option<ExtConfig>> {
        let Some(p) = &self.path else {
            if self.item_size.is_some() || self.page_size.is_some() || self.wbuf_size.is_some() {
                bail!("ext_* options need ext_path=FILE:SIZE");
            }
            return Ok(None);
        };
        let (file, size) = p
            .rsplit_once(':')
            .with_context(|| format!("ext_path {p:?} is not FILE:SIZE"))?;
        let size = parse_bytes(size).with_context(|| format!("bad size in ext_path {p:?}"))?;
        if file.is_empty() {
            bail!("ext_path {p:?} has no file name");
        }
        // Default: 1/32 of the file (a power of two from 1 to 64 MB), so that reclaiming the
        // oldest page drops a small share of what flash holds.
        let page_size = self
            .page_size
            .unwrap_or_else(|| 1u64 << (size / 32).max(1).ilog2().clamp(20, 26));
        let wbuf_size = self.wbuf_size.unwrap_or((4 << 20).min(page_size)) as usize;
        if page_size == 0 || page_size > 1 << 30 {
            bail!("ext_page_size must be 1 to 1024 (MB)");
        }
        if wbuf_size == 0
            || wbuf_size as u64 > page_size
            || !page_size.is_multiple_of(wbuf_size as u64)
        {
            bail!("ext_wbuf_size must divide ext_page_size");
        }
        let pages = size / page_size;
        if pages < 2 {
            bail!("ext_path size {size} holds fewer than 2 pages of {page_size} bytes (ext_page_size)");
        }
        if pages > 1 << 20 {
            bail!("ext_path size {size} makes more than 2^20 pages; raise ext_page_size");
        }
        let item_size = self.item_size.unwrap_or(512);
        if item_size > max_item {
            bail!("ext_item_size {item_size} is larger than the item size limit (-I)");
        }
        Ok(Some(ExtConfig {
            path: PathBuf::from(file),
            size: pages * page_size,
            page_size,
            wbuf_size,
            item_size,
            recache_rate: self.recache_rate.unwrap_or(2000),
            item_age: self.item_age.unwrap_or(u32::MAX),
            wbufs: 4,
        }))
    }
}

// ---- aligned buffers ----

/// A heap buffer aligned for O_DIRECT, zero-filled.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8], like a Box<[u8]>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(ALIGN).next_multiple_of(ALIGN);
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("layout");
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

// ---- items on flash ----

/// Writes an item (header, key, value) at the start of `dst`, which holds `item_len` bytes.
fn put_item(dst: &mut [u8], gen: u32, cas: u64, khash: u64, key: &[u8], value: &[u8]) {
    let n = FHDR + key.len() + value.len();
    dst[F_MAGIC..F_MAGIC + 4].copy_from_slice(&MAGIC.to_le_bytes());
    dst[F_GEN..F_GEN + 4].copy_from_slice(&gen.to_le_bytes());
    dst[F_VLEN..F_VLEN + 4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    dst[F_CAS..F_CAS + 8].copy_from_slice(&cas.to_le_bytes());
    dst[F_KHASH..F_KHASH + 8].copy_from_slice(&khash.to_le_bytes());
    dst[F_KLEN..FHDR].fill(0);
    dst[F_KLEN] = key.len() as u8;
    dst[FHDR..FHDR + key.len()].copy_from_slice(key);
    dst[FHDR + key.len()..n].copy_from_slice(value);
    dst[n..item_len(key.len(), value.len())].fill(0);
    let crc = crc32fast::hash(&dst[F_GEN..n]);
    dst[F_CRC..F_CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// An item parsed from flash bytes (not yet checked against what RAM expects).
pub struct FlashItem<'a> {
    pub gen: u32,
    pub cas: u64,
    pub khash: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Bytes it takes (header, key, value, padding).
    pub len: usize,
}

/// Why an item read from flash was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// No item header here (never written, or overwritten).
    Magic,
    /// The checksum does not match.
    Crc,
}

/// Parses and checksums the item at the start of `b`. None if `b` is too short.
pub fn parse_item(b: &[u8]) -> Option<Result<FlashItem<'_>, Bad>> {
    if b.len() < FHDR {
        return None;
    }
    let r32 = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let r64 = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    if r32(F_MAGIC) != MAGIC {
        return Some(Err(Bad::Magic));
    }
    let klen = b[F_KLEN] as usize;
    let vlen = r32(F_VLEN) as usize;
    let n = FHDR + klen + vlen;
    if b.len() < n {
        // A length that runs past what was read: either corrupt or a short read.
        return if vlen > 1 << 30 {
            Some(Err(Bad::Crc))
        } else {
            None
        };
    }
    if crc32fast::hash(&b[F_GEN..n]) != r32(F_CRC) {
        return Some(Err(Bad::Crc));
    }
    Some(Ok(FlashItem {
        gen: r32(F_GEN),
        cas: r64(F_CAS),
        khash: r64(F_KHASH),
        key: &b[FHDR..FHDR + klen],
        value: &b[FHDR + klen..n],
        len: item_len(klen, vlen),
    }))
}

// ---- the store file ----

/// Counters of the flash tier, named after memcached's.
#[derive(Default)]
pub struct ExtStats {
    pub page_allocs: AtomicU64,
    pub page_evictions: AtomicU64,
    pub page_reclaims: AtomicU64,
    pub objects_evicted: AtomicU64,
    pub objects_read: AtomicU64,
    pub objects_written: AtomicU64,
    pub bytes_evicted: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    pub compact_lost: AtomicU64,
    pub compact_rescues: AtomicU64,
    pub compact_skipped: AtomicU64,
    pub io_queue: AtomicU64,
    /// Values evicted from RAM that could not go to flash (no write buffer free, tier down).
    pub write_skipped: AtomicU64,
    // per-request counters (memcached keeps these per thread; `stats reset` clears them)
    pub get_extstore: AtomicU64,
    pub get_aborted_extstore: AtomicU64,
    pub get_oom_extstore: AtomicU64,
    pub recache_from_extstore: AtomicU64,
    pub miss_from_extstore: AtomicU64,
    pub badcrc_from_extstore: AtomicU64,
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

struct Wbuf {
    page: u32,
    gen: u32,
    /// Offset of the buffer in its page.
    off: u64,
    buf: AlignedBuf,
    fill: usize,
}

impl Wbuf {
    /// The value of `p` if it lies in this buffer.
    fn value(&self, p: &Ptr) -> Option<&[u8]> {
        if p.page != self.page || p.gen != self.gen {
            return None;
        }
        let o = (p.off as u64).checked_sub(self.off)? as usize;
        if o + FHDR > self.fill {
            return None;
        }
        let klen = self.buf[o + F_KLEN] as usize;
        let s = o + FHDR + klen;
        self.buf.get(s..s + p.vlen as usize)
    }
}

struct WState {
    cur: Option<Wbuf>,
    /// Full buffers, oldest first, until the maintainer has written them.
    full: VecDeque<Arc<Wbuf>>,
    spare: Vec<AlignedBuf>,
    /// Buffers allocated in all (`cur`, `full`, `spare`).
    allocated: usize,
    free_pages: VecDeque<u32>,
    /// Pages filled or being filled, oldest first (the open one last).
    used: VecDeque<u32>,
    /// The page buffers are being cut from, and the offset of the next one.
    open: Option<(u32, u64)>,
    /// The page the maintainer is compacting (out of `used`).
    compacting: Option<u32>,
}

/// The flash tier: one storage file.
pub struct Ext {
    file: File,
    pub cfg: ExtConfig,
    npages: u32,
    gens: Box<[AtomicU32]>,
    live_items: Box<[AtomicU64]>,
    live_bytes: Box<[AtomicU64]>,
    st: Mutex<WState>,
    cv: Condvar,
    /// False once writing failed: no more values go to flash.
    writable: AtomicBool,
    pub stats: ExtStats,
    eio_logged: AtomicBool,
}

impl Ext {
    /// Opens (creates, sizes) the storage file with O_DIRECT and checks that a direct write and
    /// read work. The error says why the tier cannot run.
    pub fn open(cfg: ExtConfig) -> Result<Ext> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(&cfg.path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    anyhow::anyhow!(
                        "{}: the filesystem does not support O_DIRECT",
                        cfg.path.display()
                    )
                } else {
                    anyhow::anyhow!("{}: {e}", cfg.path.display())
                }
            })?;
        // SAFETY: fallocate on a valid fd with a non-negative range.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, cfg.size as libc::off_t) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                file.set_len(cfg.size)
                    .with_context(|| format!("{}: sizing to {}", cfg.path.display(), cfg.size))?;
            } else {
                bail!("{}: reserving {} bytes: {e}", cfg.path.display(), cfg.size);
            }
        }
        // A filesystem may take the flag and still refuse direct I/O: try it once.
        let mut probe = AlignedBuf::new(ALIGN);
        probe[..8].copy_from_slice(b"inkcache");
        file.write_all_at(&probe, 0)
            .and_then(|_| file.read_exact_at(&mut probe, 0))
            .with_context(|| format!("{}: direct I/O", cfg.path.display()))?;
        let npages = (cfg.size / cfg.page_size) as u32;
        let n = npages as usize;
        Ok(Ext {
            file,
            npages,
            gens: (0..n).map(|_| AtomicU32::new(1)).collect(),
            live_items: (0..n).map(|_| AtomicU64::new(0)).collect(),
            live_bytes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            st: Mutex::new(WState {
                cur: None,
                full: VecDeque::new(),
                spare: Vec::new(),
                allocated: 0,
                free_pages: (0..npages).collect(),
                used: VecDeque::new(),
                open: None,
                compacting: None,
            }),
            cv: Condvar::new(),
            writable: AtomicBool::new(true),
            stats: ExtStats::default(),
            eio_logged: AtomicBool::new(false),
            cfg,
        })
    }

    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True if `p` points into the current contents of its page.
    pub fn valid(&self, p: &Ptr) -> bool {
        self.gens
            .get(p.page as usize)
            .is_some_and(|g| g.load(Ordering::Acquire) == p.gen)
    }

    /// Values of at least this size may go to flash; larger than this never can.
    pub fn fits(&self, klen: usize, vlen: usize) -> bool {
        vlen >= self.cfg.item_size && item_len(klen, vlen) <= self.cfg.wbuf_size
    }

    pub fn writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed)
    }

    /// Logs one line the first time the tier fails, and stops writing to it.
    pub fn fail(&self, what: &str, e: &std::io::Error) {
        self.writable.store(false, Ordering::Relaxed);
        if !self.eio_logged.swap(true, Ordering::Relaxed) {
            eprintln!(
                "inkcached: flash tier {}: {what}: {e}; values stay in RAM from now on",
                self.cfg.path.display()
            );
        }
    }

    /// Appends an item to the current write buffer; None when it cannot go to flash now (no
    /// buffer free, tier failed), in which case the caller evicts it.
    pub fn append(&self, khash: u64, key: &[u8], cas: u64, value: &[u8]) -> Option<Ptr> {
        if !self.writable() || !self.fits(key.len(), value.len()) {
            return None;
        }
        let need = item_len(key.len(), value.len());
        let mut st = self.lock();
        if st
            .cur
            .as_ref()
            .is_none_or(|c| c.fill + need > self.cfg.wbuf_size)
        {
            if let Some(c) = st.cur.take() {
                st.full.push_back(Arc::new(c));
                self.cv.notify_one();
            }
            match self.new_wbuf(&mut st) {
                Some(b) => st.cur = Some(b),
                None => {
                    bump(&self.stats.write_skipped, 1);
                    return None;
                }
            }
        }
        let c = st.cur.as_mut().unwrap();
        let at = c.fill;
        put_item(&mut c.buf[at..at + need], c.gen, cas, khash, key, value);
        c.fill += need;
        let p = Ptr {
            page: c.page,
            gen: c.gen,
            off: (c.off + at as u64) as u32,
            vlen: value.len() as u32,
        };
        drop(st);
        bump(&self.live_items[p.page as usize], 1);
        bump(&self.live_bytes[p.page as usize], need as u64);
        bump(&self.stats.objects_written, 1);
        bump(&self.stats.bytes_written, need as u64);
        Some(p)
    }

    /// A fresh write buffer at the next free place in the open page (opening a page, and
    /// dropping the oldest one if none is free).
    fn new_wbuf(&self, st: &mut WState) -> Option<Wbuf> {
        let buf = match st.spare.pop() {
            Some(b) => b,
            None if st.allocated < self.cfg.wbufs => {
                st.allocated += 1;
                AlignedBuf::new(self.cfg.wbuf_size)
            }
            None => return None,
        };
        let (page, off) = match st.open {
            Some((p, off)) if off < self.cfg.page_size => (p, off),
            _ => {
                let p = match st.free_pages.pop_front() {
                    Some(p) => p,
                    None => match self.drop_oldest(st) {
                        Some(p) => p,
                        None => {
                            st.spare.push(buf);
                            return None;
                        }
                    },
                };
                bump(&self.stats.page_allocs, 1);
                st.used.push_back(p);
                (p, 0)
            }
        };
        st.open = Some((page, off + self.cfg.wbuf_size as u64));
        let mut buf = buf;
        buf.fill(0);
        Some(Wbuf {
            page,
            gen: self.gens[page as usize].load(Ordering::Acquire),
            off,
            buf,
            fill: 0,
        })
    }

    /// Takes the oldest full page away from its items (a new generation: every pointer into it
    /// is now stale). Never the open page.
    fn drop_oldest(&self, st: &mut WState) -> Option<u32> {
        let open = st.open.map(|(p, _)| p);
        let i = st.used.iter().position(|&p| Some(p) != open);
        let p = match i {
            Some(i) => st.used.remove(i).unwrap(),
            // Only the page being compacted is left: take it, the maintainer notices.
            None => st.compacting.take()?,
        };
        // Buffers of this page still waiting to be written would land on the new contents:
        // they are written first (the maintainer writes in order), and their items are stale.
        self.retire(p);
        Some(p)
    }

    /// Bumps a page's generation and forgets what lived there.
    fn retire(&self, p: u32) {
        let i = p as usize;
        self.gens[i].fetch_add(1, Ordering::AcqRel);
        let items = self.live_items[i].swap(0, Ordering::Relaxed);
        let bytes = self.live_bytes[i].swap(0, Ordering::Relaxed);
        if items > 0 {
            bump(&self.stats.page_evictions, 1);
            bump(&self.stats.objects_evicted, items);
            bump(&self.stats.bytes_evicted, bytes);
        } else {
            bump(&self.stats.page_reclaims, 1);
        }
    }

    /// An item at `p` is no longer referenced (deleted, replaced, evicted from RAM).
    pub fn release(&self, p: &Ptr, klen: usize) {
        if self.valid(p) {
            let i = p.page as usize;
            let n = item_len(klen, p.vlen as usize) as u64;
            let _ = self.live_items[i]
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
            let _ = self.live_bytes[i]
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(n));
        }
    }

    /// Copies the value at `p` if it is still in a write buffer in memory.
    pub fn read_buffered(&self, p: &Ptr, out: &mut Vec<u8>) -> bool {
        let st = self.lock();
        let found = st
            .cur
            .as_ref()
            .and_then(|c| c.value(p))
            .or_else(|| st.full.iter().rev().find_map(|b| b.value(p)));
        match found {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                true
            }
            None => false,
        }
    }

    /// True if the value at `p` is still in a write buffer (not on disk yet).
    pub fn is_buffered(&self, p: &Ptr) -> bool {
        let st = self.lock();
        st.cur.as_ref().and_then(|c| c.value(p)).is_some()
            || st.full.iter().any(|b| b.value(p).is_some())
    }

    /// Byte offset of `p` in the file.
    pub fn file_offset(&self, p: &Ptr) -> u64 {
        p.page as u64 * self.cfg.page_size + p.off as u64
    }

    /// Writes out the full buffers (the maintainer's job). Returns how many.
    fn write_full(&self) -> usize {
        let mut n = 0;
        loop {
            let Some(b) = self.lock().full.front().cloned() else {
                return n;
            };
            let at = b.page as u64 * self.cfg.page_size + b.off;
            if let Err(e) = self.file.write_all_at(&b.buf, at) {
                self.fail("write", &e);
                // Its items are lost: make every pointer into the page stale.
                if self.gens[b.page as usize].load(Ordering::Acquire) == b.gen {
                    self.retire(b.page);
                }
            }
            let mut st = self.lock();
            drop(st.full.pop_front());
            // Readers copy under the lock and keep no reference: the buffer is ours again.
            if let Ok(w) = Arc::try_unwrap(b) {
                st.spare.push(w.buf);
            }
            n += 1;
        }
    }

    /// Pages free and in use.
    pub fn pages(&self) -> (u64, u64) {
        let st = self.lock();
        let free = st.free_pages.len() as u64;
        (free, self.npages as u64 - free)
    }

    pub fn objects_used(&self) -> (u64, u64) {
        let items = self
            .live_items
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum();
        let bytes = self
            .live_bytes
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum();
        (items, bytes)
    }

    pub fn limit(&self) -> u64 {
        self.npages as u64 * self.cfg.page_size
    }

    /// Resets the per-request counters (`stats reset`).
    pub fn reset(&self) {
        for a in [
            &self.stats.get_extstore,
            &self.stats.get_aborted_extstore,
            &self.stats.get_oom_extstore,
            &self.stats.recache_from_extstore,
            &self.stats.miss_from_extstore,
            &self.stats.badcrc_from_extstore,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// What the maintainer asks the store about an item found on a page it compacts.
pub trait Rescuer {
    /// If `key` is still an item whose value is at `old` and it deserves another round (read
    /// since written), moves it to a new place on flash.
    fn rescue(&self, khash: u64, key: &[u8], old: &Ptr, value: &[u8]) -> Rescue;
}

/// What became of an item the maintainer found on a page it compacts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rescue {
    /// Rewritten elsewhere.
    Moved,
    /// Gone, replaced, or not read since it was written: left to go with its page.
    Skipped,
    /// No write buffer was free.
    NoRoom,
}

impl Ext {
    /// Free pages the maintainer keeps ready.
    fn reserve(&self) -> usize {
        if self.npages <= 4 {
            1
        } else {
            2
        }
    }

    /// The maintainer: writes out full buffers and compacts the oldest page when free pages run
    /// short. Runs until `stop`.
    pub fn maintain(&self, store: &dyn Rescuer, stop: &AtomicBool) {
        let mut page = AlignedBuf::new(self.cfg.wbuf_size);
        while !stop.load(Ordering::Relaxed) {
            self.write_full();
            if self.writable() && self.compact_one(store, &mut page) {
                continue;
            }
            let st = self.lock();
            if st.full.is_empty() {
                let _ = self
                    .cv
                    .wait_timeout(st, Duration::from_millis(100))
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        self.write_full();
    }

    /// Compacts the oldest page if free pages are short; false if there was nothing to do.
    fn compact_one(&self, store: &dyn Rescuer, chunk: &mut AlignedBuf) -> bool {
        let (p, gen) = {
            let mut st = self.lock();
            if st.free_pages.len() >= self.reserve() || st.compacting.is_some() {
                return false;
            }
            let open = st.open.map(|(p, _)| p);
            let Some(i) = st.used.iter().position(|&p| Some(p) != open) else {
                return false;
            };
            // Its buffers must be on disk before it is read back.
            let p = st.used[i];
            if st.full.iter().any(|b| b.page == p) {
                return false;
            }
            st.used.remove(i);
            st.compacting = Some(p);
            (p, self.gens[p as usize].load(Ordering::Acquire))
        };
        let wb = self.cfg.wbuf_size;
        let base = p as u64 * self.cfg.page_size;
        'chunks: for c in 0..(self.cfg.page_size / wb as u64) {
            // Write buffers that filled meanwhile go first: workers wait for them.
            self.write_full();
            if self.lock().compacting != Some(p) {
                break;
            }
            if let Err(e) = self.file.read_exact_at(chunk, base + c * wb as u64) {
                self.fail("read while compacting", &e);
                break;
            }
            let mut o = 0;
            while o + FHDR <= wb {
                match parse_item(&chunk[o..]) {
                    Some(Ok(it)) => {
                        let len = it.len;
                        if it.gen == gen {
                            let old = Ptr {
                                page: p,
                                gen,
                                off: (c * wb as u64) as u32 + o as u32,
                                vlen: it.value.len() as u32,
                            };
                            if !self.valid(&old) {
                                break 'chunks;
                            }
                            let mut r = store.rescue(it.khash, it.key, &old, it.value);
                            if r == Rescue::NoRoom {
                                self.write_full();
                                r = store.rescue(it.khash, it.key, &old, it.value);
                            }
                            match r {
                                Rescue::Moved => bump(&self.stats.compact_rescues, 1),
                                Rescue::Skipped => bump(&self.stats.compact_skipped, 1),
                                Rescue::NoRoom => bump(&self.stats.compact_lost, 1),
                            }
                        }
                        o += len;
                    }
                    // The rest of this buffer was never filled.
                    Some(Err(Bad::Magic)) | None => break,
                    Some(Err(Bad::Crc)) => {
                        bump(&self.stats.compact_lost, 1);
                        break;
                    }
                }
            }
        }
        let mut st = self.lock();
        if st.compacting == Some(p) {
            st.compacting = None;
            self.retire(p);
            st.free_pages.push_back(p);
        }
        true
    }
}

/// Opens the tier for `cfg`, or says in one line why it runs without it.
pub fn open_or_log(cfg: Option<ExtConfig>) -> Option<Arc<Ext>> {
    let cfg = cfg?;
    if let Err(e) = io::probe() {
        eprintln!("inkcached: flash tier disabled (io_uring: {e}); serving from RAM only");
        return None;
    }
    // A file size limit (ulimit -f) must fail a write, not kill the server.
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    match Ext::open(cfg) {
        Ok(e) => Some(Arc::new(e)),
        Err(e) => {
            eprintln!("inkcached: flash tier disabled ({e:#}); serving from RAM only");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(list: &[(&str, Option<&str>)]) -> Result<ExtOpts> {
        let mut o = ExtOpts::default();
        for (k, v) in list {
            assert!(parse_opt(&mut o, k, *v)?, "{k} not ours");
        }
        Ok(o)
    }

    #[test]
    fn config_parsing() {
        let c = opts(&[("ext_path", Some("/x/f:1G"))])
            .unwrap()
            .config(1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(c.path, PathBuf::from("/x/f"));
        assert_eq!(c.size, 1 << 30);
        assert_eq!(c.page_size, 32 << 20);
        assert_eq!(c.wbuf_size, 4 << 20);
        assert_eq!(c.item_size, 512);
        let c = opts(&[
            ("ext_page_size", Some("1")),
            ("ext_wbuf_size", Some("1")),
            ("ext_path", Some("/a:b:10m")),
            ("ext_item_size", Some("100")),
            ("ext_threads", Some("4")),
            ("ext_max_frag", Some("0.5")),
        ])
        .unwrap()
        .config(1 << 20)
        .unwrap()
        .unwrap();
        assert_eq!(c.path, PathBuf::from("/a:b"));
        assert_eq!((c.size, c.page_size, c.item_size), (10 << 20, 1 << 20, 100));
        let c = opts(&[
            ("ext_page_size", Some("256k")),
            ("ext_wbuf_size", Some("64K")),
            ("ext_path", Some("/f:1m")),
        ])
        .unwrap()
        .config(1 << 20)
        .unwrap()
        .unwrap();
        assert_eq!((c.page_size, c.wbuf_size), (256 << 10, 64 << 10));
        assert!(opts(&[("ext_wbuf_size", Some("1k"))]).is_err());
        let c = opts(&[("ext_path", Some("/x:64m"))])
            .unwrap()
            .config(1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!((c.page_size, c.wbuf_size), (2 << 20, 2 << 20));
        assert!(
            opts(&[("ext_page_size", Some("64")), ("ext_path", Some("/x:64m"))])
                .unwrap()
                .config(1 << 20)
                .is_err()
        ); // one page
        assert!(opts(&[("ext_path", Some("/x"))])
            .unwrap()
            .config(1 << 20)
            .is_err());
        assert!(opts(&[("ext_path", Some("/x:1G")), ("ext_page_size", Some("1"))]).is_err());
        assert!(opts(&[("ext_item_size", Some("x"))]).is_err());
        assert!(opts(&[("ext_item_size", Some("600"))])
            .unwrap()
            .config(1 << 20)
            .is_err()); // without a path
        let mut o = ExtOpts::default();
        assert!(!parse_opt(&mut o, "hashpower", Some("20")).unwrap());
        assert!(
            opts(&[("ext_page_size", Some("3")), ("ext_wbuf_size", Some("2"))])
                .and_then(|mut o| {
                    o.path = Some("/x:1g".into());
                    o.config(1 << 20)
                })
                .is_err()
        );
    }

    #[test]
    fn item_roundtrip_and_corruption() {
        let key = b"some:key";
        let val: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let n = item_len(key.len(), val.len());
        let mut b = vec![0u8; n + 16];
        put_item(&mut b, 7, 42, 99, key, &val);
        let it = parse_item(&b).unwrap().unwrap();
        assert_eq!((it.gen, it.cas, it.khash, it.len), (7, 42, 99, n));
        assert_eq!(it.key, key);
        assert_eq!(it.value, &val[..]);
        assert!(parse_item(&b[..n - 8]).is_none());
        b[FHDR + 100] ^= 1;
        assert_eq!(parse_item(&b).unwrap().err(), Some(Bad::Crc));
        b[0] = 0;
        assert_eq!(parse_item(&b).unwrap().err(), Some(Bad::Magic));
    }

    #[test]
    fn ptr_encoding() {
        let p = Ptr {
            page: 3,
            gen: 9,
            off: 123456,
            vlen: 7000,
        };
        assert_eq!(Ptr::decode(&p.encode()), p);
    }
}
