//! What an interface is, for the kernel's "would the host deliver this?" check (bpf/host.h): its
//! MAC, its unicast addresses (requests to them are answered), the host's other addresses and the
//! broadcasts (never a source), and whether it is virtual (local senders leave UDP checksums
//! partial there). Read at attach; written to the `ifaces` map by ifindex, with the VLAN devices
//! on the interface (the `vlans` map: which tags lead to which).
use std::net::IpAddr;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::abi::{self, IFACE_ADDRS, IFACE_CSUM_PARTIAL, IFACE_LOOPBACK, IFACE_SLOTS, VLAN_DEVS};
use crate::skel::xdp::types::{ink_iface, ink_vlan_key};

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

/// A VLAN device on an attached interface: the stack takes frames with `tags` (outermost first,
/// each TPID << 16 | VLAN id, 0 for none: struct ink_vlan_key) to it.
#[derive(Clone, Debug, PartialEq)]
pub struct VlanDev {
    pub name: String,
    pub ifindex: u32,
    pub tags: [u32; 2],
}

impl std::fmt::Display for VlanDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = |t: u32| {
            let proto = if t >> 16 == 0x88a8 {
                "802.1ad"
            } else {
                "802.1Q"
            };
            format!("{proto} {}", t & 0xfff)
        };
        match self.tags {
            [o, 0] => write!(f, "{} ({})", self.name, tag(o)),
            [o, i] => write!(f, "{} ({}, {})", self.name, tag(o), tag(i)),
        }
    }
}

/// The VLAN devices that are up on `iface`, and on those, from `ip -details -json link show`'s
/// output (the stack takes a frame to a device only while it is up; XDP reads two tags at most).
/// One enslaved (to a bridge, bond or VRF) is left out, with the devices on it: its tagged gets
/// pass to the stack.
pub fn vlan_devices(ip_json: &[u8], iface: &str) -> Result<Vec<VlanDev>> {
    let links: Vec<serde_json::Value> =
        serde_json::from_slice(ip_json).context("reading `ip -details -json link show`")?;
    let vlan = |l: &serde_json::Value| -> Option<(String, u32, String, u32)> {
        let info = l.get("linkinfo")?;
        if info.get("info_kind")?.as_str()? != "vlan" {
            return None;
        }
        let d = info.get("info_data")?;
        let tpid = match d.get("protocol")?.as_str()? {
            "802.1Q" => 0x8100,
            "802.1ad" => 0x88a8,
            _ => return None,
        };
        let id = u32::try_from(d.get("id")?.as_u64()?).ok()?;
        let up = l
            .get("flags")?
            .as_array()?
            .iter()
            .any(|f| f.as_str() == Some("UP"));
        if !up || l.get("link_netnsid").is_some() || l.get("master").is_some() {
            // down; its lower device in another namespace; or enslaved (to a bridge or bond,
            // which take its frames, or a VRF, whose sockets XDP's lookup would not see)
            return None;
        }
        Some((
            l.get("ifname")?.as_str()?.to_string(),
            u32::try_from(l.get("ifindex")?.as_u64()?).ok()?,
            l.get("link")?.as_str()?.to_string(),
            tpid << 16 | (id & 0xfff),
        ))
    };
    let vlans: Vec<_> = links.iter().filter_map(vlan).collect();
    let mut out = Vec::new();
    for (name, ifindex, lower, tag) in &vlans {
        if lower != iface {
            continue;
        }
        out.push(VlanDev {
            name: name.clone(),
            ifindex: *ifindex,
            tags: [*tag, 0],
        });
        for (n2, i2, l2, t2) in &vlans {
            if l2 == name {
                out.push(VlanDev {
                    name: n2.clone(),
                    ifindex: *i2,
                    tags: [*tag, *t2],
                });
            }
        }
    }
    Ok(out)
}

