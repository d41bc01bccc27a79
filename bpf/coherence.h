/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Coherence: what keeps the kernel from serving a value older than an acknowledged write, or an
 * expired one. Expiry hints learned from mutations; invalidation of a key (or of everything) before
 * the server sees the write; settling, when the server's answer to a write passes egress (followed
 * connections' FIFOs, UDP writes by request id) or the quarantine runs out. */
#ifndef INKCACHE_COHERENCE_H
#define INKCACHE_COHERENCE_H

#include "inkcache_common.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"

#define HINT_KEEP   0ULL   /* invalidate_key: leave the key's expiry as it is */
#define HINT_DELETE 2ULL   /* invalidate_key: the key is gone (delete) */

/* memcached exptime -> kernel expiry (ktime ns), two seconds early. memcached's clock is whole
 * seconds of the monotonic clock, read by a timer every second: a relative exptime counts from
 * the last tick's second, up to 1 s before the write, and the timer, re-armed a little late each
 * time, now and then crosses a second boundary and moves the clock on by 2 at once. So an item
 * may expire up to ~2 s before write + exptime (with one second early, a CI run caught the
 * kernel serving an item memcached had expired: docs/architecture.md, Expiry). */
static __always_inline __u64 exptime_to_ns(__s64 e, __u64 now, struct ink_global *g)
{
	__s64 mono;

	if (e == 0)
		return EXP_NEVER;
	if (e <= 2)
		return EXP_UNKNOWN; /* negative: already expired; 1-2 s: too short to serve */
	if (e <= 2592000)
		return now + (__u64)(e - 2) * NS_PER_SEC;
	mono = e * NS_PER_SEC - g->realtime_off_ns - 2 * NS_PER_SEC; /* absolute unix time */
	if (mono <= (__s64)now)
		return EXP_UNKNOWN;
	return (__u64)mono;
}

/* A ttl_hints value: the expiry in ms (rounded down: early is safe) and the hint generation it
 * was recorded in, packed in one u64 so that readers never see half an update. */
#define HINT_MS_BITS 44
#define HINT_MS_NEVER ((1ULL << HINT_MS_BITS) - 1)
#define HINT_GEN_MASK ((1ULL << (64 - HINT_MS_BITS)) - 1)

static __always_inline __u64 hint_pack(__u64 exp, __u64 gen)
{
	__u64 ms = exp == EXP_NEVER ? HINT_MS_NEVER : exp / 1000000;

	if (ms > HINT_MS_NEVER)
		ms = HINT_MS_NEVER - 1;
	return ((gen & HINT_GEN_MASK) << HINT_MS_BITS) | ms;
}

static __always_inline __u64 hint_exp(__u64 v)
{
	__u64 ms = v & HINT_MS_NEVER;

	return ms == HINT_MS_NEVER ? EXP_NEVER : ms * 1000000;
}

static __always_inline int hint_trusted(__u64 v, struct ink_global *g)
{
	return (v >> HINT_MS_BITS) == (g->hint_gen & HINT_GEN_MASK);
}

/* What a write does to the meta state of the key's item (invalidate_key_x's `meta`). */
#define META_KEEP  0   /* unchanged (the item may stay as it was) */
#define META_DIRTY 1   /* may set meta state (mg N/R, md I, ms I) */
#define META_CLEAN 2   /* replaces the item: a fresh item has none */

/* hint_get results */
#define HG_NONE   0    /* not written since attach (or forgotten by a delete) */
#define HG_MINE   1    /* the key's own hint: scratch.hint */
#define HG_SHARED 2    /* keys whose hashes collide share the entry: none is served */

/* Whether hint `x` is that of the key at scratch.buf[off, off + len). */
static __always_inline int hint_is(struct scratch *s, struct ink_hint *x, __u32 off, __u32 len)
{
	if (x->klen != len)
		return 0;
	for (__u32 i = 0; i < KEY_ROOM / 8; i++) {
		__u32 o = i * 8;
		if (o >= len)
			break;
		if (low_bytes(LOAD64(&x->key[o & (KEY_ROOM - 8)]) ^ word_at(s, off + o), len - o))
			return 0;
	}
	return 1;
}

/* The hint of the key at scratch.buf[off, off + len) (hash h): HG_*, with HG_MINE its packed
 * expiry and meta mark in scratch.hint. */
