//! TC attachment of the ingress and egress programs: tcx links on kernels that have them (Linux
//! 6.6+), clsact filters otherwise; chosen at attach and recorded, detached exactly.
//!
//! - tcx: a `bpf_link` per direction, appended to the interface's tcx chain (after the programs
//!   already there) and pinned as `link_tc_ingress`/`link_tc_egress` next to inkcache's other
//!   pins; detaching the link removes inkcache's program and nothing else.
//! - clsact: a cls_bpf filter (direct action) per direction with inkcache's fixed handle and
//!   priority; detach removes the filter at that handle and priority only if its program is
//!   still the one recorded.
use std::{
    ffi::CString,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::Path,
};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::{libbpf_sys, TcHookBuilder, TC_EGRESS, TC_INGRESS};

/// TC filter handle and priority of the egress and the ingress program (what detach looks for).
pub const TC_HANDLE: u32 = 0x1c4c;
pub const TC_PRIORITY: u32 = 0x1c4c;

/// How the TC programs are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TcMode {
    /// tcx where the kernel has it (6.6+), clsact otherwise.
    Auto,
    Tcx,
    Clsact,
}

/// Ingress (requests) or egress (replies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Ingress,
    Egress,
}

impl Dir {
    fn tcx_type(self) -> libbpf_sys::bpf_attach_type {
        match self {
            Dir::Ingress => libbpf_sys::BPF_TCX_INGRESS,
            Dir::Egress => libbpf_sys::BPF_TCX_EGRESS,
        }
    }
    fn clsact(self) -> libbpf_rs::TcAttachPoint {
        match self {
            Dir::Ingress => TC_INGRESS,
            Dir::Egress => TC_EGRESS,
        }
    }
    /// The name of the pin of a tcx link in an attachment's directory.
    pub fn link_pin(self) -> &'static str {
        match self {
            Dir::Ingress => "link_tc_ingress",
            Dir::Egress => "link_tc_egress",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dir::Ingress => "ingress",
            Dir::Egress => "egress",
        }
    }
}

fn errno(r: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(r.abs())
}

/// Whether this kernel has tcx (asks for the tcx programs of the interface).
pub fn tcx_supported(ifindex: u32) -> bool {
    let mut opts = libbpf_sys::bpf_prog_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `opts` is a valid, sized struct with no id arrays (only the count is asked for).
    let r = unsafe {
        libbpf_sys::bpf_prog_query_opts(ifindex as i32, libbpf_sys::BPF_TCX_INGRESS, &mut opts)
    };
    r == 0
}

/// The mode `want` resolves to on this kernel.
pub fn resolve(want: TcMode, ifindex: u32) -> Result<&'static str> {
    match want {
        TcMode::Clsact => Ok("clsact"),
        TcMode::Tcx if tcx_supported(ifindex) => Ok("tcx"),
        TcMode::Tcx => Err(crate::Error::KernelLacks("tcx (Linux 6.6+)".into()).into()),
        TcMode::Auto => Ok(if tcx_supported(ifindex) {
            "tcx"
        } else {
            "clsact"
        }),
    }
}

/// One TC program attached by [`attach`]; [`Attached::undo`] takes it away again.
pub enum Attached {
    Tcx(OwnedFd),
    Clsact(libbpf_rs::TcHook),
}

impl Attached {
    /// Pins a tcx link in `dir` (a clsact filter needs no pin).
    pub fn pin(&self, dir: &Path, d: Dir) -> Result<()> {
        match self {
            Attached::Tcx(link) => crate::xdp::pin_fd(link.as_fd(), &dir.join(d.link_pin())),
            Attached::Clsact(_) => Ok(()),
        }
    }

    pub fn undo(self) {
        match self {
            Attached::Tcx(link) => {
                // SAFETY: plain syscall wrapper on a link fd we own.
                unsafe { libbpf_sys::bpf_link_detach(link.as_raw_fd()) };
            }
            Attached::Clsact(mut hook) => {
                let _ = hook.detach();
            }
        }
    }
}

fn clsact_hook(prog: BorrowedFd<'_>, ifindex: u32, d: Dir) -> libbpf_rs::TcHook {
    TcHookBuilder::new(prog)
        .ifindex(ifindex as i32)
        .replace(false)
        .handle(TC_HANDLE)
        .priority(TC_PRIORITY)
        .hook(d.clsact())
}

