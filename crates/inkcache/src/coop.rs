//! Cooperative mode, user side: a server that knows its own writes (inkcached) installs and
//! invalidates kernel cache entries itself, through [`KernelCache`], instead of the kernel
//! learning them from the server's replies (cgroup_skb egress).
//!
//! Also what such a server needs to find an attachment: [`find_attachment`].

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::pins;

/// The pin directory of the inkcache attachment on `iface` as seen from the calling process's
/// network namespace: `<iface>`, or `<iface>@<netns>` if it was attached with `--netns` naming
/// this namespace. None if inkcache is not attached there. A process started by `ip netns exec`
/// has a /sys of its own without the bpffs mount: it is looked up through init's root too.
pub fn find_attachment(iface: &str) -> Option<PathBuf> {
    let own = std::fs::metadata("/proc/self/ns/net").ok()?;
    let mut names = Vec::new();
    for e in std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(m) = std::fs::metadata(e.path()) else {
            continue;
        };
        if m.ino() == own.ino() && m.dev() == own.dev() {
            names.push(format!("{iface}@{}", e.file_name().to_string_lossy()));
        }
    }
    names.push(iface.to_string());
    for root in [
        pins::root(),
        PathBuf::from("/proc/1/root").join(pins::root().strip_prefix("/").ok()?),
    ] {
        for n in &names {
            let d = root.join(n);
            if d.join("meta").exists() {
                return Some(d);
            }
        }
    }
    None
}

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapHandle, ProgramInput};

use crate::skel::coop as sk;

/// Operations one worker batches before a [`Batch::commit`] (one syscall).
pub const BATCH: usize = 64;
const OP_INSTALL: u32 = 1;
const OP_INVALIDATE: u32 = 2;
const OP_FLUSH: u32 = 3;
use crate::abi::{ITEM_CAP, ITEM_MAX, KEY_MAX};

type Op = sk::types::coop_op;

/// The kernel cache of one attachment, driven by its server: batched install, invalidate and
/// flush through the `inkcache_coop` program, which changes the attachment's table (its pinned
/// maps) with the same functions as the XDP and TC programs.
pub struct KernelCache {
    /// The loaded object; owns the program and the reused maps.
    obj: Box<sk::InkcacheCoopSkel<'static>>,
    ops: *mut Op,
    ops_len: usize,
    workers: usize,
}

// SAFETY: `ops` points into a shared mapping of the coop_ops map that lives as long as the
// object; each worker writes only its own slice ([`Batch`] hands out disjoint slices), and the
// kernel reads a slice only during that worker's own test run.
unsafe impl Send for KernelCache {}
// SAFETY: as above.
unsafe impl Sync for KernelCache {}