__noinline int hint_get(__u32 off, __u32 len, __u64 h)
{
	struct scratch *s = get_scratch();
	struct ink_hint *x;

	if (!s || len == 0 || len > KEY_MAX)
		return HG_SHARED;
	x = bpf_map_lookup_elem(&ttl_hints, &h);
	if (!x)
		return HG_NONE;
	if (!hint_is(s, x, off, len))
		return HG_SHARED;
	s->hint.v = x->v;
	s->hint.meta = x->meta;
	return HG_MINE;
}

/* The expiry the kernel may use for the key at scratch.buf[off, off + len) when filling at `now`:
 * its hint if trusted; else (written before attach, or a segment since could not be parsed) at
 * most max_age from now, and not after an untrusted hint either; EXP_UNKNOWN (do not cache) for a
 * shared hint, or a key without one once ttl_hints overflowed. scratch.hint.meta_ok says whether
 * the item surely carries no meta state (a trusted hint of a key whose writes cleared it). */
static __always_inline __u64 fill_expiry(__u32 off, __u32 len, __u64 h, __u64 now,
					 struct ink_global *g)
{
	struct scratch *s = get_scratch();
	int r = hint_get(off, len, h);
	__u64 exp;

	if (!s)
		return EXP_UNKNOWN;
	s->hint.meta_ok = 0;
	if (r == HG_SHARED)
		return EXP_UNKNOWN;
	if (r == HG_MINE && hint_trusted(s->hint.v, g)) {
		s->hint.meta_ok = !s->hint.meta;
		return hint_exp(s->hint.v);
	}
	if (r == HG_NONE && g->hint_overflow)
		return EXP_UNKNOWN;
	exp = now + max_age_ns;
	if (r == HG_MINE && hint_exp(s->hint.v) < exp)
		exp = hint_exp(s->hint.v);
	return exp;
}

/* Expiry to record for a write to the key at scratch.buf[off, off + len) that either leaves its
 * item as it was or gives it expiry `exp`, when we cannot know which (add, cas, meta writes with a
 * mode, a CAS or vivify, binary equivalents): the earlier of the two, so the kernel never serves
 * past either. Without a trusted hint the old expiry is unknown (bounded by max_age from now). */
static __always_inline __u64 exp_either(__u32 off, __u32 len, __u64 h, __u64 exp)
{
	struct ink_global *g = global_state();
	__u64 old;

	if (!g)
		return EXP_UNKNOWN;
	if (exp == EXP_NEVER || exp == HINT_KEEP)
		return HINT_KEEP; /* the old expiry, whatever it is, is the earlier */
	old = fill_expiry(off, len, h, bpf_ktime_get_ns(), g);
	return old < exp ? old : exp;
}

/* Records a write to the key at scratch.buf[off, off + len): its expiry becomes `exp` (HINT_KEEP:
 * unchanged, HINT_DELETE: the key is gone), its meta state changes as `meta` (META_*). */
static __always_inline int hint_put(__u32 off, __u32 len, __u64 h, __u64 exp, __u32 meta)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_hint *x;
	__u64 v;

	if (!s || !g || len == 0 || len > KEY_MAX)
		return -1;
	if (exp == HINT_KEEP && meta != META_DIRTY)
		return 0;
	x = bpf_map_lookup_elem(&ttl_hints, &h);
	if (!x && exp != HINT_DELETE) {
		/* a new entry: the key and its hint. HINT_KEEP on a key not written since attach:
		 * its expiry is unknown, bounded by max_age from now; its meta state is unknown unless
		 * the write replaces the item. */
		struct ink_hint *n = &s->hint_new;
		n->v = hint_pack(exp == HINT_KEEP ? bpf_ktime_get_ns() + max_age_ns : exp, g->hint_gen);
		n->klen = len;
		n->meta = meta != META_CLEAN;
		for (__u32 i = 0; i < KEY_ROOM / 8; i++) {
			__u32 o = i * 8;
			if (o >= len)
				break;
			STORE64(&n->key[o & (KEY_ROOM - 8)], low_bytes(word_at(s, off + o), len - o));
		}
		if (!bpf_map_update_elem(&ttl_hints, &h, n, BPF_NOEXIST))
			return 0;
		x = bpf_map_lookup_elem(&ttl_hints, &h); /* another CPU won the insert */
		if (!x) {
			g->hint_overflow = 1; /* full: keys without a hint are no longer cached */
			return -1;
		}
	}
	if (!x || x->klen == HINT_SHARED)
		return 0;
	if (!hint_is(s, x, off, len)) {
		x->klen = HINT_SHARED; /* another key's: from now on neither is served */
		return 0;
	}
	if (exp == HINT_DELETE) {
		bpf_map_delete_elem(&ttl_hints, &h);
		return 0;
	}
	if (exp != HINT_KEEP) {
		v = hint_pack(exp, g->hint_gen);
		if (x->v != v)
			x->v = v; /* one 8-byte store: readers see the old or the new hint */
	}
	if (meta == META_DIRTY && !x->meta)
		x->meta = 1;
	else if (meta == META_CLEAN && x->meta)
		x->meta = 0;
	return 0;
}

