//! What an interface is, for the kernel's "would the host deliver this?" check (bpf/host.h): its
//! MAC, its unicast addresses (requests to them are answered), the host's other addresses and the
//! broadcasts (never a source), and whether it is virtual (local senders leave UDP checksums
//! partial there). Read at attach; written to the `ifaces` map by ifindex.
use std::net::IpAddr;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::abi::{self, IFACE_ADDRS, IFACE_CSUM_PARTIAL, IFACE_LOOPBACK, IFACE_SLOTS};
use crate::skel::xdp::types::ink_iface;

/// Adds `a` to its family's list in `e`: one of the interface's unicast addresses (`local`:
/// requests to it are answered) or another of the host's (never a source). False if that list
/// is full: a unicast address left out is not answered (safe), another address left out is
/// not refused as a source.
pub fn add_addr(e: &mut ink_iface, a: IpAddr, local: bool) -> bool {
    match a {
        IpAddr::V4(v4) => {
            let i = usize::from(e.nv4);
            if i >= IFACE_ADDRS {
                return false;
            }
            e.v4[i] = u32::from_ne_bytes(v4.octets()); // as on the wire
            e.v4_local |= u16::from(local) << i;
            e.nv4 += 1;
        }
        IpAddr::V6(v6) => {
            let i = usize::from(e.nv6);
            if i >= IFACE_ADDRS {
                return false;
            }
            e.v6[i] = v6.octets();
            e.v6_local |= u16::from(local) << i;
            e.nv6 += 1;
        }
    }
    true
}

/// The entry for `iface`: its own unicast addresses first, then the host's others and the
/// broadcasts, as many of each family as fit (add_addr).
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
    for (a, local) in own
        .iter()
        .map(|a| (a, true))
        .chain(other.iter().map(|a| (a, false)))
    {
        add_addr(&mut e, *a, local);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_has_its_own_list_of_addresses() {
        let mut e = ink_iface::default();
        assert!(add_addr(&mut e, "198.18.0.1".parse().unwrap(), true));
        assert!(add_addr(&mut e, "fd00::1".parse().unwrap(), false));
        assert!(add_addr(&mut e, "198.18.0.255".parse().unwrap(), false));
        assert_eq!((e.nv4, e.nv6), (2, 1));
        // IPv4 as on the wire, bit i set for the interface's own unicast addresses
        assert_eq!(e.v4[0].to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(e.v4[1].to_ne_bytes(), [198, 18, 0, 255]);
        assert_eq!((e.v4_local, e.v6_local), (0b01, 0b0));
        assert_eq!(
            e.v6[0],
            "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
        // a full list refuses more of its family, and only of its family
        for i in 2..IFACE_ADDRS {
            assert!(add_addr(
                &mut e,
                format!("198.18.1.{i}").parse().unwrap(),
                true
            ));
        }
        assert!(!add_addr(&mut e, "198.18.2.1".parse().unwrap(), true));
        assert_eq!(usize::from(e.nv4), IFACE_ADDRS);
        assert_eq!(e.v4_local, !0b10, "every one added local but the broadcast");
        assert!(add_addr(&mut e, "fd00::2".parse().unwrap(), true));
        assert_eq!((e.nv6, e.v6_local), (2, 0b10));
    }
}
