/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The AF_XDP hand-off to inkcached: a UDP request for inkcached's port, to one of its addresses,
 * that the kernel cache did not answer goes to one of inkcached's AF_XDP sockets through the xsks
 * map instead of up the kernel's UDP stack. Called at one place by inkcache_xdp (a request it
 * passes) and by inkcached's own XDP program when inkcache is not attached (bpf/inkcached/).
 *
 * inkcached fills the three maps: xsk_cfg (its port, workers, steering), xsk_dsts (the
 * destination addresses it serves) and xsks (its sockets, index queue * slots + slot). While
 * xsk_cfg.port is 0, or a socket is missing, every packet goes on to the stack as before. Only
 * plain frames are handed over (no VLAN tag, no IPv4 options or fragments, no IPv6 extension
 * headers), so the user-space side parses exactly Ethernet + IPv4/IPv6 + UDP.
 *
 * With steering on, the socket is picked by the hash of the request's first key (xsk_key_hash),
 * the hash inkcached's sk_reuseport program uses for its UDP sockets: one worker owns each key. */
#ifndef INKCACHE_XSK_H
#define INKCACHE_XSK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "parsing.h"

#define XSK_MAX_SOCKETS 1024 /* queues x workers */
#define XSK_MAX_DSTS 64
#define XSK_KEY_SCAN 272     /* a command word, spaces and a 250-byte key */

#ifndef XSK_HASH_ONLY

/* Layout shared with inkcached (crates/inkcached/src/afxdp.rs reads the skeleton's copy). */
struct xsk_cfg {
	__u16 port;      /* host order; 0: hand nothing over */
	__u16 steer;     /* 1: pick the worker by first-key hash, 0: by queue */
	__u32 slots;     /* sockets per queue (workers when steering, else 1) */
	__u64 redirected; /* packets handed over (approximate: not atomic) */
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, XSK_MAX_SOCKETS);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct xsk_cfg);
	__uint(max_entries, 1);
} xsk_cfg SEC(".maps");

/* Destination addresses served (IPv4 mapped as ::ffff:a.b.c.d); value unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u8[16]);
	__type(value, __u8);
	__uint(max_entries, XSK_MAX_DSTS);
} xsk_dsts SEC(".maps");

#endif /* XSK_HASH_ONLY */

/* The bytes xsk_key_hash reads: copied out of the packet first, so that the scan is one bpf_loop
 * callback (verified once) over plain memory. */
struct xsk_keybuf {
	__u32 len;
	__u32 state; /* 0: command word, 1: spaces, 2: key */
	__u32 h;
	__u32 n;
	__u8 b[512]; /* indexed with i & 511: in bounds for the verifier whatever clang emits */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xsk_keybuf);
	__uint(max_entries, 1);
} xsk_keybuf SEC(".maps");

static long xsk_hash_step(__u32 i, void *ctx)
{
	__u32 zero = 0;
	struct xsk_keybuf *k = bpf_map_lookup_elem(&xsk_keybuf, &zero);
	__u8 c;

	if (!k || i >= k->len || i >= XSK_KEY_SCAN)
		return 1;
	barrier_var(i); /* so that clang keeps the mask the verifier needs */
	c = k->b[i & 511];
	if (k->state == 0) { /* command word */
		if (c == ' ')
			k->state = 1;
		else if (c == '\r' || c == '\n')
			return 1;
		return 0;
	}
	if (c == ' ' || c == '\r' || c == '\n')
		return k->state == 2 || c != ' '; /* the key ends, or there is none */
	k->state = 2;
	k->h = (k->h ^ c) * 16777619u;
	k->n++;
	return 0;
}

/* FNV-1a (32 bits) of the first key of the text request in xsk_keybuf (filled by the caller with
 * the bytes after memcached's frame header): the token after the command word. 0 when there is
 * none (then the caller does not steer). */
static __always_inline __u32 xsk_key_hash(struct xsk_keybuf *k, __u32 len)
{
	k->len = len;
	k->state = 0;
	k->h = 2166136261u;
	k->n = 0;
	bpf_loop(XSK_KEY_SCAN, xsk_hash_step, 0, 0);
	return k->n ? (k->h | 1) : 0;
}

/* How many bytes of a `total`-byte request to scan: 1..XSK_KEY_SCAN, or 0 for none. */
static __always_inline __u32 xsk_scan_len(__u32 total)
{
	return total > XSK_KEY_SCAN ? XSK_KEY_SCAN : total;
}

/* Copies `len` bytes at `off` into k->b with `load` (bpf_xdp_load_bytes, bpf_skb_load_bytes)
 * and hashes them; 0 if that fails. The bounds are re-checked after a compiler barrier so that
 * the verifier sees them on the very register passed to the helper. */
#define XSK_LOAD_HASH(load, ctx, off, k, len)                                                    \
	({                                                                                         \
		__u64 __m = (__u64)(len) - 1; __u32 __h = 0;                                       \
		barrier_var(__m);                                                                  \
		if (__m < XSK_KEY_SCAN && !load(ctx, off, (k)->b, __m + 1))                        \
			__h = xsk_key_hash(k, __m + 1);                                            \
		__h;                                                                               \
	})

/* The scan buffer, or NULL. */
static __always_inline struct xsk_keybuf *xsk_keybuf_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xsk_keybuf, &zero);
}

#ifndef XSK_HASH_ONLY
/* Hands the frame to inkcached's AF_XDP socket if it is one of its UDP requests; otherwise (or if
 * no socket waits) XDP_PASS. A frame carrying XDP metadata was marked for TC ingress by
 * inkcache_xdp and stays on that path. */
static __noinline __attribute__((unused)) int xsk_redirect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	void *meta = (void *)(long)ctx->data_meta;
	struct xsk_cfg *cfg;
	struct pkt p = {};
	__u32 zero = 0, idx, h;

	cfg = bpf_map_lookup_elem(&xsk_cfg, &zero);
	if (!cfg || cfg->port == 0 || cfg->slots == 0)
		return XDP_PASS;
	if (meta < data)
		return XDP_PASS;
	if (parse_packet(data, data_end, &p) != PARSE_OK || p.proto != IPPROTO_UDP ||
	    p.ip_opts || p.l3_off != sizeof(struct ethhdr) || bpf_ntohs(p.dport) != cfg->port)
		return XDP_PASS;
	if (!bpf_map_lookup_elem(&xsk_dsts, p.daddr))
		return XDP_PASS;
	/* the whole datagram must be in this frame (no multi-buffer) */
	if (data + (p.payload_off & 0xffff) + p.payload_len > data_end)
		return XDP_PASS;
	idx = ctx->rx_queue_index * cfg->slots;
	if (cfg->steer && cfg->slots > 1) {
		struct xsk_keybuf *k = xsk_keybuf_get();
		__u32 len = xsk_scan_len(p.payload_len > 8 ? p.payload_len - 8 : 0);

		h = k ? XSK_LOAD_HASH(bpf_xdp_load_bytes, ctx, p.payload_off + 8, k, len) : 0;
		idx += h % cfg->slots;
	}
	cfg->redirected++;
	return bpf_redirect_map(&xsks, idx, XDP_PASS);
}
#endif /* XSK_HASH_ONLY */

#endif