/* Records, on the connection being walked (scratch.ws.ck), that the write to the key of set
 * `set` is settled by the connection's answer number scratch.ws.cmds. -1 if it cannot. */
__noinline int fifo_push(__u32 set)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;
	__u64 t;

	if (!s || !g)
		return -1;
	if (s->ws.udp) {
		/* a UDP write: settled by the answer that echoes its request id (one entry per
		 * request id: if one is still waiting, the new write uses the quarantine) */
		struct ink_udp_write w = {
			.ts_ns = bpf_ktime_get_ns(), .set = set, .gen = (__u32)g->gen,
		};
		return bpf_map_update_elem(&udp_writes, &s->ws.rk, &w, BPF_NOEXIST) ? -1 : 0;
	}
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return -1;
	t = c->fifo_tail;
	if (t - c->fifo_head >= CONN_FIFO)
		return -1;
	c->fifo[t & (CONN_FIFO - 1)].answer = s->ws.cmds;
	c->fifo[t & (CONN_FIFO - 1)].set = set;
	__sync_fetch_and_add(&c->fifo_tail, 1); /* publishes the entry (full barrier) */
	return 0;
}

#define FLUSH_SET 0xffffffff /* a FIFO entry for a flush_all: the whole cache, not one set */

#define SETTLE_ANSWERED 0   /* entries whose answer has been seen (index < upto) */
#define SETTLE_CLOSED   1   /* all: the server closed the connection, nothing more is applied */
#define SETTLE_LOST     2   /* all, by the quarantine: the stream can no longer be followed */

/* One write is settled: the set `idx` (or, for FLUSH_SET, the whole cache) was open for it and
 * may fill again with replies to requests that arrive from `stable` on. */
static __always_inline void settle_write(struct ink_global *g, __u32 idx, __u64 stable)
{
	struct ink_set_state *st;

	if (idx == FLUSH_SET) {
		/* requests that arrived before the flush was applied may carry flushed values */
		if (g->flush_ns < stable)
			g->flush_ns = stable;
		__sync_fetch_and_add(&g->flush_open, -1);
		return;
	}
	st = state_of(idx);
	if (!st)
		return;
	bpf_spin_lock(&st->lock);
	if (st->gen == (__u32)g->gen && st->open)
		st->open--;
	if (st->stable_since < stable)
		st->stable_since = stable;
	bpf_spin_unlock(&st->lock);
}

/* Settles the pending writes of connection scratch.ws.ck: their sets may fill again with
 * replies to requests that arrive from now on (SETTLE_LOST: from now + quarantine). */
__noinline int settle(__u32 upto, __u32 how)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;
	__u64 now, stable, h, t;

	if (!s || !g)
		return 0;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return 0;
	now = bpf_ktime_get_ns();
	stable = how == SETTLE_LOST ? now + quarantine_ns : now;
	t = __sync_fetch_and_add(&c->fifo_tail, 0);
	h = c->fifo_head;
	if (c->gen != (__u32)g->gen) /* counted for a server that is gone: nothing to undo */
		h = t;
	for (__u32 i = 0; i < CONN_FIFO; i++) {
		struct ink_pending_write e;
		if (h == t)
			break;
		e = c->fifo[h & (CONN_FIFO - 1)];
		if (how == SETTLE_ANSWERED && (int)(e.answer - upto) >= 0)
			break;
		h++;
		settle_write(g, e.set, stable);
		stat_inc(how == SETTLE_LOST ? ST_QUARANTINED : ST_SETTLED);
	}
	c->fifo_head = h;
	return 0;
}

/* The answer to the UDP request scratch.ws.rk has passed egress: a write it carried is applied. */
__noinline int settle_udp(void)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_udp_write *w;

	if (!s || !g)
		return 0;
	w = bpf_map_lookup_elem(&udp_writes, &s->ws.rk);
	if (!w)
		return 0;
	if (w->gen == (__u32)g->gen) { /* else counted for a server that is gone */
		settle_write(g, w->set, bpf_ktime_get_ns());
		stat_inc(ST_SETTLED);
	}
	bpf_map_delete_elem(&udp_writes, &s->ws.rk);
	return 0;
}

