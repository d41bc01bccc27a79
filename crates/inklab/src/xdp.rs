//! The XDP echo floor or the pass-through program (both in `bpf/lab/echo.bpf.c`, built by this
//! crate): loading one and attaching it to an interface inside a network namespace, and detaching
//! on drop.
//!
//! The attachment is a netlink XDP attachment (`libbpf_rs::Xdp`), so the program stays on the
//! interface after the loaded object is dropped; [`XdpGuard`] removes it again (or the interface
//! goes away with its namespace).

use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Xdp, XdpFlags};

use crate::skel::echo;

/// Which program to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpProg {
    /// Turns memcached UDP requests to the port around (XDP_TX), passes the rest.
    Echo,
    /// XDP_PASS for everything.
    Pass,
}

/// Runs `f` on a thread that joined the network namespace `ns` (a name under /run/netns).
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    testkit::in_netns(ns, f)?
}

fn mode_flags(native: bool) -> XdpFlags {
    if native {
        XdpFlags::DRV_MODE
    } else {
        XdpFlags::SKB_MODE
    }
}

/// An XDP program attached by [`attach`]; detached on drop.
#[derive(Debug)]
pub struct XdpGuard {
    pub netns: String,
    pub iface: String,
    pub ifindex: i32,
    /// `native` or `generic`.
    pub mode: &'static str,
    native: bool,
    detached: bool,
}

/// Loads `prog` (the echo answering UDP `port`) and attaches it to `iface` in namespace `netns`,
/// natively if the driver can, generic XDP otherwise. Fails if another XDP program is there.
pub fn attach(netns: &str, iface: &str, prog: XdpProg, port: u16) -> Result<XdpGuard> {
    let iface_s = iface.to_string();
    let (ifindex, native) = in_netns(netns, move || {
        let ifindex = nix::net::if_::if_nametoindex(iface_s.as_str())
            .with_context(|| format!("no interface {iface_s}"))? as i32;
        let mut obj = MaybeUninit::uninit();
        let mut open = echo::EchoSkelBuilder::default()
            .open(&mut obj)
            .context("opening the echo BPF object")?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .context("echo object has no rodata")?
            .port = port;
        let loaded = open
            .load()
            .map_err(|e| anyhow!("loading the echo BPF object (verifier or kernel): {e}"))?;
        let p = match prog {
            XdpProg::Echo => &loaded.progs.inkbench_echo,
            XdpProg::Pass => &loaded.progs.inkbench_pass,
        };
        let x = Xdp::new(p.as_fd());
        let mut last = None;
        for native in [true, false] {
            match x.attach(ifindex, mode_flags(native) | XdpFlags::UPDATE_IF_NOEXIST) {
                Ok(()) => return Ok((ifindex, native)),
                Err(e) => last = Some(e),
            }
        }
        Err(anyhow!(
            "attaching XDP {prog:?} to {iface_s}: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        ))
    })?;
    Ok(XdpGuard {
        netns: netns.to_string(),
        iface: iface.to_string(),
        ifindex,
        mode: if native { "native" } else { "generic" },
        native,
        detached: false,
    })
}

impl XdpGuard {
    /// Detaches the program (whatever is attached in its mode on the interface).
    pub fn detach(&mut self) -> Result<()> {
        if self.detached {
            return Ok(());
        }
        self.detached = true;
        let (ifindex, flags) = (self.ifindex, mode_flags(self.native));
        in_netns(&self.netns, move || {
            // Xdp::detach only uses the ifindex and flags; any valid fd will do for the handle.
            let devnull = File::open("/dev/null")?;
            Xdp::new(devnull.as_fd())
                .detach(ifindex, flags)
                .map_err(|e| anyhow!("detaching XDP from ifindex {ifindex}: {e}"))
        })
    }
}

impl Drop for XdpGuard {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}
