/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Constants the control plane sets before load (the .rodata of every object that includes this
 * header; `inkcache attach` sets them all from its options in one place). */
#ifndef INKCACHE_CONFIG_H
#define INKCACHE_CONFIG_H

/* (the includer provides the __u32/__u64 types: UAPI headers, or vmlinux.h) */

/* Set by the control plane before load. */
const volatile __u32 n_sets = 1024;             /* entries of the sets map */
const volatile __u32 n_segs = 16;               /* arena segments of the log (the ring) */
const volatile __u32 n_slots = 4;               /* hot slots, in the arena segments after them */
const volatile __u64 max_age_ns = 60ULL * 1000000000ULL; /* oldest fill the kernel serves */
const volatile __u32 invalidation_off = 0;      /* debug: for the consistency checker */
const volatile __u32 settle_off = 0;            /* debug: every write uses the quarantine */
/* A write the server will not answer (noreply, UDP, a connection not followed) keeps its set
 * unfillable this long after it arrives, covering the time the server takes to apply it. */
const volatile __u64 quarantine_ns = 1000000000ULL;
/* A write the server has not answered after this long no longer blocks fills (its connection
 * state was lost, or the server is stuck). */
/* The server's network namespace (its cookie; 0: any): the hooks on the root cgroup see every
 * socket of the host and keep to the server's. */
const volatile __u64 netns_cookie = 0;
/* Kernels whose cgroup_skb programs lack bpf_get_netns_cookie (before 2025's): those programs tell
 * the server's packets by their socket instead, marked by the programs that can check the
 * namespace (server_socks: its UDP and listening sockets; conn_marks: its connections). */
const volatile __u32 netns_by_sock = 0;
/* Secret seed of the key hash, random per attach: nobody can craft keys that share an index set. */
const volatile __u64 hash_seed = 0;
const volatile __u64 settle_max_ns = 60000000000ULL;
/* Cooperative mode: the server installs and invalidates (inkcache_coop.bpf.c); the socket-side
 * programs walk no writes and fill nothing, XDP hands what it passes to the server's AF_XDP
 * sockets if it has any (xsk.h). */
const volatile __u32 coop_mode = 0;

/* Set by the control plane before load (--max-amplification): a source outside the allowlist is
 * answered by the kernel only if the reply's UDP payload is at most this many times the
 * request's; 0: such sources are never answered by the kernel. */
const volatile __u32 max_amplification = 0;

/* How XDP writes a reply into the frame (--reply-write): 1, by 8-byte stores (pktcopy.h's
 * pkt_store, no helper call); 0, by bpf_xdp_store_bytes' memcpy. Which is cheaper depends on what
 * a helper's return costs: where the kernel returns through a thunk (AMD's Safe RET), the stores
 * are (docs/results/hitcost.md, twenty-first run). */
const volatile __u32 reply_inline = 0;

const volatile __u32 no_split = 0; /* debug: partly missing multi-key gets pass whole */
/* measurement only (the per-stage cost of a hit, crates/inkcache/tests/unit/cost.rs): XDP passes
 * a get after stage N of its path (STAGE_*); 0, in production, removes every check at load */
const volatile __u32 stop_stage = 0;

#endif
