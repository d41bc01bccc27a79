// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Socket iterators the control plane runs once at attach, for what existed before it: the
 * server's listening and UDP sockets on cached ports are marked as its own (so that the server
 * dying empties the cache however long it has been running), and its established connections are
 * put in the conn_socks sockhash (so that every byte they deliver from now on is walked; where
 * their streams stand is not known, so those bytes are walked on their own and their writes use
 * the quarantine). Built against the running kernel's BTF (vmlinux.h, from build.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "config.h"
#include "maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TCP_ESTABLISHED_ 1
#define TCP_LISTEN_      10
#define AF_INET_         2

/* Whether a socket is on a cached port in the server's namespace. */
static __always_inline int cached(struct sock_common *skc)
{
	__u16 port = BPF_CORE_READ(skc, skc_num); /* host order */

	if (!server_port(port))
		return 0;
	return !netns_cookie || BPF_CORE_READ(skc, skc_net.net, net_cookie) == netns_cookie;
}

/* Marks a socket found on a cached port as the server's, and counts it (inkcache_sock.bpf.c):
 * attach refused a port two servers hold (crates/inkcache/src/servers.rs) and set
 * ink_global.server_tgid to the server's process. */
static __always_inline void mark_server(void *sk)
{
	struct ink_global *g = global_state();
	__u32 *v = bpf_sk_storage_get(&server_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (v && g && !*v) {
		*v = SERVER_OWN;
		__sync_fetch_and_add(&g->server_n, 1);
	}
}

SEC("iter/tcp")
int inkcache_iter_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct ink_conn_key k = {};
	struct tcp_sock *tp;
	__u8 state;

	if (!skc || !cached(skc))
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	state = BPF_CORE_READ(skc, skc_state);
	if (state == TCP_LISTEN_) {
		mark_server(tp);
		return 0;
	}
	if (state != TCP_ESTABLISHED_ || coop_mode) /* cooperative: nothing to walk */
		return 0;
	if (BPF_CORE_READ(skc, skc_family) == AF_INET_) {
		__u32 d = BPF_CORE_READ(skc, skc_daddr), l = BPF_CORE_READ(skc, skc_rcv_saddr);
		k.caddr[10] = 0xff;
		k.caddr[11] = 0xff;
		k.saddr[10] = 0xff;
		k.saddr[11] = 0xff;
		__builtin_memcpy(&k.caddr[12], &d, 4);
		__builtin_memcpy(&k.saddr[12], &l, 4);
	} else {
		BPF_CORE_READ_INTO(&k.caddr, skc, skc_v6_daddr);
		BPF_CORE_READ_INTO(&k.saddr, skc, skc_v6_rcv_saddr);
	}
	k.cport = BPF_CORE_READ(skc, skc_dport);
	k.sport = bpf_htons(BPF_CORE_READ(skc, skc_num));
	/* no state in `conns`: the stream verdict walks its bytes on their own */
	bpf_map_update_elem(&conn_socks, &k, tp, BPF_NOEXIST);
	if (netns_by_sock) /* its packets are the server's (maps.h server_netns_skb) */
		bpf_sk_storage_get(&conn_marks, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	return 0;
}

SEC("iter/udp")
int inkcache_iter_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp = ctx->udp_sk;

	if (!udp || !cached((struct sock_common *)udp))
		return 0;
	mark_server(udp);
	return 0;
}
