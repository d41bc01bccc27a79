/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet parsing shared by the XDP and TC programs: Ethernet, up to two VLAN tags (802.1Q/802.1ad),
 * IPv4 (no fragments) and IPv6 (no extension headers), UDP and TCP. Works on direct packet
 * pointers, so it serves both struct xdp_md and struct __sk_buff. */
#ifndef INKCACHE_PARSING_H
#define INKCACHE_PARSING_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

struct pkt {
	__u32 l3_off;       /* IP header */
	__u32 l4_off;       /* UDP/TCP header */
	__u32 payload_off;  /* first byte after the UDP/TCP header */
	__u32 payload_len;  /* from the IP/UDP lengths, not the frame (which may be padded) */
	__u8 ipv6;
	__u8 proto;         /* IPPROTO_UDP or IPPROTO_TCP */
	__u8 ip_opts;       /* IPv4 header longer than 20 bytes */
	__u8 pad;
	__u16 sport;        /* network order */
	__u16 dport;        /* network order */
	__u8 saddr[16];     /* IPv4 mapped as ::ffff:a.b.c.d */
	__u8 daddr[16];
};

enum parse_result {
	PARSE_OK = 0,
	PARSE_OTHER,        /* not IP/UDP/TCP, or a fragment: not ours */
	PARSE_BAD,          /* truncated or inconsistent headers */
};

static __always_inline void map_v4(__u8 *dst, __be32 a)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &a, 4);
}

/* Headers must lie in [data, data_end); lengths are checked against frame_len, the whole frame
 * (for an skb, skb->len: its payload may sit outside the linear area). */
static __always_inline int parse_frame(void *data, void *data_end, __u32 frame_len, struct pkt *p)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return PARSE_OTHER;
	proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
			struct vlan_hdr *vh = data + off;
			if ((void *)(vh + 1) > data_end)
				return PARSE_BAD;
			proto = vh->encap_proto;
			off += sizeof(*vh);
		}
	}
	p->l3_off = off;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		__u32 ihl, tot;
		if ((void *)(ip + 1) > data_end)
			return PARSE_BAD;
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip) || ip->version != 4)
			return PARSE_BAD;
		if (ip->frag_off & bpf_htons(0x3fff)) /* MF or offset: a fragment */
			return PARSE_OTHER;
		tot = bpf_ntohs(ip->tot_len);
		if (tot < ihl || off + tot > frame_len)
			return PARSE_BAD;
		p->ipv6 = 0;
		p->ip_opts = ihl > sizeof(*ip);
		p->proto = ip->protocol;
		map_v4(p->saddr, ip->saddr);
		map_v4(p->daddr, ip->daddr);
		off += ihl;
		p->l4_off = off;
		p->payload_len = tot - ihl; /* L4 length for now */
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return PARSE_BAD;
		if (ip6->version != 6)
			return PARSE_BAD;
		p->ipv6 = 1;
		p->ip_opts = 0;
		p->proto = ip6->nexthdr;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		off += sizeof(*ip6);
		p->l4_off = off;
		p->payload_len = bpf_ntohs(ip6->payload_len);
		if (off + p->payload_len > frame_len)
			return PARSE_BAD;
	} else {
		return PARSE_OTHER;
	}

	if (p->proto == IPPROTO_UDP) {
		struct udphdr *udp = data + off;
		__u32 ulen;
		if ((void *)(udp + 1) > data_end)
			return PARSE_BAD;
		ulen = bpf_ntohs(udp->len);
		if (ulen < sizeof(*udp) || ulen > p->payload_len)
			return PARSE_BAD;
		p->sport = udp->source;
		p->dport = udp->dest;
		p->payload_off = off + sizeof(*udp);
		p->payload_len = ulen - sizeof(*udp);
	} else if (p->proto == IPPROTO_TCP) {
		struct tcphdr *tcp = data + off;
		__u32 doff;
		if ((void *)(tcp + 1) > data_end)
			return PARSE_BAD;
		doff = tcp->doff * 4;
		if (doff < sizeof(*tcp) || doff > p->payload_len)
			return PARSE_BAD;
		p->sport = tcp->source;
		p->dport = tcp->dest;
		p->payload_off = off + doff;
		p->payload_len -= doff;
	} else {
		return PARSE_OTHER;
	}
	return PARSE_OK;
}

/* A frame whose bytes are all at hand (XDP). */
static __always_inline int parse_packet(void *data, void *data_end, struct pkt *p)
{
	return parse_frame(data, data_end, data_end - data, p);
}

#endif
