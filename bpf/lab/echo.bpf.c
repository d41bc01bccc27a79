// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The XDP echo floor of inklab's benchmarks: a memcached UDP request to `port` is sent back where
 * it came from (MACs, IP addresses and UDP ports swapped, XDP_TX) with its payload unchanged. This is the least
 * work any in-kernel answer on this path can do, so it measures the physical limit that the
 * kernel cache is compared with.
 *
 * Checksums: swapping source and destination (addresses and ports) leaves the one's-complement
 * sum of the IPv4 header unchanged. The UDP checksum of a request sent by a local socket over veth
 * is only the pseudo-header part (CHECKSUM_PARTIAL, offloaded), which the receiver of the echo
 * would reject, so it is zeroed (allowed for UDP over IPv4). IPv6 requires a full UDP checksum,
 * which would mean summing the payload here: IPv6 requests are passed, not echoed. The TTL is
 * left alone (the reply goes back over the same link).
 *
 * The second program, inkbench_pass, is XDP_PASS for everything: for the peer end (a veth only
 * delivers frames that XDP_TX sends back when the peer has an XDP program of its own) and for the
 * stock-memcached baseline, so that every configuration takes the same NAPI path.
 *
 * Built into a skeleton by crates/inklab/build.rs (each bpf/lab/ source), not by the control
 * plane. The program names appear in inklab's per-program cost tables. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* UDP port to echo (host order); set before loading. */
const volatile __u16 port = 11211;

static __always_inline void swap_mac(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

static __always_inline int swap_udp(struct udphdr *udp, void *data_end)
{
	__u16 p;

	if ((void *)(udp + 1) > data_end)
		return -1;
	if (udp->dest != bpf_htons(port))
		return -1;
	/* 8-byte memcached frame header at least */
	if ((void *)(udp + 1) + 8 > data_end)
		return -1;
	p = udp->source;
	udp->source = udp->dest;
	udp->dest = p;
	return 0;
}

SEC("xdp")
int inkbench_echo(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__be32 a;

		if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
			return XDP_PASS;
		/* fragments are not ours */
		if (ip->frag_off & bpf_htons(0x3fff))
			return XDP_PASS;
		if (swap_udp((void *)(ip + 1), data_end))
			return XDP_PASS;
		((struct udphdr *)(ip + 1))->check = 0;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
	} else {
		return XDP_PASS;
	}
	swap_mac(eth);
	return XDP_TX;
}

SEC("xdp")
int inkbench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
