/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Maps shared by every inkcache program. Each .bpf.c includes this header; user space creates the
 * maps once (with the XDP skeleton) and hands the same fds to the other skeletons, so all programs
 * of one attachment see one cache. Sizes here are defaults: the control plane sets max_entries
 * from the command line before loading. */
#ifndef INKCACHE_MAPS_H
#define INKCACHE_MAPS_H

#include "inkcache_common.h"
#include "config.h"

/* Process-wide state: flush_all and server restarts move flush_ns forward; entries filled and
 * requests seen before it are void. */
struct ink_global {
	__u64 flush_ns;
	__u64 fill_block_until; /* flush_all <delay>: no fills until the delayed flush has happened */
	__s64 realtime_off_ns;  /* CLOCK_REALTIME - CLOCK_MONOTONIC, set at attach (absolute exptimes) */
	__u32 hint_overflow;    /* ttl_hints was full once: keys without a hint are not cached */
	__u32 server_tgid;      /* the process binding the server's sockets (inkcache_sock.bpf.c;
				 * set at attach for those found then) */
	__u64 gen;              /* server generation: a restart voids every set's open count */
	__s64 flush_open;       /* flush_all commands the server has not answered yet */
	__u64 hint_gen;         /* bumped when a segment could not be parsed: it may have changed
				 * any key's expiry, so hints recorded before are no longer trusted */
	__u64 flush_open_since; /* arrival of the latest of them */
	__s64 blind;            /* connections to the server whose bytes cannot be walked (no room
				 * in conn_socks), and sockets another process bound to a cached
				 * port (a second server): while any is open, nothing is answered or
				 * filled */
	__s64 server_n;         /* the server's sockets open (server_socks marked SERVER_OWN) */
	__u64 pad1[2];          /* keep the arena head (written by every fill) off this cache line */
	__u64 head;             /* arena log head, 16-byte units; only grows */
};

/* The index: sets of WAYS ways (see inkcache_common.h). --cache-mb decides the size. Mmapable
 * for the placement only (values from a page boundary: each 64-byte set is one cache line). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_set);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_MMAPABLE);
} sets SEC(".maps");

/* Each set's coherence state and lock (same index and size as `sets`). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_set_state);
	__uint(max_entries, 1024);
} set_state SEC(".maps");

/* The arena: the log of item bytes, in segments. --cache-mb decides the size. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_seg);
	__uint(max_entries, 16);
} arena SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, ST_MAX);
} stats SEC(".maps");

/* The server's ports: a bitmap of every port (8 KiB), one array element, so that a packet's port
 * is checked with one load and no hash (the verifier inlines array lookups). */
struct ink_ports {
	__u64 bits[65536 / 64];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_ports);
	__uint(max_entries, 1);
} ports SEC(".maps");

/* Whether `port` (host order) is one of the server's. */
static __always_inline int server_port(__u16 port)
{
	__u32 zero = 0;
	struct ink_ports *m = bpf_map_lookup_elem(&ports, &zero);

	return m && (m->bits[(port >> 6) & 1023] >> (port & 63)) & 1;
}

/* Sources the kernel may answer. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct ink_lpm_key);
	__type(value, __u8);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} allow SEC(".maps");

/* TCP connections to the server followed from their SYN. --max-conns decides the size; a
 * connection that finds it full is not followed (its writes use the quarantine). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ink_conn_key);
	__type(value, struct ink_conn);
	__uint(max_entries, 4096);
} conns SEC(".maps");

/* A connection as a socket context names it (an skb's, a socket-ops context's: their fields
 * have the same names), seen from the server, into struct ink_conn_key *ck. Macros, so that each
 * field is read from its own context type, and with one 4-byte context load per word (map_v4:
 * parsing.h, which every program including this one includes first). */
#define CTX_IP6(dst, words)                                                                       \
	do {                                                                                      \
		__u32 a_[4];                                                                      \
		a_[0] = (words)[0];                                                               \
		barrier_var(a_[0]); /* one 4-byte context load each */                            \
		a_[1] = (words)[1];                                                               \
		barrier_var(a_[1]);                                                               \
		a_[2] = (words)[2];                                                               \
		barrier_var(a_[2]);                                                               \
		a_[3] = (words)[3];                                                               \
		barrier_var(a_[3]);                                                               \
		__builtin_memcpy(dst, a_, 16);                                                    \
	} while (0)
