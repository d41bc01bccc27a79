/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Would this host's stack deliver the request to the server at all? The kernel answers only what
 * the host itself would have answered: a frame to this interface's MAC, to one of its unicast
 * addresses (not a broadcast, multicast or foreign address a routing host would forward), from a
 * source that is neither martian nor ours, with valid IPv4 header and UDP checksums; a frame with
 * VLAN tags as the VLAN device the stack takes it to, and not at all where the host has none. What
 * the interface and its VLAN devices are (MAC, addresses) is written by the control plane at
 * attach (struct ink_iface, by ifindex, in `ifaces`; the devices by their tags in `vlans`).
 * Everything else passes untouched: the stack decides. */
#ifndef INKCACHE_HOST_H
#define INKCACHE_HOST_H

#include "inkcache_common.h"
#include "parsing.h"
#include "csum.h"
#include "maps.h"
#include "scratch.h"

/* By ifindex % IFACE_SLOTS (an array: the lookup is inlined); the entry names its ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_iface);
	__uint(max_entries, IFACE_SLOTS);
} ifaces SEC(".maps");

/* The VLAN devices on attached interfaces (written at attach, like `ifaces`): by the tags that
 * lead to them, their ifindex. Each is described in `ifaces` as an interface of its own. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ink_vlan_key);
	__type(value, __u32);
	__uint(max_entries, VLAN_DEVS);
} vlans SEC(".maps");

/* The ifindex of the interface the host's stack delivers a tagged frame on, or 0 if it drops the
 * frame. Tag by tag, outermost first, as the stack takes them: to the VLAN device for the tag on
 * the interface reached so far; with no such device, a tag of VLAN id 0 (priority only) is
 * ignored and any other drops the frame (marked for another host). Only frames with tags come
 * here: l3_off is 18 or 22. A function of its own, verified once: inlined, the walk after it
 * multiplied past the verifier's budget. */
__noinline int vlan_device(struct xdp_md *ctx, __u32 l3_off)
{
	void *data, *data_end;
	struct ink_vlan_key k = {};
	struct { __be16 tpid, tci; } *t; /* after the MACs: a tag, its TPID first */
	__u32 *dev, n = 0, tag; /* n: a device reached */
	int ifindex;

	if (!ctx)
		return 0;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	t = data + 12;
	ifindex = ctx->ingress_ifindex;
	k.ifindex = ifindex;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (sizeof(struct ethhdr) + 4 * i >= l3_off)
			break;
		if ((void *)(t + i + 1) > data_end)
			return 0;
		tag = (__u32)bpf_ntohs(t[i].tpid) << 16 | (bpf_ntohs(t[i].tci) & 0xfff);
		if (n) /* the tag leads on from the device reached */
			k.tag[1] = tag;
		else
			k.tag[0] = tag;
		dev = bpf_map_lookup_elem(&vlans, &k);
		if (dev) {
			ifindex = *dev;
			n = 1;
			continue;
		}
		if (tag & 0xfff)
			return 0;
		if (n) /* a priority tag, ignored */
			k.tag[1] = 0;
		else
			k.tag[0] = 0;
	}
	return ifindex;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	return *(__u64 *)a == *(__u64 *)b && *(__u64 *)(a + 8) == *(__u64 *)(b + 8);
}

/* Sources the stack drops or no reply may go to: 0/8, 127/8, 224/4 and above (multicast,
 * reserved, broadcast); IPv6 ::, ::1, ff00::/8 and IPv4-mapped. */
static __always_inline int martian_source(const struct pkt *p)
{
	const __u8 *a = p->saddr;

	if (!p->ipv6)
		return a[12] == 0 || a[12] == 127 || a[12] >= 224;
	if (a[0] == 0xff)
		return 1;
	if (*(__u64 *)a != 0)
		return 0;
	if (*(__u32 *)(a + 8) == bpf_htonl(0xffff))
		return 1; /* IPv4-mapped on the wire */
	return *(__u32 *)(a + 8) == 0 && *(__u32 *)(a + 12) == 0 ? 1 /* :: */
	       : (*(__u32 *)(a + 8) == 0 && *(__u32 *)(a + 12) == bpf_htonl(1)); /* ::1 */
}

/* 1 if the destination is one of the interface's unicast addresses and (if `src`) the source
 * none of the host's addresses listed: compared with the packet's family's list only. */
