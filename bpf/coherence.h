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
#define INVAL_SERVER 2     /* invalidate_key_x's `exact` in cooperative mode (inkcache_coop) */

/* memcached exptime -> kernel expiry (ktime ns), one second early because memcached's clock
 * ticks in whole seconds and may run ahead of ours. */
static __always_inline __u64 exptime_to_ns(__s64 e, __u64 now, struct ink_global *g)
{
	__s64 mono;

	if (e == 0)
		return EXP_NEVER;
	if (e <= 1)
		return EXP_UNKNOWN; /* negative: already expired; 1 s: too short to serve */
	if (e <= 2592000)
		return now + (__u64)(e - 1) * NS_PER_SEC;
	mono = e * NS_PER_SEC - g->realtime_off_ns - NS_PER_SEC; /* absolute unix time */
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

/* The expiry the kernel may use for key hash h when filling at `now`: its hint if trusted; else
 * (written before attach, or a segment since could not be parsed) at most max_age from now, and
 * not after an untrusted hint either; EXP_UNKNOWN (do not cache) once ttl_hints overflowed. */
static __always_inline __u64 fill_expiry(__u64 h, __u64 now, struct ink_global *g)
{
	__u64 *v = bpf_map_lookup_elem(&ttl_hints, &h), exp;

	if (v && hint_trusted(*v, g))
		return hint_exp(*v);
	if (g->hint_overflow)
		return EXP_UNKNOWN;
	exp = now + max_age_ns;
	if (v && hint_exp(*v) < exp)
		exp = hint_exp(*v);
	return exp;
}

/* Expiry to record for a write that either leaves the key's item as it was or gives it expiry
 * `exp`, when we cannot know which (add, cas, meta set with a mode or CAS, binary equivalents):
 * the earlier of the two, so the kernel never serves past either. Without a trusted hint the old
 * expiry is unknown (bounded by max_age from now). */
static __always_inline __u64 exp_either(__u64 h, __u64 exp)
{
	struct ink_global *g = global_state();

	if (!g)
		return EXP_UNKNOWN;
	if (exp == EXP_NEVER)
		return HINT_KEEP; /* the old expiry, whatever it is, is the earlier */
	{
		__u64 old = fill_expiry(h, bpf_ktime_get_ns(), g);
		return old < exp ? old : exp;
	}
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
	struct ink_set *set;

	if (idx == FLUSH_SET) {
		/* requests that arrived before the flush was applied may carry flushed values */
		if (g->flush_ns < stable)
			g->flush_ns = stable;
		__sync_fetch_and_add(&g->flush_open, -1);
		return;
	}
	set = bpf_map_lookup_elem(&sets, &idx);
	if (!set)
		return;
	bpf_spin_lock(&set->lock);
	if (set->gen == (__u32)g->gen && set->open)
		set->open--;
	if (set->stable_since < stable)
		set->stable_since = stable;
	bpf_spin_unlock(&set->lock);
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

/* Invalidates the key at scratch.buf[off, off+len): its item goes, its expiry becomes `exp`
 * (HINT_KEEP: unchanged, HINT_DELETE: forgotten), and its set refuses fills from replies to
 * requests that arrived before the write is applied. With `exact` (a write on a followed
 * connection that the server answers), that is until the server's answer passes egress;
 * otherwise until now + quarantine. */
__noinline int invalidate_key_x(__u32 off, __u32 len, __u64 exp, __u32 exact)
{
	struct ink_global *g = global_state();
	struct ink_set *set;
	__u64 h, now, until;
	__u32 tag, idx;

	if (invalidation_off || !g || len == 0 || len > KEY_MAX)
		return 0;
	h = key_hash(off, len);
	idx = set_index(h);
	set = bpf_map_lookup_elem(&sets, &idx);
	if (!set)
		return -1;
	tag = tag_of(h);
	/* the answer cannot pass egress before the server has this packet: pushing first is safe */
	if (exact == INVAL_SERVER)
		; /* cooperative mode: the server applied the write, stable from now, nothing to settle */
	else if (settle_off || (exact && fifo_push(idx)))
		exact = 0;
	now = bpf_ktime_get_ns();
	until = exact ? now : now + quarantine_ns;
	bpf_spin_lock(&set->lock);
	if (exact == 1) {
		if (set->gen != (__u32)g->gen) {
			set->gen = (__u32)g->gen;
			set->open = 0;
		}
		set->open++;
		set->open_since = now;
	}
	if (set->stable_since < until)
		set->stable_since = until;
	for (__u32 w = 0; w < WAYS; w++) {
		struct ink_way *x = &set->way[w];
		if (x->tag == tag && x->key_len == len)
			x->tag = 0;
	}
	bpf_spin_unlock(&set->lock);
	if (exp != HINT_KEEP) {
		/* a lookup is much cheaper than an update: write only what changes */
		__u64 *cur = bpf_map_lookup_elem(&ttl_hints, &h);
		__u64 v = hint_pack(exp, g->hint_gen);
		if (exp == HINT_DELETE) {
			if (cur)
				bpf_map_delete_elem(&ttl_hints, &h);
		} else if (!cur) {
			if (bpf_map_update_elem(&ttl_hints, &h, &v, BPF_NOEXIST) &&
			    !bpf_map_lookup_elem(&ttl_hints, &h))
				g->hint_overflow = 1; /* full: keys without a hint are no longer cached */
		} else if (*cur != v) {
			*cur = v; /* one 8-byte store: readers see the old or the new hint */
		}
	}
	stat_inc(ST_INVALIDATIONS);
	stat_inc(ST_INVAL_COMMAND);
	if (!exact)
		stat_inc(ST_QUARANTINED);
	return 0;
}

/* A write whose answer will not be waited for (see invalidate_key_x). */
static __always_inline int invalidate_key(__u32 off, __u32 len, __u64 exp)
{
	return invalidate_key_x(off, len, exp, 0);
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