#define CONN_KEY_OF(c, ck)                                                                        \
	do {                                                                                      \
		__builtin_memset(ck, 0, sizeof(*(ck)));                                           \
		if ((c)->family == 2 /* AF_INET */) {                                             \
			map_v4((ck)->caddr, (c)->remote_ip4);                                     \
			map_v4((ck)->saddr, (c)->local_ip4);                                      \
		} else {                                                                          \
			CTX_IP6((ck)->caddr, (c)->remote_ip6);                                    \
			CTX_IP6((ck)->saddr, (c)->local_ip6);                                     \
		}                                                                                 \
		/* the remote port in network order, in the upper half */                        \
		(ck)->cport = (__u16)((c)->remote_port >> 16);                                    \
		(ck)->sport = bpf_htons((__u16)(c)->local_port);                                  \
	} while (0)

/* Every connection to the server (same keys as conns): the stream verdict program attached to
 * this sockhash walks the bytes each of them delivers to the server. Connections also followed
 * in `conns` are walked as streams, the others (accepted before attach, or beyond --max-conns)
 * byte run by byte run. Sized for every connection the server may hold (--max-sockets). */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__type(key, struct ink_conn_key);
	__type(value, __u64);
	__uint(max_entries, 65536);
} conn_socks SEC(".maps");

/* UDP writes waiting for their answers (--pending bounds it too). An entry evicted before its
 * answer leaves its set blocked until --settle-max. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ink_req_key);
	__type(value, struct ink_udp_write);
	__uint(max_entries, 65536);
} udp_writes SEC(".maps");

/* Get requests passed to the server; their replies may fill the cache. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ink_req_key);
	__type(value, struct ink_req_val);
	__uint(max_entries, 65536);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_global);
	__uint(max_entries, 1);
} global SEC(".maps");

/* What the kernel knows of keys written since attach (struct ink_hint), by key hash. A key
 * without an entry was not written since attach: it is served at most max_age after its fill.
 * Entries are allocated as keys are written (--ttl-hints bounds them). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct ink_hint);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} ttl_hints SEC(".maps");

/* The sockets bound to a cached port in the server's namespace (marked when they bind, or by the
 * iterators at attach): SERVER_OWN, the server's; SERVER_OTHER, another process's (a second
 * server: inkcache_sock.bpf.c). Sockets a server accepts do not inherit the mark (no
 * BPF_F_CLONE), so closing a connection is not a restart. */
#define SERVER_OWN   1
#define SERVER_OTHER 2
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} server_socks SEC(".maps");

/* The server's connections (accepted, or found at attach), marked where the namespace is known,
 * for the cgroup_skb programs of kernels that cannot check it (config.h netns_by_sock). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} conn_marks SEC(".maps");

/* Connections to the server that could not be put in conn_socks (their bytes are not walked):
 * counted in global.blind while they are open. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} blind_socks SEC(".maps");

/* The control plane's record of an attachment (JSON), read by `inkcache status` and `detach`.
 * No program touches it. */
struct ink_meta {
	char json[4096];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ink_meta);
	__uint(max_entries, 64); /* one record per interface attached together (MAX_GROUP) */
} meta SEC(".maps");

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += 1;
}

static __always_inline struct ink_global *global_state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&global, &zero);
}

/* Whether a packet seen by a cgroup_skb program belongs to the server's namespace: its cookie
 * where the kernel gives it, else its socket's mark (netns_by_sock). */
static __always_inline int server_netns_skb(struct __sk_buff *skb)
{
	struct bpf_sock *sk;

	if (!netns_cookie)
		return 1;
	if (!netns_by_sock)
		return bpf_get_netns_cookie(skb) == netns_cookie;
	sk = skb->sk;
	if (!sk)
		return 0;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 0;
	return bpf_sk_storage_get(&server_socks, sk, 0, 0) || bpf_sk_storage_get(&conn_marks, sk, 0, 0);
}

#endif