static __always_inline int addresses_ok(const struct ink_iface *ifc, const struct pkt *p, int src)
{
	__u32 s4 = *(__u32 *)(p->saddr + 12), d4 = *(__u32 *)(p->daddr + 12);
	__u32 local, dst_ok = 0;

	if (!p->ipv6) {
		local = ifc->v4_local;
#pragma unroll
		for (int i = 0; i < IFACE_ADDRS; i++) {
			if (i >= ifc->nv4)
				break;
			if (src && ifc->v4[i] == s4)
				return 0;
			dst_ok |= (ifc->v4[i] == d4) & (local >> i);
		}
		return dst_ok & 1;
	}
	local = ifc->v6_local;
#pragma unroll
	for (int i = 0; i < IFACE_ADDRS; i++) {
		if (i >= ifc->nv6)
			break;
		if (src && addr_eq(ifc->v6[i], p->saddr))
			return 0;
		dst_ok |= addr_eq(ifc->v6[i], p->daddr) & (local >> i);
	}
	return dst_ok & 1;
}

/* Whether the stack would take the IPv4 header's checksum (its words sum to all ones). Checked
 * here, for the requests the kernel may answer, and not when the frame is parsed: other traffic
 * does not pay for it. A header with options is never answered (ip_opts), so only 20-byte headers
 * are summed; IPv6 has no header checksum. */
static __always_inline int ipv4_sum_ok(void *data, void *data_end, const struct pkt *p)
{
	__u16 *ip = data + (p->l3_off & 31); /* 14, 18 or 22: after up to two VLAN tags */

	if (p->ipv6 || p->ip_opts)
		return 1;
	if ((void *)(ip + 10) > data_end)
		return 0;
	barrier_var(ip); /* the checked pointer, not one the compiler derives again */
	return csum_fold(csum_words(ip, 10)) == 0;
}

/* The UDP checksum of the request: pseudo header and UDP header from what parsing kept (struct
 * pkt), the memcached frame header's sum `fsum` (its words as they lie in the packet), the
 * request's sum as XDP took it when it copied the request (scratch.rq). Sums are in memory order
 * (csum.h). A virtual interface (veth, loopback) carries local senders' datagrams with the
 * checksum left partial (the pseudo header's sum, which the stack accepts from them): allowed
 * there only. IPv4 may omit the checksum (0), IPv6 may not. */
static __always_inline int udp_csum_ok(struct scratch *s, const struct pkt *p, __u32 fsum,
				       __u8 flags)
{
	__u16 ulen = bpf_htons((__u16)(p->payload_len + 8));
	__u32 sum;

	if (p->l4_check == 0)
		return !p->ipv6;
	sum = addr_sum(p->saddr, p->ipv6) + addr_sum(p->daddr, p->ipv6) +
	      bpf_htons(IPPROTO_UDP) + ulen;
	if ((flags & IFACE_CSUM_PARTIAL) && (__u16)~csum_fold(sum) == p->l4_check)
		return 1;
	sum += p->sport + p->dport + ulen + p->l4_check + fsum;
	return csum_fold(csum_add(sum, s->rq.sum)) == 0; /* the request's, summed as it was copied */
}

/* A destination's slot in scratch.sl: its family's half, by its address's last byte (a server's
 * addresses of one family usually differ there). Masked on the 64-bit register the address is
 * made from: 6.1's verifier loses the bounds of a narrower one. */
static __always_inline void *sl_of(struct scratch *s, const struct pkt *p)
{
	__u64 i = (p->ipv6 & 1) << 2 | (p->daddr[15] & 3);

	barrier_var(i);
	i &= SL_SLOTS - 1;
	return &s->sl[i];
}

/* Whether a UDP socket of the interface's namespace would receive the request in scratch.pk, which
 * the stack takes up at device `dev` (the interface, or a VLAN device on it): the server may
 * listen on some of the host's addresses only (memcached -l), or on one family only. Found as the
 * stack finds it (bpf_sk_lookup_udp: bound address and device, IPV6_V6ONLY, reuseport groups,
 * sk_lookup programs, connected sockets). The helper looks up as for the interface XDP runs on:
 * for a VLAN device's request, a socket it finds bound to a device is bound to that interface
 * (or was handed over by an sk_lookup program), not to the VLAN device, and does not count. If
 * one would receive it, the destination is remembered in scratch.sl with generation `gen`
 * (server_listens): by destination, not by source, as an unconnected server socket receives
 * from any; a connected one, which receives from its peer only, is not remembered. A function of its own, verified once: it holds a socket reference, and inlined it
 * multiplied the states the verifier walks after it past its budget. */
