// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The server's sockets, from cgroup hooks on the root cgroup (kept to the server's namespace and
 * ports), none of which needs user space to be running:
 *  - the server stopping or (re)starting empties the cache: a listening or UDP socket bound to a
 *    cached port is released, or a socket binds to one; both happen before a new server answers;
 *  - one server per attachment: a socket another process binds to a cached port while the
 *    server's are open (a second server, which would share the cache) stops all answers and
 *    fills while it is;
 *  - each TCP connection the server accepts is followed: socket ops open its state in `conns` and
 *    put it in the conn_socks sockhash, whose stream verdict (inkcache_requests.bpf.c) then walks
 *    every byte it delivers to the server; its state goes when it closes (not in cooperative
 *    mode, where the server invalidates what it writes). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"
#include "stream.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";



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

/* Marks a socket bound to a cached port as the server's or another process's (maps.h
 * server_socks). The server is the process that binds while none of the server's sockets is open
 * (a start or a restart), or the one that bound those open (ink_global.server_tgid, which attach
 * sets for the sockets it finds). Another process binding meanwhile is a second server on the
 * port: the two would share one cache, and a get to one could be answered with the other's
 * value, so while its socket is open nothing is answered or filled (counted in `blind`). Two
 * processes binding at the same instant with no server yet are both taken for the server. */
static __always_inline void bound(struct bpf_sock *sk)
{
	__u16 port = sk->src_port; /* host order */
	struct ink_global *g;
	__u32 *v, tgid;

	if (invalidation_off || !server_port(port))
		return;
	if (netns_cookie && bpf_get_netns_cookie(sk) != netns_cookie)
		return;
	v = bpf_sk_storage_get(&server_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	g = global_state();
	if (v && g && !*v) {
		tgid = bpf_get_current_pid_tgid() >> 32;
		if (g->server_n <= 0 || g->server_tgid == tgid) {
			g->server_tgid = tgid;
			*v = SERVER_OWN;
			__sync_fetch_and_add(&g->server_n, 1);
		} else {
			*v = SERVER_OTHER;
			__sync_fetch_and_add(&g->blind, 1);
			stat_inc(ST_SHARED_PORT);
		}
	}
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
	struct ink_global *g;
	__u32 *v;

	if (invalidation_off)
		return 1;
	v = bpf_sk_storage_get(&server_socks, sk, 0, 0);
	if (!v)
		return 1;
	g = global_state();
	if (g && *v == SERVER_OWN)
		__sync_fetch_and_add(&g->server_n, -1);
	else if (g && *v == SERVER_OTHER)
		__sync_fetch_and_add(&g->blind, -1);
	*v = 0;
	empty_cache();
	return 1;
}

/* The connection of socket-ops context o, seen from the server (scratch.ws.ck). */
static __always_inline void ops_conn_key(struct bpf_sock_ops *o, struct scratch *s)
{
	CONN_KEY_OF(o, &s->ws.ck);
}

SEC("sockops")
int inkcache_sockops(struct bpf_sock_ops *o)
{
	struct bpf_sock *sk;
	struct scratch *s;
	__u16 port;

	if (o->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB && o->op != BPF_SOCK_OPS_STATE_CB)
		return 1;
	/* cooperative mode: the server invalidates what it writes; its connections stay off the
	 * sockhash, so their bytes take the plain receive path (no stream parser) */
	if (coop_mode)
		return 1;
	port = (__u16)o->local_port;
	if (!server_port(port))
		return 1;
	if (netns_cookie && bpf_get_netns_cookie(o) != netns_cookie)
		return 1;
	s = get_scratch();
	if (!s)
		return 1;
	ops_conn_key(o, s);
	if (o->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		struct ink_global *g = global_state();
		/* the server accepted it: follow it from its first byte, both ways; beyond
		 * --max-conns it has no state and its bytes are walked on their own */
		conn_open(o->rcv_nxt, o->snd_nxt, CONN_OUT_OK);
		bpf_sock_ops_cb_flags_set(o, BPF_SOCK_OPS_STATE_CB_FLAG);
		sk = o->sk;
		if (netns_by_sock && sk) /* its packets are the server's (server_netns_skb) */
			bpf_sk_storage_get(&conn_marks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!bpf_sock_hash_update(o, &conn_socks, &s->ws.ck, BPF_NOEXIST) || !g)
			return 1;
		/* no room to walk its bytes: its writes would be unseen, so nothing is answered or
		 * filled while it is open (and what is cached now may be changed by it) */
		conn_close(SETTLE_LOST);
		stat_inc(ST_CONN_BLIND);
		sk = o->sk;
		if (sk && bpf_sk_storage_get(&blind_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE))
			__sync_fetch_and_add(&g->blind, 1);
		invalidate_all(ST_INVAL_UNPARSABLE);
		return 1;
	}
	/* a state change: when the connection is closed, the server applies nothing more from it */
	if (o->args[1] == BPF_TCP_CLOSE) {
		struct ink_global *g = global_state();
		conn_close(SETTLE_CLOSED);
		sk = o->sk;
		if (g && sk && bpf_sk_storage_get(&blind_socks, sk, 0, 0)) {
			bpf_sk_storage_delete(&blind_socks, sk);
			__sync_fetch_and_add(&g->blind, -1);
		}
	}
	return 1;
}
