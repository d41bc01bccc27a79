//! What an interface is, for the kernel's "would the host deliver this?" check (bpf/host.h): its
//! MAC, its unicast addresses (requests to them are answered), the host's other addresses and the
//! broadcasts (never a source), and whether it is virtual (local senders leave UDP checksums
//! partial there). Read at attach; written to the `ifaces` map by ifindex.
use std::net::IpAddr;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::abi::{
    self, ADDR_HOST, ADDR_LOCAL, IFACE_ADDRS, IFACE_CSUM_PARTIAL, IFACE_LOOPBACK, IFACE_SLOTS,
};
use crate::skel::xdp::types::ink_iface;

/// An address as the programs keep it: IPv6, or IPv4 mapped as ::ffff:a.b.c.d.
fn mapped(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The entry for `iface`: its own unicast addresses first, then the host's others and the
/// broadcasts, as many as fit (an own address that does not fit is not answered: safe).
pub fn describe(iface: &str) -> Result<ink_iface> {
    let mut e = ink_iface::default();
    let mut own = Vec::new();
    let mut other = Vec::new();
    let mut bcast = Vec::new();
    let mut mac = None;
    let mut lo = false;
    for ifa in nix::ifaddrs::getifaddrs().context("listing interface addresses")? {
        let is_lo = ifa
            .flags
            .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
        let mine = ifa.interface_name == iface;
        lo |= mine && is_lo;
        if let Some(l) = ifa.address.as_ref().and_then(|a| a.as_link_addr()) {
            if mine {
                mac = l.addr();
            }
            continue;
        }
        let ip = |s: &nix::sys::socket::SockaddrStorage| -> Option<IpAddr> {
            s.as_sockaddr_in()
                .map(|a| IpAddr::V4(a.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
        };
        if let Some(a) = ifa.address.as_ref().and_then(ip) {
            if mine {
                own.push(a);
            } else {
                other.push(a);
            }
        }
        if let Some(b) = ifa.broadcast.as_ref().and_then(ip) {
            bcast.push(b);
        }
    }
    if lo {
        // only the host sends on loopback, to any of its own addresses
        own.append(&mut other);
    }
    other.append(&mut bcast);
    e.mac = mac.with_context(|| format!("{iface} has no link-layer address"))?;
    let virt = !std::path::Path::new("/sys/class/net")
        .join(iface)
        .join("device")
        .exists();
    e.flags =
        if virt { IFACE_CSUM_PARTIAL as u8 } else { 0 } | if lo { IFACE_LOOPBACK as u8 } else { 0 };
    let mut n = 0;
    for (kind, a) in own
        .iter()
        .map(|a| (ADDR_LOCAL, a))
        .chain(other.iter().map(|a| (ADDR_HOST, a)))
        .take(IFACE_ADDRS)
    {
        e.kind[n] = kind as u8;
        e.addr[n] = mapped(*a);
        n += 1;
    }
    e.naddr = n as u8;
    Ok(e)
}

/// The `ifaces` slot of an interface.
pub fn slot(ifindex: u32) -> u32 {
    ifindex % IFACE_SLOTS as u32
}

/// Writes `iface`'s entry into the `ifaces` map; refuses if another interface of the same
/// attachment has its slot.
pub fn publish(map: &dyn MapCore, ifindex: u32, iface: &str) -> Result<()> {
    let key = slot(ifindex).to_ne_bytes();
    if let Some(old) = map.lookup(&key, MapFlags::ANY)? {
        let old: ink_iface = abi::from_bytes(&old).context("reading the ifaces map")?;
        if old.ifindex != 0 && old.ifindex != ifindex {
            anyhow::bail!(
                "{iface} (ifindex {ifindex}) and ifindex {} cannot be attached together (both \
                 take slot {} of {IFACE_SLOTS}): attach them separately",
                old.ifindex,
                slot(ifindex)
            );
        }
    }
    let mut e = describe(iface)?;
    e.ifindex = ifindex;
    map.update(&key, abi::bytes_of(&e), MapFlags::ANY)
        .with_context(|| format!("recording {iface}'s addresses"))
}
