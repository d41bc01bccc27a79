/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Would this host's stack deliver the request to the server at all? The kernel answers only what
 * the host itself would have answered: a frame to this interface's MAC, to one of its unicast
 * addresses (not a broadcast, multicast or foreign address a routing host would forward), from a
 * source that is neither martian nor ours, with valid IPv4 header and UDP checksums. What the
 * interface is (MAC, addresses) is written by the control plane at attach (struct ink_iface, by
 * ifindex, in `ifaces`). Everything else passes untouched: the stack decides. */
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

/* 1 if the host's stack would deliver this UDP request (in scratch.buf, after the frame header
 * whose word sum is fsum) to the server; else 0 (counted: not_host). */
static __always_inline int host_delivers(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
					 __u32 fsum)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex, slot = ifindex % IFACE_SLOTS;
	struct ink_iface *ifc = bpf_map_lookup_elem(&ifaces, &slot);
	__u8 *dmac = data;

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
	if (!ipv4_sum_ok(data, data_end, p) || !udp_csum_ok(s, p, fsum, ifc->flags))
		goto no;
	return 1;
no:
	stat_inc(ST_NOT_HOST);
	return 0;
}

#endif
