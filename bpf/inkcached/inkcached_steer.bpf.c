// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Key steering for inkcached's UDP sockets: an sk_reuseport program that picks the socket of the
 * worker owning the request's first key (xsk_key_hash % workers, the same owner as the AF_XDP
 * path). Requests without a key (stats, version, ...) and datagrams whose key is not in the
 * linear data keep the kernel's 4-tuple hash. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define XSK_HASH_ONLY
#include "xsk.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 n_workers = 1;

/* Index family * n_workers + worker (family 0: IPv4, 1: IPv6): one reuseport group each. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2 * 1024);
} workers SEC(".maps");

/* Datagrams steered by key, and those left to the hash. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} steer_stats SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&steer_stats, &i);

	if (v)
		(*v)++;
}

SEC("sk_reuseport")
int inkcached_steer(struct sk_reuseport_md *ctx)
{
	struct xsk_keybuf *k = xsk_keybuf_get();
	__u32 h = 0, idx, len = xsk_scan_len(ctx->len > 16 ? ctx->len - 16 : 0);

	if (ctx->ip_protocol != IPPROTO_UDP || n_workers == 0) {
		count(1);
		return SK_PASS;
	}
	/* offset 0: the UDP header, then memcached's 8-byte frame header */
	if (k)
		h = XSK_LOAD_HASH(bpf_skb_load_bytes, ctx, 16, k, len);
	if (!h) {
		count(1);
		return SK_PASS;
	}
	idx = h % n_workers;
	if (ctx->eth_protocol == bpf_htons(ETH_P_IPV6))
		idx += n_workers;
	if (bpf_sk_select_reuseport(ctx, &workers, &idx, 0)) {
		count(1);
		return SK_PASS;
	}
	count(0);
	return SK_PASS;
}
