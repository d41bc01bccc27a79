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

#include "csum.h"

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
	__u8 ip_opts;       /* IPv4 options or IPv6 extension headers: never answered (what the
			     * stack does with them is the host's to decide) */
	__u16 sport;        /* network order */
	__u16 dport;        /* network order */
	__u16 l4_check;     /* the UDP checksum field as it lies in the packet (XDP only) */
	__u16 pad;
	__u8 saddr[16];     /* IPv4 mapped as ::ffff:a.b.c.d */
	__u8 daddr[16];
};

#define IPV6_EXT_MAX 4   /* IPv6 extension headers walked before the transport header */

enum parse_result {
	PARSE_OK = 0,
	PARSE_OTHER,        /* not IP/UDP/TCP, or a fragment: not ours */
	PARSE_BAD,          /* truncated or inconsistent headers */
};

/* ::ffff:a at dst (16 bytes, 4-aligned: struct pkt's addresses, which may be on the stack, where
 * the verifier wants aligned accesses), in four 4-byte stores: cast through void *, as the byte
 * array's alignment would otherwise have clang write it byte by byte. */
static __always_inline void map_v4(__u8 *dst, __be32 a)
{
	*(__u32 *)(void *)dst = 0;
	*(__u32 *)(void *)(dst + 4) = 0;
	*(__be32 *)(void *)(dst + 8) = bpf_htonl(0xffff);
	*(__be32 *)(void *)(dst + 12) = a;
}

/* The IP header at data + off (protocol `proto`: ETH_P_IP or ETH_P_IPV6, network order) and the
 * UDP/TCP header after it. Headers must lie in [data, data_end); lengths are checked against
 * frame_len, the whole packet from data (for an skb, skb->len: its payload may sit outside the
 * linear area). */
static __always_inline int parse_l3(void *data, void *data_end, __u32 frame_len, __u32 off,
				    __u16 proto, struct pkt *p)
{
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
		__u32 end;
		p->ipv6 = 1;
		p->ip_opts = 0;
		p->proto = ip6->nexthdr;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		off += sizeof(*ip6);
		end = off + bpf_ntohs(ip6->payload_len);
		if (end > frame_len)
			return PARSE_BAD;
		/* extension headers before the transport header (a fragment is not ours) */
#pragma unroll
		for (int i = 0; i < IPV6_EXT_MAX; i++) {
			__u8 *x = data + off;
			__u32 xlen;
			if (p->proto != 0 && p->proto != 43 && p->proto != 60 && p->proto != 51)
				break;
			if ((void *)(x + 2) > data_end)
				return PARSE_BAD;
			/* hop-by-hop, routing, destination options: 8-byte units past the first 8;
			 * authentication header: 4-byte units past the first 8 */
			xlen = p->proto == 51 ? ((__u32)x[1] + 2) * 4 : ((__u32)x[1] + 1) * 8;
			p->proto = x[0];
			off += xlen;
			if (off > end)
				return PARSE_BAD;
		}
		if (p->proto == 0 || p->proto == 43 || p->proto == 60 || p->proto == 51)
			return PARSE_BAD; /* more extension headers than we walk */
		/* walked to find the transport header, never answered past: the stack may drop
		 * the packet for them (an option it does not know with a "discard" action, a
		 * routing header, an authentication header with no security association) */
		p->ip_opts = off != p->l3_off + sizeof(*ip6);
		p->l4_off = off;
		p->payload_len = end - off;
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
		p->l4_check = udp->check;
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

/* An Ethernet frame (up to two VLAN tags), then as parse_l3. */
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
	return parse_l3(data, data_end, frame_len, off, proto, p);
}

/* The IP and transport headers of an skb whose data starts at the IP header (cgroup_skb hooks),
 * read with bpf_skb_load_bytes (they may lie outside the linear area, and IPv6 extension headers
 * may be any size): fills p as parse_l3 does. Returns PARSE_*. */
static __always_inline int skb_l3(struct __sk_buff *skb, struct pkt *p)
{
	__u32 off, end;
	__u8 nh;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)))
			return PARSE_BAD;
		if (ip.version != 4 || ip.ihl < 5)
			return PARSE_BAD;
		if (ip.frag_off & bpf_htons(0x3fff))
			return PARSE_OTHER; /* not reassembled: the stack delivers whole datagrams */
		p->ipv6 = 0;
		p->ip_opts = ip.ihl > 5;
		map_v4(p->saddr, ip.saddr);
		map_v4(p->daddr, ip.daddr);
		off = ip.ihl * 4;
		end = bpf_ntohs(ip.tot_len);
		nh = ip.protocol;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)) || ip6.version != 6)
			return PARSE_BAD;
		p->ipv6 = 1;
		p->ip_opts = 0;
		__builtin_memcpy(p->saddr, &ip6.saddr, 16);
		__builtin_memcpy(p->daddr, &ip6.daddr, 16);
		off = sizeof(ip6);
		end = off + bpf_ntohs(ip6.payload_len);
		nh = ip6.nexthdr;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			__u8 x[2];
			if (nh != 0 && nh != 43 && nh != 60 && nh != 51)
				break;
			if (bpf_skb_load_bytes(skb, off, x, 2))
				return PARSE_BAD;
			off += nh == 51 ? ((__u32)x[1] + 2) * 4 : ((__u32)x[1] + 1) * 8;
			nh = x[0];
		}
		if (nh == 0 || nh == 43 || nh == 60 || nh == 51)
			return PARSE_BAD;
	} else {
		return PARSE_OTHER;
	}
	if (end > skb->len || off >= end)
		return PARSE_BAD;
	p->l3_off = 0;
	p->l4_off = off;
	p->proto = nh;
	if (nh == IPPROTO_UDP) {
		struct udphdr udp;
		__u32 ulen;
		if (bpf_skb_load_bytes(skb, off, &udp, sizeof(udp)))
			return PARSE_BAD;
		ulen = bpf_ntohs(udp.len);
		if (ulen < sizeof(udp) || off + ulen > end)
			return PARSE_BAD;
		p->sport = udp.source;
		p->dport = udp.dest;
		p->payload_off = off + sizeof(udp);
		p->payload_len = ulen - sizeof(udp);
	} else if (nh == IPPROTO_TCP) {
		struct tcphdr tcp;
		__u32 doff;
		if (bpf_skb_load_bytes(skb, off, &tcp, sizeof(tcp)))
			return PARSE_BAD;
		doff = tcp.doff * 4;
		if (doff < sizeof(tcp) || off + doff > end)
			return PARSE_BAD;
		p->sport = tcp.source;
		p->dport = tcp.dest;
		p->payload_off = off + doff;
		p->payload_len = end - off - doff;
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