/// Attaches `prog` to the interface's `d` hook in `mode` ("tcx" or "clsact").
pub fn attach(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    iface: &str,
    d: Dir,
    mode: &str,
) -> Result<Attached> {
    if mode == "tcx" {
        let opts = libbpf_sys::bpf_link_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
            ..Default::default()
        };
        // SAFETY: plain syscall wrapper; `opts` (no relative program: append) lives across the
        // call.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(prog.as_raw_fd(), ifindex as i32, d.tcx_type(), &opts)
        };
        if fd < 0 {
            return Err(anyhow!(
                "{iface}: attaching the TC {} program (tcx): {}",
                d.name(),
                errno(fd)
            ));
        }
        // SAFETY: `fd` is a new link fd nothing else owns.
        return Ok(Attached::Tcx(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    let mut hook = clsact_hook(prog, ifindex, d);
    if d == Dir::Ingress {
        hook.create()
            .with_context(|| format!("{iface}: creating the clsact qdisc"))?;
    }
    hook.attach()
        .map_err(|e| anyhow!("{iface}: attaching the TC {} program: {e}", d.name()))?;
    Ok(Attached::Clsact(hook))
}

/// The pinned tcx link at `dir/<pin>`, if it is still attached to the interface with `prog_id`.
fn pinned_link(dir: &Path, d: Dir, ifindex: u32, prog_id: u32) -> Option<OwnedFd> {
    let c = CString::new(dir.join(d.link_pin()).as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new fd nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = libbpf_sys::bpf_link_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
    // SAFETY: `info` and `len` are valid for writes during the call.
    let r = unsafe { libbpf_sys::bpf_link_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    // SAFETY: reading the tcx member of the union the kernel filled for a tcx link (plain u32s).
    let (link_if, at) = unsafe {
        (
            info.__bindgen_anon_1.tcx.ifindex,
            info.__bindgen_anon_1.tcx.attach_type,
        )
    };
    (r == 0 && info.prog_id == prog_id && link_if == ifindex && at == d.tcx_type()).then_some(fd)
}

/// Whether inkcache's program `prog_id` (pinned as `prog_pin` in `dir`) runs on the interface's
/// `d` hook, attached in `mode`.
pub fn is_attached(
    dir: &Path,
    prog_pin: &str,
    ifindex: u32,
    d: Dir,
    mode: &str,
    prog_id: u32,
) -> bool {
    if prog_id == 0 {
        return false;
    }
    if mode == "tcx" {
        return pinned_link(dir, d, ifindex, prog_id).is_some();
    }
    let Ok(fd) = libbpf_rs::Program::fd_from_pinned_path(dir.join(prog_pin)) else {
        return false;
    };
    clsact_hook(fd.as_fd(), ifindex, d).query().ok() == Some(prog_id)
}

/// Removes inkcache's program `prog_id` from the interface's `d` hook, and nothing else.
pub fn detach(
    dir: &Path,
    prog_pin: &str,
    ifindex: u32,
    iface: &str,
    d: Dir,
    mode: &str,
    prog_id: u32,
) -> Result<()> {
    if prog_id == 0 {
        return Ok(());
    }
    if mode == "tcx" {
        if let Some(link) = pinned_link(dir, d, ifindex, prog_id) {
            // SAFETY: plain syscall wrapper on a link fd we own.
            let r = unsafe { libbpf_sys::bpf_link_detach(link.as_raw_fd()) };
            if r != 0 {
                return Err(errno(r))
                    .with_context(|| format!("{iface}: detaching the TC {} link", d.name()));
            }
        }
        return Ok(());
    }
    let Ok(fd) = libbpf_rs::Program::fd_from_pinned_path(dir.join(prog_pin)) else {
        return Ok(());
    };
    let mut hook = clsact_hook(fd.as_fd(), ifindex, d);
    // only if the filter there is still ours
    if hook.query().ok() == Some(prog_id) {
        hook.detach()
            .with_context(|| format!("{iface}: detaching the TC {} program", d.name()))?;
    }
    Ok(())
}

/// The ids of the programs on the interface's tcx `d` hook, in run order (empty without tcx).
pub fn tcx_programs(ifindex: u32, d: Dir) -> Result<Vec<u32>> {
    let mut ids = vec![0u32; 64];
    let mut opts = libbpf_sys::bpf_prog_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_query_opts>() as _,
        prog_ids: ids.as_mut_ptr(),
        ..Default::default()
    };
    opts.__bindgen_anon_1.count = ids.len() as u32;
    // SAFETY: `opts` is valid and sized; the kernel writes at most `count` ids into `ids`, which
    // outlives the call.
    let r = unsafe { libbpf_sys::bpf_prog_query_opts(ifindex as i32, d.tcx_type(), &mut opts) };
    if r != 0 {
        return Err(errno(r)).context("querying tcx programs");
    }
    // SAFETY: the kernel set `count` (a plain u32) to the number of ids written.
    let n = unsafe { opts.__bindgen_anon_1.count } as usize;
    ids.truncate(n.min(64));
    Ok(ids)
}
