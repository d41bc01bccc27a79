// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* cgroup socket hooks that empty the cache when the server stops or (re)starts: a listening or UDP
 * socket bound to a cached port is released, or a socket binds to one. Both happen before a new
 * server can answer, and need no user space to be running. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "inkcache_common.h"
#include "config.h"
#include "maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Network namespace of the server (0: any), set by the control plane. */
const volatile __u64 netns_cookie = 0;

/* Sockets bound to a cached port in the server's namespace (the server's own sockets). Sockets it
 * accepts do not inherit the mark (no BPF_F_CLONE), so closing a connection is not a restart. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} server_socks SEC(".maps");

static __always_inline void empty_cache(void)
{
	struct ink_global *g = global_state();

	if (!g)
		return;
	g->flush_ns = bpf_ktime_get_ns();
	/* writes the old server never answered will never be applied: their counts and the
	 * connections they came on are void */
	__sync_fetch_and_add(&g->gen, 1);
	g->flush_open = 0;
	stat_inc(ST_INVALIDATIONS);
	stat_inc(ST_INVAL_RESTART);
}

static __always_inline void bound(struct bpf_sock *sk)
{
	__u16 port = sk->src_port; /* host order */

	if (invalidation_off || !bpf_map_lookup_elem(&ports, &port))
		return;
	if (netns_cookie && bpf_get_netns_cookie(sk) != netns_cookie)
		return;
	bpf_sk_storage_get(&server_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	empty_cache();
}

SEC("cgroup/post_bind4")
int inkcache_bind4(struct bpf_sock *sk)
{
	bound(sk);
	return 1;
}

SEC("cgroup/post_bind6")
int inkcache_bind6(struct bpf_sock *sk)
{
	bound(sk);
	return 1;
}

SEC("cgroup/sock_release")
int inkcache_release(struct bpf_sock *sk)
{
	if (!invalidation_off && bpf_sk_storage_get(&server_socks, sk, 0, 0))
		empty_cache();
	return 1;
}