impl Drop for KernelCache {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open`, no longer used (no Batch outlives us:
        // they hold an Arc).
        unsafe {
            libc::munmap(self.ops.cast(), self.ops_len);
        }
    }
}

/// CLOCK_MONOTONIC in ns (the clock of bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl KernelCache {
    /// Opens the attachment pinned at `dir` (see [`find_attachment`]) for `workers` batches.
    /// Fails if it was not attached with `--cooperative`.
    pub fn open(dir: &Path, workers: usize) -> Result<Arc<KernelCache>> {
        let info = pins::read_info(dir)?;
        if !info.cooperative {
            bail!(
                "inkcache on {} is not in cooperative mode (attach it with --cooperative)",
                info.iface
            );
        }
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = sk::InkcacheCoopSkelBuilder::default()
            .open(storage)
            .context("opening the cooperative-mode object")?;
        {
            let ro = open
                .maps
                .rodata_data
                .as_deref_mut()
                .context("cooperative-mode object has no rodata")?;
            ro.n_sets = info.layout.sets;
            ro.n_segs = info.layout.segs;
            ro.n_slots = info.layout.slots();
            ro.max_age_ns = info.max_age_secs.saturating_mul(1_000_000_000);
            ro.quarantine_ns = info.quarantine_ms.saturating_mul(1_000_000);
            ro.settle_max_ns = info.settle_max_secs.saturating_mul(1_000_000_000);
            ro.coop_mode = 1;
            ro.hash_seed = info
                .coop_seed
                .context("the attachment has no key hash seed (attached by an older inkcache)")?;
            ro.netns_cookie = info.netns_cookie;
        }
        open.maps
            .coop_ops
            .set_max_entries((workers * BATCH) as u32)?;
        for mut m in open.open_object_mut().maps_mut() {
            let name = m.name().to_string_lossy().into_owned();
            if !pins::MAPS.contains(&name.as_str()) {
                continue; // scratch, coop_ops, rodata: this object's own
            }
            let h = MapHandle::from_pinned_path(dir.join(&name))
                .with_context(|| format!("opening the pinned map {name}"))?;
            m.reuse_fd(h.as_fd())?;
        }
        let obj = Box::new(
            open.load()
                .context("loading the cooperative-mode program")?,
        );
        let ops_len = (workers * BATCH * std::mem::size_of::<Op>()).next_multiple_of(4096);
        // SAFETY: maps the mmap-able array coop_ops (BPF_F_MMAPABLE) of exactly
        // workers*BATCH entries of Op (a multiple of 8 bytes: no padding between entries);
        // the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ops_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                obj.maps.coop_ops.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of coop_ops");
        }
        Ok(Arc::new(KernelCache {
            obj,
            ops: p.cast(),
            ops_len,
            workers,
        }))
    }

    /// The batch of worker `w` (one per worker and thread).
    pub fn batch(self: &Arc<Self>, w: usize) -> Batch {
        assert!(w < self.workers);
        Batch {
            kc: self.clone(),
            first: w * BATCH,
            n: 0,
            done: Committed::default(),
        }
    }
}

/// Counts of what a commit did (for the server's stats).
#[derive(Default, Debug, Clone, Copy)]
pub struct Committed {
    pub installs: u64,
    pub invalidations: u64,
    pub flushes: u64,
    pub calls: u64,
}

/// One worker's operations waiting for [`Batch::commit`]. Filling a batch commits it.
pub struct Batch {
    kc: Arc<KernelCache>,
    first: usize,
    n: usize,
    /// What commits made by a full batch did since the last [`Batch::commit`].
    done: Committed,
}

impl Batch {
    fn slot(&mut self) -> Result<&mut Op> {
        if self.n == BATCH {
            let d = self.done;
            let c = self.commit()?;
            self.done = Committed {
                installs: d.installs + c.installs,
                invalidations: d.invalidations + c.invalidations,
                flushes: d.flushes + c.flushes,
                calls: d.calls + c.calls,
            };
        }
        let i = self.first + self.n;
        self.n += 1;
        // SAFETY: entry i is inside this worker's slice [first, first+BATCH) of the mapping
        // (checked at `batch`); nobody else writes it and the kernel reads it only during our
        // own commit.
        Ok(unsafe { &mut *self.kc.ops.add(i) })
    }

    /// Queues the install of `key` (value, flags, CAS as the server stores them) read at
    /// `read_ts` ([`monotonic_ns`] taken before the read), expiring at `exp_ns` (monotonic, 0:
    /// none). Items the kernel cannot hold are skipped (Ok(false)).
    pub fn install(
        &mut self,
        key: &[u8],
        flags: u32,
        value: &[u8],
        cas: u64,
        exp_ns: u64,
        read_ts: u64,
    ) -> Result<bool> {
        if key.is_empty() || key.len() > KEY_MAX {
            return Ok(false);
        }
        let mut line = Vec::with_capacity(key.len() + 48);
        line.extend_from_slice(b"VALUE ");
        line.extend_from_slice(key);
        line.extend_from_slice(format!(" {flags} {}", value.len()).as_bytes());
        let cas_at = line.len();
        line.extend_from_slice(format!(" {cas}\r\n").as_bytes());
        let cas_len = line.len() - 2 - cas_at;
        let len = line.len() + value.len() + 2;
        if len > ITEM_CAP || len - cas_len > ITEM_MAX {
            return Ok(false);
        }
        let op = self.slot()?;
        op.kind = OP_INSTALL;
        op.klen = key.len() as u32;
        op.len = len as u32;
        op.hdr = line.len() as u32;
        op.cas = cas_len as u32;
        op.exp_ns = exp_ns;
        op.read_ts = read_ts;
        op.data[..line.len()].copy_from_slice(&line);
        op.data[line.len()..line.len() + value.len()].copy_from_slice(value);
        op.data[len - 2..len].copy_from_slice(b"\r\n");
        Ok(true)
    }

    /// Queues the invalidation of `key` (after the server applied a write to it).
    pub fn invalidate(&mut self, key: &[u8]) -> Result<()> {
        if key.is_empty() || key.len() > KEY_MAX {
            return Ok(()); // the kernel never holds such a key
        }
        let op = self.slot()?;
        op.kind = OP_INVALIDATE;
        op.klen = key.len() as u32;
        op.data[..key.len()].copy_from_slice(key);
        Ok(())
    }

    /// Queues a flush of everything; with `delay_ns`, nothing is installed until then either
    /// (flush_all with a delay).
    pub fn flush(&mut self, delay_ns: u64) -> Result<()> {
        let op = self.slot()?;
        op.kind = OP_FLUSH;
        op.exp_ns = delay_ns;
        Ok(())
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// True if the next operation commits the batch first (a syscall).
    pub fn is_full(&self) -> bool {
        self.n == BATCH
    }

    /// Runs the queued operations, in order, in one BPF_PROG_TEST_RUN. Returns what it did,
    /// with what the commits of full batches did since the last call.
    pub fn commit(&mut self) -> Result<Committed> {
        let mut c = std::mem::take(&mut self.done);
        if self.n == 0 {
            return Ok(c);
        }
        for i in 0..self.n {
            // SAFETY: as in `slot`: our own slice.
            match unsafe { (*self.kc.ops.add(self.first + i)).kind } {
                OP_INSTALL => c.installs += 1,
                OP_INVALIDATE => c.invalidations += 1,
                _ => c.flushes += 1,
            }
        }
        // the packet: struct coop_req { first, count }, padded to an Ethernet header's length
        let mut pkt = [0u8; 64];
        pkt[0..4].copy_from_slice(&(self.first as u32).to_ne_bytes());
        pkt[4..8].copy_from_slice(&(self.n as u32).to_ne_bytes());
        // (a non-exhaustive struct: no struct literal from outside libbpf-rs)
        #[allow(clippy::field_reassign_with_default)]
        let input = {
            let mut i = ProgramInput::default();
            i.data_in = Some(&pkt);
            i
        };
        let out = self.kc.obj.progs.inkcache_coop.test_run(input);
        self.n = 0;
        let out = out
            .context("running the cooperative-mode batch")?
            .return_value;
        if out != 2 {
            bail!("cooperative-mode batch refused (XDP action {out})");
        }
        c.calls += 1;
        Ok(c)
    }
}
