//! Detaching whatever inkcache left on an interface, with or without its pins.
//!
//! The pins are the normal way back to an attachment, but they can be lost while the programs
//! keep serving: an attach made where the BPF filesystem was private to the command (before
//! inkcache joined the right mount namespace), a bpffs unmounted or cleaned by hand. Then the
//! programs are recognised on the interface by their names (`inkcache_*`) and where inkcache
//! puts them (XDP, and clsact filters at inkcache's handle and priority), and removed.
use std::os::fd::AsFd;

use anyhow::{Context, Result};
use libbpf_rs::{
    libbpf_sys, query::ProgInfoIter, Program, TcHookBuilder, XdpFlags, TC_EGRESS, TC_INGRESS,
};

use crate::{attach, pins, sys, Error};

/// Program names (as the kernel keeps them: at most 15 characters) that inkcache attaches to a
/// server's interface.
const OURS: &[&str] = &["inkcache_xdp", "inkcache_tc_egr", "inkcache_tc_ing"];

/// What `detach` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Detached {
    /// The pinned attachment was removed.
    Pinned,
    /// No pins: these programs (kind and id) were found on the interface and removed.
    Unpinned(Vec<String>),
}

/// Removes what inkcache put on `iface` in this network namespace: through its pins if they are
/// there, else by finding its programs on the interface. Fails with "not attached" if there is
/// neither.
pub fn detach(iface: &str) -> Result<Detached> {
    sys::require_root()?;
    sys::ensure_bpffs()?;
    if pins::dir_for(iface)?.exists() {
        attach::detach(iface)?;
        return Ok(Detached::Pinned);
    }
    let removed = remove_unpinned(iface)?;
    if removed.is_empty() {
        return Err(Error::NotAttached(iface.into()).into());
    }
    Ok(Detached::Unpinned(removed))
}

fn prog_name(id: u32) -> Option<String> {
    ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| p.name.to_string_lossy().into_owned())
}

fn is_ours(id: u32) -> bool {
    id != 0 && prog_name(id).is_some_and(|n| OURS.contains(&n.as_str()))
}

fn xdp_prog_id(ifindex: i32, mode: &XdpFlags) -> u32 {
    let mut id = 0u32;
    // SAFETY: bpf_xdp_query_id writes one u32 through the pointer, which points at `id`, live
    // across the call.
    let r = unsafe { libbpf_sys::bpf_xdp_query_id(ifindex, mode.bits() as i32, &mut id) };
    if r == 0 {
        id
    } else {
        0
    }
}

/// Removes inkcache's programs from `iface` without its pins: the XDP program if it is one of
/// ours, and the clsact filters at inkcache's handle and priority that run ours. Returns what it
/// removed; other programs stay.
pub fn remove_unpinned(iface: &str) -> Result<Vec<String>> {
    let ifindex = sys::ifindex(iface)? as i32;
    let mut removed = Vec::new();
    for (mode, what) in [
        (XdpFlags::DRV_MODE, "native XDP"),
        (XdpFlags::SKB_MODE, "generic XDP"),
    ] {
        let id = xdp_prog_id(ifindex, &mode);
        if !is_ours(id) {
            continue;
        }
        let fd = Program::fd_from_id(id).with_context(|| format!("opening program {id}"))?;
        let opts = libbpf_sys::bpf_xdp_attach_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
            old_prog_fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            ..Default::default()
        };
        // SAFETY: plain syscall wrapper; `opts` is a valid, sized struct living across the call
        // and `old_prog_fd` is an open fd owned by `fd`. REPLACE detaches only if that program
        // is still the one attached.
        let r = unsafe {
            libbpf_sys::bpf_xdp_detach(ifindex, (mode | XdpFlags::REPLACE).bits(), &opts)
        };
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(-r))
                .with_context(|| format!("{iface}: detaching the {what} program {id}"));
        }
        removed.push(format!("{what} program {id}"));
    }
    let null = std::fs::File::open("/dev/null").context("opening /dev/null")?;
    for (at, what) in [(TC_EGRESS, "TC egress"), (TC_INGRESS, "TC ingress")] {
        // query and detach name the filter by handle and priority; the fd is not used
        let mut hook = TcHookBuilder::new(null.as_fd())
            .ifindex(ifindex)
            .handle(attach::TC_HANDLE)
            .priority(attach::TC_PRIORITY)
            .hook(at);
        let Ok(id) = hook.query() else { continue };
        if !is_ours(id) {
            continue;
        }
        hook.detach()
            .with_context(|| format!("{iface}: detaching the {what} program {id}"))?;
        removed.push(format!("{what} program {id}"));
    }
    Ok(removed)
}
