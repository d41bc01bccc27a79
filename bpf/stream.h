/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Following a TCP connection to the server in both directions, so that a write is settled by the
 * server's own answer to it instead of by a time bound.
 *
 * memcached handles a connection's commands in order, applies a write before answering it, and
 * answers every command exactly once (except `noreply`, quiet meta commands and errors, which
 * make the count uncertain). So, followed from the moment the server accepts it:
 *  - the client's byte stream is walked in order where the server's socket receives it (the
 *    sk_skb stream verdict), a command cut by an skb's end carried over to the next; every command
 *    the server will answer gets the next answer index, and a write records (answer index, key's
 *    set) in the connection's FIFO and counts as open in the set, which then refuses fills;
 *  - at egress (cgroup_skb) the server's byte stream is walked the same way, answers counted (a VALUE
 *    line is part of a get's answer, its data skipped by length; END closes it); once answer i
 *    has passed, every write with index <= i is applied, so its set may fill again with replies
 *    to requests that arrive from then on.
 * Anything that breaks the count (a gap in the sequence, an unknown command, a quiet meta
 * command, an error answer, a line too long to carry, a full FIFO) makes the connection "lost":
 * its pending writes and all its later ones fall back to the quarantine (quarantine_ns). A
 * server FIN or RST settles everything (the server applies nothing more on that connection). */
#ifndef INKCACHE_STREAM_H
#define INKCACHE_STREAM_H

#include "inkcache_common.h"
#include "maps.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"

#define DIR_IN  0   /* client -> server */
#define DIR_OUT 1   /* server -> client */

/* Bytes of a segment walked per step; a carried line (<= PART_MAX < 512) goes before them. */
#define CHUNK (SCRATCH_LEN - 512)
/* Steps per segment: up to 64 KiB (GSO on loopback and veth egress) plus skipped data. */
#define CHUNKS_MAX 48

/* A chunk's length n (1..CHUNK, checked by the caller) restated as arithmetic the verifier
 * follows: older verifiers (6.1) learn no lower bound from `n != 0` or a signed compare, and a
 * helper's size argument must not be 0. Identity for 1..2048; the scratch map's value has room
 * for buf[part <= 511] plus 2048. */
static __always_inline __u32 chunk_len(__u32 n)
{
	barrier_var(n);
	return ((n - 1) & 2047) + 1;
}

/* A walk over scratch.buf[pos, len) (the client's commands at ingress, the server's answers at
 * egress), one line per bpf_loop iteration: `ret` is where it stopped (the start of a line not
 * complete yet, or len), or -1 when it could not be sure. */
struct walk {
	__u32 pos;
	__u32 len;
	int ret;
	__u32 pad;
};

static __always_inline long walk_stop(struct walk *w, int ret)
{
	w->ret = ret;
	return 1;
}

/* scratch.ws.ck for a packet: `to_server` when the client is the source. */
static __always_inline void conn_key(struct scratch *s, struct pkt *p, int to_server)
{
	if (to_server) {
		__builtin_memcpy(s->ws.ck.caddr, p->saddr, 16);
		__builtin_memcpy(s->ws.ck.saddr, p->daddr, 16);
		s->ws.ck.cport = p->sport;
		s->ws.ck.sport = p->dport;
	} else {
		__builtin_memcpy(s->ws.ck.caddr, p->daddr, 16);
		__builtin_memcpy(s->ws.ck.saddr, p->saddr, 16);
		s->ws.ck.cport = p->dport;
		s->ws.ck.sport = p->sport;
	}
}

/* A connection to the server, followed from the client's byte `in_seq` and the server's
 * `out_seq` on, with CONN_* `flags`. */