__noinline int socket_lookup(struct xdp_md *ctx, __u64 gen, __u32 dev)
{
	struct scratch *s = get_scratch();
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	struct pkt *p;
	__u32 len, bound, connected;
	typeof(&s->sl[0]) m;

	if (!ctx || !s)
		return 0;
	p = &s->pk;
	if (!p->ipv6) {
		t.ipv4.saddr = *(__u32 *)(p->saddr + 12);
		t.ipv4.daddr = *(__u32 *)(p->daddr + 12);
		t.ipv4.sport = p->sport;
		t.ipv4.dport = p->dport;
		len = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, p->daddr, 16);
		t.ipv6.sport = p->sport;
		t.ipv6.dport = p->dport;
		len = sizeof(t.ipv6);
	}
	sk = bpf_sk_lookup_udp(ctx, &t, len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	bound = sk->bound_dev_if;
	connected = sk->state == BPF_TCP_ESTABLISHED; /* as the kernel tells it: to a port or not */
	bpf_sk_release(sk);
	if (bound && dev != ctx->ingress_ifindex)
		return 0;
	if (connected)
		return 1; /* it receives from its peer only: not remembered for every source */
	m = sl_of(s, p);
	__builtin_memcpy(m->daddr, p->daddr, 16);
	m->ifindex = dev;
	m->port = p->dport;
	m->gen = gen + 1;
	return 1;
}

/* socket_lookup, but for a destination (and device) found before on this CPU (four of each
 * family: sl_of), until a socket binds or releases a cached port (ink_global.gen `gen`,
 * inkcache_sock.bpf.c): a get there costs no lookup and no call (a lookup costs ~140 ns on the
 * AMD VM, more than half a hot hit: docs/results/host-checks.md). */
static __always_inline int server_listens(struct xdp_md *ctx, struct scratch *s,
					  const struct pkt *p, __u64 gen, __u32 dev)
{
	typeof(&s->sl[0]) m = sl_of(s, p);

	if (m->gen == gen + 1 && m->ifindex == dev && m->port == p->dport &&
	    addr_eq(m->daddr, p->daddr))
		return 1;
	return socket_lookup(ctx, gen, dev);
}

/* 1 if the host's stack would deliver this UDP request (in scratch.buf, after the frame header
 * whose word sum is fsum) to the server; else 0 (counted: not_host). */
static __always_inline int host_delivers(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
					 __u32 fsum)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex, slot;
	struct ink_iface *ifc;
	struct ink_global *g;
	__u8 *dmac = data;

	if (p->l3_off != sizeof(struct ethhdr)) { /* tagged: as its VLAN device, if any, has it */
		ifindex = vlan_device(ctx, p->l3_off);
		if (!ifindex)
			goto no;
	}
	slot = ifindex % IFACE_SLOTS;
	ifc = bpf_map_lookup_elem(&ifaces, &slot);
	if (!ifc || ifc->ifindex != ifindex || (void *)(dmac + 6) > data_end)
		goto no;
	if (*(__u32 *)dmac != *(__u32 *)ifc->mac || *(__u16 *)(dmac + 4) != *(__u16 *)(ifc->mac + 4))
		goto no;
	if (ifc->flags & IFACE_LOOPBACK) {
		/* only the host sends here, from any of its addresses: the destination decides */
		if (!addresses_ok(ifc, p, 0))
			goto no;
	} else if (martian_source(p) || !addresses_ok(ifc, p, 1)) {
		goto no;
	}
	if (!p->sport) /* memcached's reply to port 0 fails (sendmsg refuses it): it sends none */
		goto no;
	if (!ipv4_sum_ok(data, data_end, p) || !udp_csum_ok(s, p, fsum, ifc->flags))
		goto no;
	g = global_state();
	if (!g || !server_listens(ctx, s, p, *(volatile __u64 *)&g->gen, ifindex))
		goto no;
	return 1;
no:
	stat_inc(ST_NOT_HOST);
	return 0;
}

#endif
