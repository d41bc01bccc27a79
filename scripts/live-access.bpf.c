// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* What memory costs an XDP program live on this machine: the echo of bpf/lab/echo.bpf.c (a UDP
 * datagram to port 11211 sent back, XDP_TX) after reads chosen at build time (-D, by
 * scripts/live-access.sh), so that only the reads differ from the echo floor. Measurement only:
 * built and loaded by that script, never by the control plane.
 *
 *   MODE_FIXED: K reads, the same lines on every packet, STRIDE bytes apart (4096: K pages, 64:
 *     K lines of few pages); with DEP each read's address depends on the one before.
 *   MODE_PICK: one read of one of N lines, STRIDE bytes apart, drawn at random for each packet.
 *   MODE_CODE: no reads, but CODE_KB KiB of straight-line code run on every packet (64-bit
 *     constant moves, 10 bytes each once JITed): what code the core must fetch costs live.
 *   MODE_KEY: the get's key (32 bytes after "get ") hashed, then the kernel cache's reads at the
 *     key's places: a set line in the first half of SPAN bytes and a hot slot's two lines in the
 *     second half, in parallel (bpf/table.h's lookup); with BUCKET, the set line and its own
 *     slot's two lines together, one 192-byte bucket of SPAN; with COMPACT, one line in a table
 *     of COMPACT bytes instead.
 *
 * With DIRECT, the same reads go to memory in the kernel's direct map instead of vmalloc's 4 KiB
 * pages: the 1 MiB segments are the values of a hash map without preallocation, each allocated
 * on its own by kmalloc when user space inserts it (the script does, after each attach), and so
 * mapped by the direct map's large pages; an array map's values are vmalloc'ed.
 *
 * With MOVE=G, the frame is then grown by G bytes at the head and shrunk by G at the tail, and
 * its first 128 bytes (headers and request) moved to the new front in 8-byte words, as a reply
 * built in a veth frame is written into grown headroom: the same datagram, in other lines (the
 * script's gets, 88 bytes with their 32-byte keys, are whole words). With EARLY too, the move is
 * made before the reads (the new front's line then waits on memory with them). With HELPERS=G,
 * the head is grown by G bytes and given back, two helper calls and no byte moved. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define SEG (1u << 20) /* one map value: reads are offsets into consecutive values */

#ifndef K
#define K 1
#endif
#ifndef N
#define N 1
#endif
#ifndef STRIDE
#define STRIDE 4096
#endif
#ifndef SPAN
#define SPAN (24u << 20)
#endif

#if defined(MODE_FIXED)
#define BYTES ((__u64)K * STRIDE)
#elif defined(MODE_PICK)
#define BYTES ((__u64)N * STRIDE)
#else
#define BYTES ((__u64)SPAN)
#endif

struct seg {
	__u8 b[SEG];
};

struct {
#ifdef DIRECT
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
#else
	__uint(type, BPF_MAP_TYPE_ARRAY);
#endif
	__type(key, __u32);
	__type(value, struct seg);
	__uint(max_entries, BYTES / SEG + 1);
} mem SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} sink SEC(".maps");

/* Eight bytes at byte `off` of the map (0 outside it). */
static __always_inline __u64 load_at(__u64 off)
{
	__u32 si = off / SEG;
	struct seg *s = bpf_map_lookup_elem(&mem, &si);
	__u64 o = off;

	if (!s)
		return 0;
	asm volatile("" : "+r"(o));
	o &= SEG - 64;
	asm volatile("" : "+r"(o)); /* the mask kept on the register used */
	if (o > SEG - 64)
		return 0;
	return *(volatile __u64 *)((__u8 *)s + o);
}

static __always_inline __u64 reads(struct udphdr *udp, void *data_end)
{
	__u64 acc = 0;

#if defined(MODE_FIXED)
#pragma unroll
	for (int i = 0; i < K; i++) {
#ifdef DEP
		acc += load_at((__u64)i * STRIDE + (acc & 7));
#else
		acc += load_at((__u64)i * STRIDE);
#endif
	}
#elif defined(MODE_PICK)
	acc = load_at((__u64)(bpf_get_prandom_u32() % N) * STRIDE);
#elif defined(MODE_CODE)
#define MOV1 "r1 = 0x1122334455667788 ll\n\t"
#define MOV8 MOV1 MOV1 MOV1 MOV1 MOV1 MOV1 MOV1 MOV1
#define MOV64 MOV8 MOV8 MOV8 MOV8 MOV8 MOV8 MOV8 MOV8
#define MOV102 MOV64 MOV8 MOV8 MOV8 MOV8 MOV8 MOV1 MOV1 MOV1 MOV1 MOV1 MOV1 /* ~1 KiB JITed */
#pragma unroll
	for (int i = 0; i < CODE_KB; i++)
		asm volatile(MOV102 ::: "r1");
#elif defined(MODE_KEY)
	__u64 *k = (void *)(udp + 1) + 12; /* the frame header's 8 bytes, "get " */
	__u64 h = 0x9E3779B97F4A7C15ULL;

	if ((void *)(k + 4) > data_end)
		return 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		h ^= k[i];
		h *= 0xff51afd7ed558ccdULL;
		h ^= h >> 29;
	}
#if defined(COMPACT)
	acc = load_at(((h >> 32) * (COMPACT / 64) >> 32) * 64);
#elif defined(BUCKET)
	__u64 b = ((h >> 32) * (SPAN / 192) >> 32) * 192;

	acc = load_at(b) + load_at(b + 64) + load_at(b + 128);
#else
	__u64 slot = SPAN / 2 + ((h & 0xffffffff) * (SPAN / 2 / 256) >> 32) * 256;

	acc = load_at(((h >> 32) * (SPAN / 2 / 64) >> 32) * 64);
	acc += load_at(slot) + load_at(slot + 64);
#endif
#endif
	return acc;
}

#ifdef MOVE
/* The frame's first 128 bytes (its whole 8-byte words, if it is shorter) moved MOVE bytes toward
 * the front, into headroom grown for them, and the tail cut by as much: 0, or -1 on failure. */
static __always_inline int move_front(struct xdp_md *ctx)
{
	void *data, *data_end;

	if (bpf_xdp_adjust_head(ctx, -MOVE))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		__u64 *from = data + MOVE + 8 * i, *to = data + 8 * i;

		if ((void *)(from + 1) > data_end)
			break;
		*to = *from;
	}
	return bpf_xdp_adjust_tail(ctx, -MOVE);
}
#endif