/* invalidate_key_x's `how`: INV_EXACT, and the META_* it records shifted by INV_META_SHIFT;
 * INV_SERVER alone: cooperative mode (inkcache_coop), the server applied the write already */
#define INV_EXACT      1
#define INV_META_SHIFT 1
#define INV_SERVER     0x80000000u

/* Invalidates the key at scratch.buf[off, off+len) (hash h): its item goes, its hint is recorded
 * (exp: its expiry, HINT_KEEP: unchanged, HINT_DELETE: the key is gone; the META_* in `how`), and
 * its set refuses fills from replies to requests that arrived before the write is applied. With
 * INV_EXACT (a write on a followed connection that the server answers), that is until the
 * server's answer passes egress; otherwise until now + quarantine. */
__noinline int invalidate_key_x(__u32 off, __u32 len, __u64 h, __u64 exp, __u32 how)
{
	struct ink_global *g = global_state();
	struct ink_set_state *st;
	struct ink_set *set;
	__u64 now, until;
	__u32 tag, idx, exact = how & INV_EXACT, server = how & INV_SERVER;

	if (invalidation_off || !g || len == 0 || len > KEY_MAX)
		return 0;
	idx = set_index(h);
	set = bpf_map_lookup_elem(&sets, &idx);
	st = state_of(idx);
	if (!set || !st)
		return -1;
	tag = tag_of(h);
	/* the answer cannot pass egress before the server has this packet: pushing first is safe */
	if (server) /* cooperative mode: the server applied the write, stable from now */
		exact = 0;
	else if (settle_off || (exact && fifo_push(idx)))
		exact = 0;
	now = bpf_ktime_get_ns();
	until = exact || server ? now : now + quarantine_ns;
	bpf_spin_lock(&st->lock);
	if (exact) {
		if (st->gen != (__u32)g->gen) {
			st->gen = (__u32)g->gen;
			st->open = 0;
		}
		st->open++;
		st->open_since = now;
	}
	if (st->stable_since < until)
		st->stable_since = until;
	/* every way with the key's tag: another key with the same tag loses its item too */
	for (__u32 w = 0; w < WAYS; w++) {
		if (WORD_TAG(way_word(set, w)) == tag)
			way_put(set, w, 0, 0);
	}
	bpf_spin_unlock(&st->lock);
	hint_put(off, len, h, exp, (how & ~INV_SERVER) >> INV_META_SHIFT);
	stat_inc(ST_INVALIDATIONS);
	stat_inc(ST_INVAL_COMMAND);
	if (!exact && !server)
		stat_inc(ST_QUARANTINED);
	return 0;
}

/* A write whose answer will not be waited for (see invalidate_key_x). */
static __always_inline int invalidate_key(__u32 off, __u32 len, __u64 h, __u64 exp, __u32 meta)
{
	return invalidate_key_x(off, len, h, exp, meta << INV_META_SHIFT);
}

/* Voids every item and every request seen so far (and for the quarantine to come); `cause` is
 * the counter to bump. */
static __always_inline void invalidate_all(__u32 cause)
{
	struct ink_global *g;

	if (invalidation_off)
		return;
	g = global_state();
	if (g) { /* also void what requests racing the flush inside the server fill */
		g->flush_ns = bpf_ktime_get_ns() + quarantine_ns;
		/* what could not be parsed may have changed any key's expiry */
		if (cause == ST_INVAL_UNPARSABLE)
			__sync_fetch_and_add(&g->hint_gen, 1);
	}
	stat_inc(ST_INVALIDATIONS);
	stat_inc(cause);
}

/* flush_all on a followed connection that the server answers: everything is void now, and no
 * reply fills until the server's answer to the flush has passed egress (see settle). Falls back
 * to invalidate_all (the quarantine) if the connection cannot record it. */
__noinline int flush_exact(void)
{
	struct ink_global *g = global_state();
	__u64 now;

	if (invalidation_off || !g)
		return 0;
	if (settle_off || fifo_push(FLUSH_SET)) {
		invalidate_all(ST_INVAL_FLUSH);
		stat_inc(ST_QUARANTINED);
		return 0;
	}
	now = bpf_ktime_get_ns();
	__sync_fetch_and_add(&g->flush_open, 1);
	g->flush_open_since = now;
	if (g->flush_ns < now)
		g->flush_ns = now;
	stat_inc(ST_INVALIDATIONS);
	stat_inc(ST_INVAL_FLUSH);
	return 0;
}

#endif