/// The VLAN devices on `iface` (vlan_devices), as `ip` lists them in this network namespace.
pub fn list_vlans(iface: &str) -> Result<Vec<VlanDev>> {
    let out = std::process::Command::new("ip")
        .args(["-details", "-json", "link", "show"])
        .output()
        .context("running `ip -details -json link show`")?;
    anyhow::ensure!(
        out.status.success(),
        "`ip -details -json link show` failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    vlan_devices(&out.stdout, iface)
}

/// Describes the VLAN devices on `iface` (ifindex `ifindex`, already in `ifaces`: publish) for
/// XDP: each in `ifaces` as an interface of its own, and in `vlans` by its tags. A device whose
/// `ifaces` slot another interface has, or past the `vlans` map's VLAN_DEVS, is left out: its
/// frames pass to the server. Returns those described, and a sentence for each left out.
pub fn publish_vlans(
    ifaces: &dyn MapCore,
    vlans: &dyn MapCore,
    ifindex: u32,
    iface: &str,
    devs: &[VlanDev],
) -> Result<(Vec<VlanDev>, Vec<String>)> {
    let lower: ink_iface = ifaces
        .lookup(&slot(ifindex).to_ne_bytes(), MapFlags::ANY)?
        .and_then(|e| abi::from_bytes(&e))
        .filter(|e: &ink_iface| e.ifindex == ifindex)
        .with_context(|| format!("{iface} is not described in the ifaces map"))?;
    let parent_flags = lower.flags & IFACE_CSUM_PARTIAL as u8;
    let (mut done, mut left) = (Vec::new(), Vec::new());
    for d in devs {
        let key = slot(d.ifindex).to_ne_bytes();
        if let Some(old) = ifaces.lookup(&key, MapFlags::ANY)? {
            let old: ink_iface = abi::from_bytes(&old).context("reading the ifaces map")?;
            if old.ifindex != 0 && old.ifindex != d.ifindex {
                left.push(format!(
                    "{d} on {iface}: its requests pass to the server (it would take slot {} of \
                     {IFACE_SLOTS}, which ifindex {} has)",
                    slot(d.ifindex),
                    old.ifindex
                ));
                continue;
            }
        }
        let mut e = describe(&d.name)?;
        e.ifindex = d.ifindex;
        // the frames come in on the lower interface: its checksum rule, never loopback's
        e.flags = parent_flags;
        let k = ink_vlan_key {
            ifindex,
            tag: d.tags,
        };
        // the tags first: until its description is in `ifaces`, XDP finds the slot not the
        // device's and passes its frames
        if let Err(err) = vlans.update(abi::bytes_of(&k), &d.ifindex.to_ne_bytes(), MapFlags::ANY) {
            left.push(format!(
                "{d} on {iface}: its requests pass to the server (not recorded, at most \
                 {VLAN_DEVS} VLAN devices: {err})"
            ));
            continue;
        }
        ifaces
            .update(&key, abi::bytes_of(&e), MapFlags::ANY)
            .with_context(|| format!("recording {}'s addresses", d.name))?;
        done.push(d.clone());
    }
    Ok((done, left))
}

/// The VLAN devices on `iface` (described already: publish) found and recorded, as attach and
/// refresh do: each left out is said on stderr, and if they cannot be listed, none is recorded
/// (tagged requests pass) and that is said. Returns how each recorded one is named (VlanDev's
/// Display), for AttachInfo.vlans.
pub fn record_vlans(
    ifaces: &dyn MapCore,
    vlans: &dyn MapCore,
    ifindex: u32,
    iface: &str,
) -> Result<Vec<String>> {
    let devs = match list_vlans(iface) {
        Ok(devs) => devs,
        Err(e) => {
            eprintln!(
                "inkcache: {iface}: VLAN devices not listed, tagged requests pass to the server: \
                 {e:#}"
            );
            return Ok(Vec::new());
        }
    };
    let (done, left) = publish_vlans(ifaces, vlans, ifindex, iface, &devs)?;
    for l in left {
        eprintln!("inkcache: VLAN device {l}");
    }
    Ok(done.iter().map(|d| d.to_string()).collect())
}

/// `inkcache refresh`: describes the attached interface whose pins are at `dir`, and its VLAN
/// devices, again as attach did, after its MAC, addresses or VLAN devices changed (the kernel
/// answers as the host delivered at attach until then). Returns the VLAN devices now answered
/// through (record_vlans).
pub fn refresh(dir: &std::path::Path) -> Result<Vec<String>> {
    use libbpf_rs::MapHandle;
    let open = |name: &str| {
        MapHandle::from_pinned_path(dir.join(name))
            .with_context(|| format!("opening {}/{name}", dir.display()))
    };
    let mut info = crate::pins::read_info(dir)?;
    let (ifaces, meta) = (open("ifaces")?, open("meta")?);
    let vlans = open("vlans").context("attached by an older inkcache: re-attach to refresh")?;
    let now = nix::net::if_::if_nametoindex(info.iface.as_str())
        .with_context(|| format!("{} is gone: detach it", info.iface))?;
    anyhow::ensure!(
        now == info.ifindex,
        "{} is another interface now (ifindex {now}, {} at attach): detach and attach again",
        info.iface,
        info.ifindex
    );
    publish(&ifaces, info.ifindex, &info.iface)?;
    // the VLAN devices recorded before, forgotten (their frames pass meanwhile), then found again
    let mut old = Vec::new();
    for k in vlans.keys() {
        let key: ink_vlan_key = abi::from_bytes(&k).context("reading the vlans map")?;
        if key.ifindex == info.ifindex {
            let dev = vlans.lookup(&k, MapFlags::ANY)?.unwrap_or_default();
            old.push((k, u32::from_ne_bytes(dev.try_into().unwrap_or_default())));
        }
    }
    for (k, dev) in old {
        vlans.delete(&k).context("forgetting a VLAN device")?;
        let slot = slot(dev).to_ne_bytes();
        let held = ifaces.lookup(&slot, MapFlags::ANY)?;
        if held
            .and_then(|e| abi::from_bytes::<ink_iface>(&e))
            .map(|e| e.ifindex)
            == Some(dev)
        {
            ifaces
                .update(&slot, abi::bytes_of(&ink_iface::default()), MapFlags::ANY)
                .context("forgetting a VLAN device")?;
        }
    }
    info.vlans = record_vlans(&ifaces, &vlans, info.ifindex, &info.iface)?;
    let at = info
        .group
        .iter()
        .position(|g| *g == info.iface)
        .unwrap_or(0);
    crate::pins::write_info(&meta, at, &info)?;
    Ok(info.vlans)
}

/// `inkcache refresh --follow`: refresh (`each` gets every result), then again after each change
/// the kernel announces in this network namespace (links, IPv4 and IPv6 addresses: rtnetlink's
/// groups), a burst of changes making one refresh; until the attachment at `dir` is gone.
pub fn follow(dir: &std::path::Path, mut each: impl FnMut(&[String])) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{
        bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
    };
    use std::os::fd::{AsFd, AsRawFd};
    const GROUPS: u32 = 0x1 | 0x10 | 0x100; // RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR
    let nl = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        SockProtocol::NetlinkRoute,
    )
    .context("opening a netlink socket")?;
    bind(nl.as_raw_fd(), &NetlinkAddr::new(0, GROUPS)).context("joining rtnetlink's groups")?;
    // subscribed before the first refresh: no change after it goes unseen
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !dir.exists() {
            return Ok(()); // detached
        }
        each(&refresh(dir)?);
        // wait for a change, checking each second that the attachment is still there
        loop {
            let mut fds = [PollFd::new(nl.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(1000u16)).context("waiting on netlink")? > 0 {
                break;
            }
            if !dir.exists() {
                return Ok(());
            }
        }
        // the burst: read until 100 ms pass without a message (a lost one, ENOBUFS, only
        // means that changes came: they are read again anyway)
        loop {
            while recv(nl.as_raw_fd(), &mut buf, MsgFlags::empty()).is_ok() {}
            let mut fds = [PollFd::new(nl.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(100u16)).context("waiting on netlink")? == 0 {
                break;
            }
        }
    }
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

    /// `ip -details -json link show` as iproute2 6.x prints it (trimmed to the fields read):
    /// eth0 with an 802.1Q device, an 802.1ad one with an 802.1Q device on it, a device that is
    /// down, and one enslaved (to VRF `blue`) with a device on it; eth1 with one of its own; a
    /// device whose lower one is in another namespace.
    const IP_LINKS: &str = r#"[
      {"ifindex":2,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"]},
      {"ifindex":3,"ifname":"eth1","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"]},
      {"ifindex":4,"link":"eth0","ifname":"eth0.42","flags":["BROADCAST","MULTICAST","UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":42,"flags":["REORDER_HDR"]}}},
      {"ifindex":5,"link":"eth0","ifname":"s100","flags":["BROADCAST","MULTICAST","UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1ad","id":100}}},
      {"ifindex":6,"link":"s100","ifname":"s100.7","flags":["BROADCAST","MULTICAST","UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":7}}},
      {"ifindex":7,"link":"eth0","ifname":"eth0.9","flags":["BROADCAST","MULTICAST"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":9}}},
      {"ifindex":8,"link":"eth1","ifname":"eth1.42","flags":["UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":42}}},
      {"ifindex":9,"link":"eth0","link_netnsid":0,"ifname":"far","flags":["UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":5}}},
      {"ifindex":10,"link":"eth0","ifname":"mv","flags":["UP"],
       "linkinfo":{"info_kind":"macvlan","info_data":{"mode":"bridge"}}},
      {"ifindex":11,"link":"eth0","ifname":"eth0.8","flags":["UP"],"master":"blue",
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":8}}},
      {"ifindex":12,"link":"eth0.8","ifname":"eth0.8.3","flags":["UP"],
       "linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":3}}}
    ]"#;

    #[test]
    fn vlan_devices_are_found_by_their_tags() {
        let dev = |name: &str, ifindex, tags| VlanDev {
            name: name.into(),
            ifindex,
            tags,
        };
        assert_eq!(
            vlan_devices(IP_LINKS.as_bytes(), "eth0").unwrap(),
            vec![
                dev("eth0.42", 4, [0x8100_002a, 0]),
                dev("s100", 5, [0x88a8_0064, 0]),
                dev("s100.7", 6, [0x88a8_0064, 0x8100_0007]),
            ]
        );
        assert_eq!(
            vlan_devices(IP_LINKS.as_bytes(), "eth1").unwrap(),
            vec![dev("eth1.42", 8, [0x8100_002a, 0])]
        );
        assert!(vlan_devices(IP_LINKS.as_bytes(), "s100.7")
            .unwrap()
            .is_empty());
        assert!(vlan_devices(b"not json", "eth0").is_err());
        assert_eq!(
            dev("s100.7", 6, [0x88a8_0064, 0x8100_0007]).to_string(),
            "s100.7 (802.1ad 100, 802.1Q 7)"
        );
    }
}