__noinline int conn_open(__u32 in_seq, __u32 out_seq, __u32 flags)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;

	if (!s || !g)
		return -1;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (c) {
		/* a SYN again: retransmitted, or the port reused; what was pending falls back */
		settle(0, SETTLE_LOST);
		bpf_map_delete_elem(&conns, &s->ws.ck);
	}
	/* the value is too big for the BPF stack: insert zeros, then fill in */
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c) {
		_Static_assert(sizeof(struct ink_conn) <= OUT_LEN, "scratch.out holds a connection");
		__builtin_memset(s->out, 0, sizeof(struct ink_conn));
		if (bpf_map_update_elem(&conns, &s->ws.ck, s->out, BPF_NOEXIST)) {
			stat_inc(ST_CONN_UNTRACKED);
			return -1;
		}
		c = bpf_map_lookup_elem(&conns, &s->ws.ck);
		if (!c)
			return -1;
	}
	c->flags = flags;
	c->gen = (__u32)g->gen;
	c->in_seq = in_seq;
	c->in_busy = 0;
	c->in_skip = 0;
	c->in_cmds = 0;
	c->in_part_len = 0;
	c->in_long = 0;
	c->out_busy = 0;
	c->out_seq = out_seq;
	c->out_skip = 0;
	c->out_answers = 0;
	c->out_part_len = 0;
	c->fifo_head = 0;
	c->fifo_tail = 0;
	stat_inc(ST_CONN_TRACKED);
	return 0;
}

/* The connection's answers can no longer be counted (`flag` CONN_INEXACT), or its stream not be
 * followed at all (CONN_DESYNC): its pending writes fall back to the quarantine, and so do its
 * later ones. */
__noinline int conn_lost(__u32 flag)
{
	struct scratch *s = get_scratch();
	struct ink_conn *c;

	if (!s)
		return 0;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return 0;
	if (!(c->flags & (CONN_DESYNC | CONN_INEXACT))) {
		settle(0, SETTLE_LOST);
		stat_inc(ST_CONN_DESYNC);
	}
	__sync_fetch_and_or(&c->flags, flag);
	return 0;
}

/* The connection ends (`how`: SETTLE_CLOSED when the server closed it, SETTLE_LOST when the client
 * reset it while the server may still apply what it read). */
__noinline int conn_close(__u32 how)
{
	struct scratch *s = get_scratch();
	struct ink_conn *c;

	if (!s)
		return 0;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return 0;
	if (!(c->flags & (CONN_DESYNC | CONN_INEXACT)))
		settle(0, how);
	bpf_map_delete_elem(&conns, &s->ws.ck);
	return 0;
}

/* Moves scratch.buf[from, from + n) to scratch.buf[0, n) (n <= PART_MAX; ascending copy, safe
 * since the destination is below the source). */
__noinline int buf_shift(__u32 from, __u32 n)
{
	struct scratch *s = get_scratch();

	if (!s || n > PART_MAX || from == 0)
		return 0;
	for (__u32 i = 0; i < PART_MAX / 8; i++) {
		__u32 o = i * 8;
		if (o >= n)
			break;
		STORE64(&s->buf[o], LOAD64(&s->buf[(from + o) & BUF_MASK]));
	}
	return 0;
}

/* After a walk of scratch.buf[0, end) stopped at r: carries the cut line [r, end) to the front of
 * the buffer for the next step. Returns its length, or -1 if it is longer than we carry. */
static __always_inline int stream_carry(__u32 r, __u32 end)
{
	if (end - r > PART_MAX)
		return -1;
	buf_shift(r, end - r);
	return end - r;
}

/* Carries scratch.buf[0, n) over to the next segment of direction `dir` (save), or puts the
 * carried bytes back at scratch.buf[0, n) (load). */
__noinline int part_io(__u32 dir, __u32 n, __u32 save)
{
	struct scratch *s = get_scratch();
	struct ink_conn *c;
	__u8 *part;

	if (!s || n > PART_MAX)
		return -1;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return -1;
	part = dir == DIR_IN ? c->in_part : c->out_part;
	for (__u32 i = 0; i < PART_MAX / 8; i++) {
		__u32 o = i * 8;
		if (o >= n)
			break;
		if (save)
			STORE64(&part[o], LOAD64(&s->buf[o]));
		else
			STORE64(&s->buf[o], LOAD64(&part[o]));
	}
	return 0;
}

#endif
