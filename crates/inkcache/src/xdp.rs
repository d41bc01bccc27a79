//! XDP attachment: inkcache's program alone on an interface, or as one program of a dispatcher
//! shared with other XDP programs.
//!
//! Shared, it follows libxdp's multi-program protocol (version 2, the one xdp-tools 1.3+ speak),
//! so that `xdp-loader status` lists inkcache next to the others and xdp-loader, xdp-filter or any
//! libxdp user can add and remove their programs around it:
//! - the dispatcher (`bpf/inkcache_dispatcher.bpf.c`) is the interface's XDP program; each
//!   component program replaces one of its slot functions (an freplace/EXT program, linked by a
//!   `bpf_link`), or its entry point when it is alone;
//! - the components' programs and links are pinned as `progN-prog` and `progN-link` in
//!   `/sys/fs/bpf/xdp/dispatch-IFINDEX-DISPATCHERID/`, under a `flock` of `/sys/fs/bpf/xdp`;
//! - adding or removing a program builds a new dispatcher with the new set (sorted by run
//!   priority, then name), links every component to it, pins it, swaps it in on the interface
//!   atomically (`XDP_FLAGS_REPLACE`), then unpins the old one. A change made meanwhile by someone
//!   else makes the swap fail and nothing changes.
//!
//! Detach is exact either way: alone, the program goes only if it is still the one attached;
//! shared, only inkcache's slot goes and the others keep running in a new dispatcher (the last
//! one out takes the dispatcher away).
use std::{
    ffi::CString,
    fs,
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    sync::OnceLock,
};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{
    libbpf_sys,
    skel::{OpenSkel, SkelBuilder},
    MapCore, MapFlags, MapHandle, OpenObject, Program, ProgramType,
};

use crate::{skel, sys, Error};

/// Where the XDP program is attached in driver (native) or generic (skb) mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpMode {
    /// Native (driver) mode if the driver supports it, generic otherwise.
    Auto,
    Native,
    Generic,
}

/// How inkcache's XDP program goes on an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpAttach {
    /// Through a libxdp dispatcher when the kernel can load extension (freplace) programs, alone
    /// otherwise.
    Auto,
    /// Always through a libxdp dispatcher (shares the interface with other XDP programs).
    Dispatcher,
    /// Alone: the interface's only XDP program.
    Single,
}

/// Run priority inkcache takes in a dispatcher when none is given (libxdp's default for programs
/// that state none; lower runs first: xdp-filter, at 10, filters before inkcache answers).
pub const DEFAULT_PRIORITY: u32 = 50;
/// Slots of a dispatcher.
pub const SLOTS: usize = 10;
const MAGIC: u8 = 236;
const VERSION: u8 = 2;
/// What an empty slot returns; always chained on.
const SLOT_RETVAL: u32 = 31;
const XDP_PASS: u32 = 2;
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const BPF_F_RDONLY_PROG: u32 = 1 << 7;
/// Size of the dispatcher's configuration (version 2).
const CONFIG_LEN: usize = 4 + 3 * 4 * SLOTS;

const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_FLAGS_REPLACE: u32 = 1 << 4;

fn mode_flags(mode: &str) -> u32 {
    if mode == "generic" {
        XDP_FLAGS_SKB_MODE
    } else {
        XDP_FLAGS_DRV_MODE
    }
}

fn errno(r: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(if r < 0 { -r } else { r })
}

/// The XDP programs attached to an interface: (id, "native" or "generic"), if any.
pub fn current(ifindex: u32) -> Result<Option<(u32, &'static str)>> {
    let mut q = libbpf_sys::bpf_xdp_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `q` is a valid, sized options struct that lives across the call.
    let r = unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut q) };
    if r != 0 {
        return Err(errno(r)).context("querying XDP programs");
    }
    Ok(if q.drv_prog_id != 0 {
        Some((q.drv_prog_id, "native"))
    } else if q.skb_prog_id != 0 {
        Some((q.skb_prog_id, "generic"))
    } else if q.hw_prog_id != 0 {
        Some((q.hw_prog_id, "offloaded"))
    } else {
        None
    })
}

/// What the kernel says about a loaded program: its id, name, BTF id and map ids.
struct ProgInfo {
    id: u32,
    name: String,
    btf_id: u32,
    map_ids: Vec<u32>,
}

