// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A generic scatter-gather worker answered in XDP, for benchmarks and tests: a request
 * (struct sg_req_hdr + data) to a UDP port in [port_lo, port_hi] is answered in place with
 * struct sg_ans_hdr (status = the worker index of the request) + the same data (an echo: the gathered sum is the data times the workers),
 * sent back with XDP_TX. The UDP checksum is computed in full (IPv4 and IPv6), so the answer is
 * valid wherever it goes, whatever checksum offload left in the request. Keeps the worker side
 * of a benchmark from being the bottleneck: no socket, no wakeup, no copy to user space. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sg_common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u16 port_lo = 7000;
const volatile __u16 port_hi = 7000;

struct wscratch {
	__u8 data[SG_DGRAM_MAX * 2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct wscratch);
	__uint(max_entries, 1);
} wscratch SEC(".maps");

#include "sg_csum.h"

static __always_inline void swap6(__u8 *a, __u8 *b)
{
	__u8 t[6];

	__builtin_memcpy(t, a, 6);
	__builtin_memcpy(a, b, 6);
	__builtin_memcpy(b, t, 6);
}

SEC("xdp")
int sg_worker(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	struct sg_req_hdr *rq;
	struct wscratch *sc;
	__u32 zero = 0, sum, ulen, l4;
	__u16 p;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
		    (ip->frag_off & bpf_htons(0x3fff)))
			return XDP_PASS;
		udp = (void *)(ip + 1);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return XDP_PASS;
		udp = (void *)(ip6 + 1);
	} else {
		return XDP_PASS;
	}
	rq = (void *)(udp + 1);
	if ((void *)(rq + 1) > end)
		return XDP_PASS;
	p = bpf_ntohs(udp->dest);
	if (p < port_lo || p > port_hi || rq->magic != bpf_htonl(SG_MAGIC_REQ))
		return XDP_PASS;
	ulen = bpf_ntohs(udp->len);
	l4 = (void *)udp - data;
	if (ulen < 8 + sizeof(*rq) || ulen >= SG_DGRAM_MAX || data + l4 + ulen > end)
		return XDP_PASS;
	/* The answer keeps the request's worker field (as sg_ans_hdr.status): the benchmark's
	 * user-space baselines read it; the gather program trusts only the sender's address. */
	rq->magic = bpf_htonl(SG_MAGIC_ANS);
	p = udp->source;
	udp->source = udp->dest;
	udp->dest = p;
	udp->check = 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 a = ip->saddr;

		ip->saddr = ip->daddr;
		ip->daddr = a;
		/* pseudo-header: addresses, protocol, length */
		sum = sg_csum_add(ip->saddr, ip->daddr);
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a = ip6->saddr;
		__s64 r;

		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		r = bpf_csum_diff(NULL, 0, (void *)&ip6->saddr, 32, 0);
		sum = r < 0 ? 0 : (__u32)r;
	}
	sum = sg_csum_add(sum, bpf_htons(IPPROTO_UDP));
	sum = sg_csum_add(sum, bpf_htons(ulen));
	swap6(eth->h_source, eth->h_dest);
	sc = bpf_map_lookup_elem(&wscratch, &zero);
	{
		__u64 n = ulen;

		sg_barrier_var(n);
		if (!sc || n < 1 || n >= SG_DGRAM_MAX || bpf_xdp_load_bytes(ctx, l4, sc->data, n))
			return XDP_DROP;
	}
	sum = sg_csum_add(sum, sg_sum_buf(sc->data, 0, ulen));
	{
		__u16 c = sg_csum_fold(sum);
		__u16 fixed = c ? c : 0xffff;

		bpf_xdp_store_bytes(ctx, l4 + offsetof(struct udphdr, check), &fixed, 2);
	}
	return XDP_TX;
}

/* Passes everything: on the client's side of a veth for the baselines (a veth delivers XDP_TX
 * frames of its peer only to an end that has an XDP program). */
SEC("xdp")
int sg_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
