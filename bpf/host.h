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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct ink_iface);
	__uint(max_entries, IFACES_MAX);
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
 * none of the host's addresses listed. */
static __always_inline int addresses_ok(const struct ink_iface *ifc, const struct pkt *p, int src)
{
	int dst_ok = 0;

#pragma unroll
	for (int i = 0; i < IFACE_ADDRS; i++) {
		if (i >= ifc->naddr)
			break;
		if (src && addr_eq(ifc->addr[i], p->saddr))
			return 0;
		if (ifc->kind[i] == ADDR_LOCAL && addr_eq(ifc->addr[i], p->daddr))
			dst_ok = 1;
	}
	return dst_ok;
}

/* The IPv4 header (20 bytes: requests with options are not answered) sums to all ones. */
static __always_inline int ip4_csum_ok(struct xdp_md *ctx, const struct pkt *p)
{
	__u16 ip[10];

	if (bpf_xdp_load_bytes(ctx, p->l3_off, ip, sizeof(ip)))
		return 0;
	return csum_fold(csum_words(ip, 10)) == 0;
}

/* The UDP checksum of the datagram whose header and memcached frame header are in the packet at
 * l4_off and whose request (plen bytes) is in scratch.buf. A virtual interface (veth, loopback)
 * carries local senders' datagrams with the checksum left partial (the pseudo header's sum, which
 * the stack accepts as such): allowed there only. IPv4 may omit the checksum (0), IPv6 may not. */
static __always_inline int udp_csum_ok(struct xdp_md *ctx, struct scratch *s,
				       const struct pkt *p, __u32 plen, __u8 flags)
{
	__u32 ph[10], l4[4], ulen = p->payload_len + 8;
	__s64 sum;
	__u16 check;

	if (plen > PAYLOAD_MAX || bpf_xdp_load_bytes(ctx, p->l4_off, l4, sizeof(l4)))
		return 0;
	__builtin_memcpy(&check, (__u8 *)l4 + 6, 2); /* as it lies in the packet */
	if (p->ipv6) {
		__builtin_memcpy(ph, p->saddr, 16);
		__builtin_memcpy(&ph[4], p->daddr, 16);
		ph[8] = bpf_htonl(ulen);
		ph[9] = bpf_htonl(IPPROTO_UDP);
		if (check == 0)
			return 0;
		sum = bpf_csum_diff(0, 0, ph, 40, 0);
	} else {
		if (check == 0)
			return 1;
		__builtin_memcpy(ph, &p->saddr[12], 4);
		__builtin_memcpy(&ph[1], &p->daddr[12], 4);
		ph[2] = bpf_htonl((IPPROTO_UDP << 16) | ulen);
		sum = bpf_csum_diff(0, 0, ph, 12, 0);
	}
	if (sum < 0)
		return 0;
	if ((flags & IFACE_CSUM_PARTIAL) && (__u16)~csum_fold((__u32)sum) == check)
		return 1;
	/* UDP header and frame header (16 bytes), then the request, zero-padded to 4 bytes */
	sum = bpf_csum_diff(0, 0, l4, 16, (__u32)sum);
	if (sum < 0)
		return 0;
	__builtin_memset(&s->buf[plen & 2047], 0, 4);
	{
		__u32 n = (plen + 3) & ~3U;
		__u32 a = n > 512 ? 512 : n, b = n - a;

		barrier_var(a); /* keep the mask: the verifier needs the bound */
		a &= 1023;
		if (a < 4)
			return 0;
		sum = bpf_csum_diff(0, 0, (__be32 *)s->buf, a, (__u32)sum);
		/* a request over 512 bytes (many keys): the rest, 512 bytes at a time */
		if (b && sum >= 0) {
			__u32 c = b > 512 ? 512 : b;
			barrier_var(c);
			c &= 1023;
			if (c >= 4)
				sum = bpf_csum_diff(0, 0, (__be32 *)&s->buf[512], c, (__u32)sum);
			b -= c;
			if (b && sum >= 0) {
				c = b > 512 ? 512 : b;
				barrier_var(c);
				c &= 1023;
				if (c >= 4)
					sum = bpf_csum_diff(0, 0, (__be32 *)&s->buf[1024], c,
							    (__u32)sum);
			}
		}
	}
	return sum >= 0 && csum_fold((__u32)sum) == 0;
}

/* 1 if the host's stack would deliver this UDP request (plen bytes in scratch.buf) to the server;
 * else 0 (counted: not_host). */
static __always_inline int host_delivers(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
					 __u32 plen)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	struct ink_iface *ifc = bpf_map_lookup_elem(&ifaces, &ifindex);
	__u8 *dmac = data;

	if (!ifc || (void *)(dmac + 6) > data_end)
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
	if (!p->ipv6 && !p->ip_opts && !ip4_csum_ok(ctx, p)) /* options: not answered */
		goto no;
	if (!udp_csum_ok(ctx, s, p, plen, ifc->flags))
		goto no;
	return 1;
no:
	stat_inc(ST_NOT_HOST);
	return 0;
}

#endif