/* The frame's pointers taken (again, after a helper moved its bounds): 1 if fewer than `extra`
 * bytes follow the UDP header. */
#define FRAME(extra)                                                                   \
	({                                                                             \
		data = (void *)(long)ctx->data;                                        \
		data_end = (void *)(long)ctx->data_end;                                \
		eth = data;                                                            \
		ip = (void *)(eth + 1);                                                \
		udp = (void *)(ip + 1);                                                \
		(void *)(udp + 1) + (extra) > data_end;                                \
	})

SEC("xdp")
int live_access(struct xdp_md *ctx)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	__u32 zero = 0;
	__u64 *out;
	__u8 mac[ETH_ALEN];
	__be32 a;
	__u16 p;

	if (FRAME(8) || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(11211))
		return XDP_PASS;
#if defined(MOVE) && defined(EARLY)
	if (move_front(ctx) || FRAME(8)) /* the reads take the key after the UDP header */
		return XDP_PASS;
#endif
	out = bpf_map_lookup_elem(&sink, &zero);
	if (out)
		*out = reads(udp, data_end); /* kept: the reads are made */
#if defined(MOVE) && !defined(EARLY)
	if (move_front(ctx) || FRAME(0))
		return XDP_PASS;
#endif
#ifdef HELPERS
	/* the two calls of a move (the head grown by HELPERS bytes and given back), no byte of
	 * the frame touched */
	if (bpf_xdp_adjust_head(ctx, -HELPERS) || bpf_xdp_adjust_head(ctx, HELPERS) || FRAME(0))
		return XDP_PASS;
#endif
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	p = udp->source;
	udp->source = udp->dest;
	udp->dest = p;
	udp->check = 0; /* as the echo floor: IPv4 lets UDP go without */
	a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	return XDP_TX;
}

/* For the client's end: a veth delivers XDP_TX's frames only to a peer with an XDP program. */
SEC("xdp")
int live_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