fn prog_info(fd: BorrowedFd<'_>) -> Result<ProgInfo> {
    let mut map_ids = vec![0u32; 8];
    let mut info = libbpf_sys::bpf_prog_info {
        nr_map_ids: map_ids.len() as u32,
        map_ids: map_ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` and `len` are valid for writes; the kernel writes at most `nr_map_ids` ids
    // into `map_ids`, which lives until after the call.
    let r = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if r != 0 {
        return Err(errno(r)).context("reading a program's info");
    }
    map_ids.truncate((info.nr_map_ids as usize).min(8));
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(ProgInfo {
        id: info.id,
        name: String::from_utf8_lossy(&name).into_owned(),
        btf_id: info.btf_id,
        map_ids,
    })
}

fn prog_fd_by_id(id: u32) -> Result<OwnedFd> {
    // SAFETY: plain syscall wrapper.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return Err(errno(fd)).with_context(|| format!("opening program {id}"));
    }
    // SAFETY: `fd` is a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Pins a program or link fd at `path` in bpffs.
pub(crate) fn pin_fd(fd: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: `fd` is a live BPF object fd for the duration of the borrow, and `c` is a
    // NUL-terminated path that outlives the call.
    let r = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
    if r != 0 {
        return Err(errno(r)).with_context(|| format!("pinning {}", path.display()));
    }
    Ok(())
}

/// The directory libxdp keeps dispatchers' pins in.
pub fn xdp_dir() -> PathBuf {
    Path::new(sys::BPFFS).join("xdp")
}

fn dispatch_dir(ifindex: u32, id: u32) -> PathBuf {
    xdp_dir().join(format!("dispatch-{ifindex}-{id}"))
}

/// libxdp's lock: an exclusive `flock` of `/sys/fs/bpf/xdp`, held while dispatchers' pins
/// change.
pub struct Lock {
    _dir: fs::File,
}

impl Lock {
    pub fn acquire() -> Result<Lock> {
        let dir = xdp_dir();
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .or_else(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let f = fs::File::open(&dir).with_context(|| format!("opening {}", dir.display()))?;
        // SAFETY: flock on a file descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", dir.display()));
        }
        Ok(Lock { _dir: f })
    }
}

/// One program of a dispatcher.
pub struct Component {
    pub prog: OwnedFd,
    pub id: u32,
    pub name: String,
    /// XDP actions that go on to the next program (without the empty slot's bit).
    pub chain_actions: u32,
    pub priority: u32,
    /// BPF_F_XDP_HAS_FRAGS if the program was loaded with it.
    pub flags: u32,
}

/// A libxdp dispatcher found on an interface, with its components.
pub struct Dispatcher {
    pub fd: OwnedFd,
    pub id: u32,
    pub mode: &'static str,
    pub components: Vec<Component>,
}

/// What is on an interface's XDP hook.
pub enum Current {
    Nothing,
    Dispatcher(Dispatcher),
    /// A program that is not a dispatcher (or one we cannot read: another version).
    Other {
        id: u32,
        name: String,
        why: String,
    },
}

/// Reads the interface's XDP hook; a dispatcher's components come from its pins (take the lock
/// first).
pub fn read(ifindex: u32) -> Result<Current> {
    let Some((id, mode)) = current(ifindex)? else {
        return Ok(Current::Nothing);
    };
    let fd = prog_fd_by_id(id)?;
    let info = prog_info(fd.as_fd())?;
    let other = |why: String| Current::Other {
        id,
        name: info.name.clone(),
        why,
    };
    if info.name != "xdp_dispatcher" || info.btf_id == 0 {
        return Ok(other("not a dispatcher".into()));
    }
    if info.map_ids.len() != 1 {
        return Ok(other("not a dispatcher (maps)".into()));
    }
    let map = MapHandle::from_map_id(info.map_ids[0]).context("opening the dispatcher's config")?;
    let mi = map.info()?.info;
    if mi.key_size != 4
        || mi.max_entries != 1
        || mi.map_flags & BPF_F_RDONLY_PROG == 0
        || mi.value_size < 2
    {
        return Ok(other("not a dispatcher (config map)".into()));
    }
    let conf = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("dispatcher config is empty")?;
    if conf[0] != MAGIC {
        return Ok(other(
            "a libxdp dispatcher of version 1 (not supported)".into(),
        ));
    }
    if conf[1] != VERSION || conf.len() != CONFIG_LEN {
        return Ok(other(format!(
            "a libxdp dispatcher of version {} (inkcache speaks version {VERSION})",
            conf[1]
        )));
    }
    let word = |arr: usize, i: usize| {
        let o = 4 + arr * 4 * SLOTS + 4 * i;
        u32::from_ne_bytes(conf[o..o + 4].try_into().unwrap())
    };
    let n = (conf[2] as usize).min(SLOTS);
    let dir = dispatch_dir(ifindex, id);
    let mut components = Vec::new();
    for i in 0..n {
        let pin = dir.join(format!("prog{i}-prog"));
        let prog = Program::fd_from_pinned_path(&pin)
            .with_context(|| format!("opening {} (dispatcher {id})", pin.display()))?;
        let pi = prog_info(prog.as_fd())?;
        components.push(Component {
            prog,
            id: pi.id,
            name: pi.name,
            chain_actions: word(0, i) & !(1 << SLOT_RETVAL),
            priority: word(1, i),
            flags: word(2, i) & BPF_F_XDP_HAS_FRAGS,
        });
    }
    Ok(Current::Dispatcher(Dispatcher {
        fd,
        id,
        mode,
        components,
    }))
}

/// The name of the function a component in `slot` of a dispatcher of `n` replaces.
fn slot_func(n: usize, slot: usize) -> String {
    if n == 1 {
        "xdp_dispatcher".into()
    } else {
        format!("prog{slot}")
    }
}

/// Loads a dispatcher for `slots` (priority order) without attaching it anywhere.
fn load_dispatcher<'o>(
    st: &'o mut MaybeUninit<OpenObject>,
    slots: &[(u32, u32, u32)], // (chain actions, priority, flags)
) -> Result<skel::dispatcher::InkcacheDispatcherSkel<'o>> {
    anyhow::ensure!(
        !slots.is_empty() && slots.len() <= SLOTS,
        "a dispatcher holds 1 to {SLOTS} programs"
    );
    let mut open = skel::dispatcher::InkcacheDispatcherSkelBuilder::default()
        .open(st)
        .context("opening the dispatcher object")?;
    let frags = slots.iter().all(|s| s.2 & BPF_F_XDP_HAS_FRAGS != 0);
    {
        let c = &mut open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("dispatcher object has no rodata")?
            .conf;
        c.magic = MAGIC;
        c.dispatcher_version = VERSION;
        c.num_progs_enabled = slots.len() as u8;
        c.is_xdp_frags = frags as u8;
        for (i, &(chain, prio, flags)) in slots.iter().enumerate() {
            c.chain_call_actions[i] = chain | (1 << SLOT_RETVAL);
            c.run_prios[i] = prio;
            c.program_flags[i] = flags & BPF_F_XDP_HAS_FRAGS;
        }
    }
    if frags {
        let p = &mut open.progs.xdp_dispatcher;
        p.set_flags(BPF_F_XDP_HAS_FRAGS);
    }
    open.load()
        .map_err(|e| anyhow!("loading the XDP dispatcher failed: {e}"))
}

/// The BTF id of function `name` in a loaded program's BTF.
fn func_btf_id(prog: BorrowedFd<'_>, name: &str) -> Result<u32> {
    let info = prog_info(prog)?;
    // SAFETY: loads a BTF object we free below; a null return is an error.
    let btf = unsafe { libbpf_sys::btf__load_from_kernel_by_id(info.btf_id) };
    if btf.is_null() {
        bail!("loading the dispatcher's BTF failed");
    }
    let c = CString::new(name)?;
    // SAFETY: `btf` is valid until freed, `c` is NUL-terminated.
    let id =
        unsafe { libbpf_sys::btf__find_by_name_kind(btf, c.as_ptr(), libbpf_sys::BTF_KIND_FUNC) };
    // SAFETY: `btf` came from btf__load_from_kernel_by_id and is not used after this.
    unsafe { libbpf_sys::btf__free(btf) };
    if id <= 0 {
        bail!("the dispatcher has no function {name}");
    }
    Ok(id as u32)
}

/// Links an extension program to `func` of the dispatcher `disp`.
fn link(prog: BorrowedFd<'_>, disp: BorrowedFd<'_>, func: &str) -> Result<OwnedFd> {
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        target_btf_id: func_btf_id(disp, func)?,
        ..Default::default()
    };
    // SAFETY: plain syscall wrapper; `opts` is a valid, sized struct living across the call.
    let fd = unsafe { libbpf_sys::bpf_link_create(prog.as_raw_fd(), disp.as_raw_fd(), 0, &opts) };
    if fd < 0 {
        return Err(errno(fd)).with_context(|| format!("linking a program to {func}"));
    }
    // SAFETY: `fd` is a new link fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn xdp_attach(ifindex: u32, fd: BorrowedFd<'_>, flags: u32, old: Option<BorrowedFd<'_>>) -> i32 {
    let opts = libbpf_sys::bpf_xdp_attach_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
        old_prog_fd: old.map_or(0, |o| o.as_raw_fd()),
        ..Default::default()
    };
    // SAFETY: plain netlink wrapper; `opts` is a valid, sized struct living across the call.
    unsafe { libbpf_sys::bpf_xdp_attach(ifindex as i32, fd.as_raw_fd(), flags, &opts) }
}

/// Removes the pins of a dispatcher (its components stay loaded while others hold them).
fn unpin_dir(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let _ = fs::remove_file(e.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// One program of a dispatcher being built: an existing component, or the new one (`None`: the
/// program given to `commit`).
struct Slot {
    prog: Option<OwnedFd>,
    name: String,
    chain_actions: u32,
    priority: u32,
    flags: u32,
}

/// A new dispatcher, loaded with inkcache's program among the existing ones (or without it, when
/// removing it), not yet on the interface.
pub struct NewDispatcher<'o> {
    skel: skel::dispatcher::InkcacheDispatcherSkel<'o>,
    ifindex: u32,
    old: Option<Dispatcher>,
    slots: Vec<Slot>,
    ours: Option<usize>,
}

/// How a component compares in run order: priority, then name (libxdp's order; further ties keep
/// the existing program first).
fn order(a: &Slot, b: &Slot) -> std::cmp::Ordering {
    a.priority
        .cmp(&b.priority)
        .then_with(|| a.name.cmp(&b.name))
}

impl<'o> NewDispatcher<'o> {
    /// Builds the dispatcher that adds a program named `name` with `priority` to what is on the
    /// interface now (`cur`: nothing or a dispatcher), for `commit` to swap in.
    pub fn adding(
        st: &'o mut MaybeUninit<OpenObject>,
        ifindex: u32,
        cur: Option<Dispatcher>,
        name: &str,
        priority: u32,
    ) -> Result<Self> {
        let mut slots: Vec<Slot> = Vec::new();
        if let Some(d) = &cur {
            for c in &d.components {
                slots.push(Slot {
                    prog: Some(c.prog.try_clone()?),
                    name: c.name.clone(),
                    chain_actions: c.chain_actions,
                    priority: c.priority,
                    flags: c.flags,
                });
            }
        }
        if slots.len() >= SLOTS {
            bail!("the interface's XDP dispatcher is full ({SLOTS} programs)");
        }
        let new = Slot {
            prog: None,
            name: name.to_string(),
            chain_actions: 1 << XDP_PASS,
            priority,
            flags: 0,
        };
        let at = slots
            .iter()
            .position(|s| order(&new, s) == std::cmp::Ordering::Less)
            .unwrap_or(slots.len());
        slots.insert(at, new);
        Self::build(st, ifindex, cur, slots)
    }

    /// Builds the dispatcher that keeps every component of `cur` but the program `id`.
    fn removing(
        st: &'o mut MaybeUninit<OpenObject>,
        ifindex: u32,
        cur: Dispatcher,
        id: u32,
    ) -> Result<Self> {
        let mut slots = Vec::new();
        for c in cur.components.iter().filter(|c| c.id != id) {
            slots.push(Slot {
                prog: Some(c.prog.try_clone()?),
                name: c.name.clone(),
                chain_actions: c.chain_actions,
                priority: c.priority,
                flags: c.flags,
            });
        }
        Self::build(st, ifindex, Some(cur), slots)
    }

    fn build(
        st: &'o mut MaybeUninit<OpenObject>,
        ifindex: u32,
        old: Option<Dispatcher>,
        slots: Vec<Slot>,
    ) -> Result<Self> {
        let cfg: Vec<(u32, u32, u32)> = slots
            .iter()
            .map(|s| (s.chain_actions, s.priority, s.flags))
            .collect();
        let skel = load_dispatcher(st, &cfg)?;
        let ours = slots.iter().position(|s| s.prog.is_none());
        Ok(NewDispatcher {
            skel,
            ifindex,
            old,
            slots,
            ours,
        })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.skel.progs.xdp_dispatcher.as_fd()
    }

    /// Where the new program goes: the dispatcher and the function it replaces (to load it as an
    /// extension of).
    pub fn target(&self) -> (BorrowedFd<'_>, String) {
        let slot = self.ours.unwrap_or(0);
        (self.fd(), slot_func(self.slots.len(), slot))
    }

    /// The dispatcher's mode when it replaces one ("native" or "generic").
    pub fn old_mode(&self) -> Option<&'static str> {
        self.old.as_ref().map(|d| d.mode)
    }

    /// Links every component (the new program `prog` in its slot), pins them, and puts the
    /// dispatcher on the interface in the first of `modes` it takes (replacing the old one
    /// exactly, in its mode), then unpins the old one. On failure the interface keeps what it
    /// had. Returns the mode.
    pub fn commit(
        self,
        prog: Option<BorrowedFd<'_>>,
        modes: &[&'static str],
    ) -> Result<&'static str> {
        let n = self.slots.len();
        let disp = self.fd();
        let id = Program::id_from_fd(disp)?;
        let dir = dispatch_dir(self.ifindex, id);
        let mut links = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let p = match &s.prog {
                Some(p) => p.as_fd(),
                None => prog.context("no program for the new slot")?,
            };
            let l = link(p, disp, &slot_func(n, i))
                .with_context(|| format!("linking {} to the new XDP dispatcher", s.name))?;
            links.push((p, l));
        }
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let pinned = (|| -> Result<()> {
            for (i, (p, l)) in links.iter().enumerate() {
                pin_fd(*p, &dir.join(format!("prog{i}-prog")))?;
                pin_fd(l.as_fd(), &dir.join(format!("prog{i}-link")))?;
            }
            Ok(())
        })();
        if let Err(e) = pinned {
            unpin_dir(&dir);
            return Err(e);
        }
        let mut r = -libc::EINVAL;
        let mut got = "";
        match &self.old {
            None => {
                for &m in modes {
                    r = xdp_attach(
                        self.ifindex,
                        disp,
                        mode_flags(m) | XDP_FLAGS_UPDATE_IF_NOEXIST,
                        None,
                    );
                    got = m;
                    if r == 0 {
                        break;
                    }
                }
            }
            Some(old) => {
                r = xdp_attach(
                    self.ifindex,
                    disp,
                    mode_flags(old.mode) | XDP_FLAGS_REPLACE,
                    Some(old.fd.as_fd()),
                );
                got = old.mode;
            }
        }
        if r != 0 {
            unpin_dir(&dir);
            return Err(errno(r)).context(if self.old.is_some() {
                "swapping in the new XDP dispatcher (the interface's XDP program changed meanwhile?)"
            } else {
                "attaching the XDP dispatcher"
            });
        }
        if let Some(old) = &self.old {
            unpin_dir(&dispatch_dir(self.ifindex, old.id));
        }
        Ok(got)
    }
}

/// Whether this kernel loads extension (freplace) programs into an XDP dispatcher (some refuse
/// them outright, e.g. kernels that do not allow BPF trampolines).
pub fn freplace_supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let mut st = MaybeUninit::uninit();
        let Ok(disp) = load_dispatcher(&mut st, &[(1 << XDP_PASS, DEFAULT_PRIORITY, 0)]) else {
            return false;
        };
        let mut pst = MaybeUninit::uninit();
        let Ok(mut open) = skel::pass::InkcachePassSkelBuilder::default().open(&mut pst) else {
            return false;
        };
        let p = &mut open.progs.inkcache_pass;
        p.set_prog_type(ProgramType::Ext);
        p.set_attach_type(libbpf_rs::ProgramAttachType::CgroupInetIngress); // 0: none
        if p.set_attach_target(
            disp.progs.xdp_dispatcher.as_fd().as_raw_fd(),
            Some("xdp_dispatcher".into()),
        )
        .is_err()
        {
            return false;
        }
        let ok = open.load().is_ok();
        ok
    })
}

/// Attaches `prog` alone to the interface in `mode`; returns the mode it got.
pub fn attach_single(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    iface: &str,
    mode: XdpMode,
) -> Result<&'static str> {
    if let Some((id, _)) = current(ifindex)? {
        return Err(Error::XdpBusy {
            iface: iface.into(),
            id,
        }
        .into());
    }
    let try_mode = |flags: u32| {
        let r = xdp_attach(ifindex, prog, flags | XDP_FLAGS_UPDATE_IF_NOEXIST, None);
        if r == 0 {
            Ok(())
        } else {
            Err(errno(r))
        }
    };
    match mode {
        XdpMode::Native => try_mode(XDP_FLAGS_DRV_MODE)
            .map(|_| "native")
            .map_err(|e| anyhow!("{iface}: native XDP attach failed: {e}")),
        XdpMode::Generic => try_mode(XDP_FLAGS_SKB_MODE)
            .map(|_| "generic")
            .map_err(|e| anyhow!("{iface}: generic XDP attach failed: {e}")),
        XdpMode::Auto => match try_mode(XDP_FLAGS_DRV_MODE) {
            Ok(()) => Ok("native"),
            Err(_) => try_mode(XDP_FLAGS_SKB_MODE)
                .map(|_| "generic")
                .map_err(|e| anyhow!("{iface}: XDP attach failed: {e}")),
        },
    }
}

/// Commits a dispatcher built with [`NewDispatcher::adding`] with `prog` in its new slot, in
/// `mode` as [`attach_single`] chooses it (a dispatcher already there keeps its own); returns
/// the mode.
pub fn attach_dispatched(
    nd: NewDispatcher<'_>,
    prog: BorrowedFd<'_>,
    iface: &str,
    mode: XdpMode,
) -> Result<&'static str> {
    let modes: &[&'static str] = match (nd.old_mode(), mode) {
        (Some(m), XdpMode::Native) if m != "native" => {
            bail!("{iface}: the XDP dispatcher there runs in {m} mode, not native")
        }
        (Some(m), XdpMode::Generic) if m != "generic" => {
            bail!("{iface}: the XDP dispatcher there runs in {m} mode, not generic")
        }
        (Some(_), _) => &[], // replaced in its own mode
        (None, XdpMode::Native) => &["native"],
        (None, XdpMode::Generic) => &["generic"],
        (None, XdpMode::Auto) => &["native", "generic"],
    };
    nd.commit(Some(prog), modes)
        .with_context(|| format!("{iface}: attaching through an XDP dispatcher"))
}

/// Removes the program `id` from the interface: alone (`how` "single", only if it is the one
/// attached) or from its dispatcher (the others stay). Whatever is not ours stays.
pub fn detach(ifindex: u32, how: &str, mode: &str, prog: BorrowedFd<'_>, id: u32) -> Result<()> {
    if how == "dispatcher" {
        let _lock = Lock::acquire()?;
        let Current::Dispatcher(d) = read(ifindex)? else {
            return Ok(());
        };
        if !d.components.iter().any(|c| c.id == id) {
            return Ok(());
        }
        if d.components.len() == 1 {
            // the last one out takes the dispatcher away
            let opts = libbpf_sys::bpf_xdp_attach_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
                old_prog_fd: d.fd.as_raw_fd(),
                ..Default::default()
            };
            // SAFETY: plain netlink wrapper; `opts` lives across the call.
            let r = unsafe {
                libbpf_sys::bpf_xdp_detach(
                    ifindex as i32,
                    mode_flags(d.mode) | XDP_FLAGS_REPLACE,
                    &opts,
                )
            };
            if r != 0 {
                return Err(errno(r)).context("detaching the XDP dispatcher");
            }
            unpin_dir(&dispatch_dir(ifindex, d.id));
            return Ok(());
        }
        let mut st = MaybeUninit::uninit();
        let mode = d.mode;
        let nd = NewDispatcher::removing(&mut st, ifindex, d, id)?;
        return nd.commit(None, &[mode]).map(|_| ());
    }
    if current(ifindex)?.map(|c| c.0) != Some(id) {
        return Ok(());
    }
    let opts = libbpf_sys::bpf_xdp_attach_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
        old_prog_fd: prog.as_raw_fd(),
        ..Default::default()
    };
    // SAFETY: plain netlink wrapper; `opts` lives across the call and `old_prog_fd` is open.
    let r = unsafe {
        libbpf_sys::bpf_xdp_detach(ifindex as i32, mode_flags(mode) | XDP_FLAGS_REPLACE, &opts)
    };
    if r != 0 {
        return Err(errno(r)).context("detaching the XDP program");
    }
    Ok(())
}

/// Whether the program `id` runs on the interface's XDP hook (alone or in a dispatcher).
pub fn is_attached(ifindex: u32, how: &str, id: u32) -> bool {
    if how == "dispatcher" {
        let Ok(_lock) = Lock::acquire() else {
            return false;
        };
        return matches!(read(ifindex), Ok(Current::Dispatcher(d)) if d.components.iter().any(|c| c.id == id));
    }
    current(ifindex).ok().flatten().map(|c| c.0) == Some(id)
}
