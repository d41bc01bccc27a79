/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Cache layout and the operations every program shares: slot selection, invalidation, flush.
 *
 * A slot holds one item exactly as memcached sent it. Each slot also remembers when a key mapping
 * to it was last invalidated (stable_since): a reply may fill the slot only if its request arrived
 * after that, so a reply computed before a write can never be installed after the write's
 * invalidation. Writers and readers take the slot's spin lock. */
#ifndef INKCACHE_CACHE_H
#define INKCACHE_CACHE_H

#include "inkcache_common.h"
#include "maps.h"
#include "proto.h"

/* Set by the control plane before load. */
const volatile __u32 slot_mask = 1023;          /* cache max_entries - 1 (a power of two) */
const volatile __u64 max_age_ns = 60ULL * 1000000000ULL; /* oldest fill the kernel serves */
const volatile __u32 invalidation_off = 0;      /* debug builds for the consistency checker */
/* A write's slot stays unfillable this long after the write arrives, covering the time the
 * server takes to apply it (a GET that overtakes the write inside the server must not fill). */
const volatile __u64 quarantine_ns = 1000000000ULL;

#define NS_PER_SEC 1000000000LL
#define HINT_KEEP   0ULL   /* invalidate_key: leave the key's expiry as it is */
#define HINT_DELETE 2ULL   /* invalidate_key: the key is gone (delete) */

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

static __always_inline struct ink_entry *slot_for(__u64 hash)
{
	__u32 idx = (__u32)hash & slot_mask;
	return bpf_map_lookup_elem(&cache, &idx);
}

/* Invalidates the key at scratch.buf[off, off+len): the slot becomes unfillable by replies to
 * requests that arrive before now + quarantine, the item goes if it is this key's, and the key's
 * expiry becomes `exp` (HINT_KEEP: unchanged, HINT_DELETE: forgotten). */
__noinline int invalidate_key(__u32 off, __u32 len, __u64 exp)
{
	struct ink_global *g = global_state();
	struct ink_entry *e;
	__u64 h, now;

	if (invalidation_off || !g)
		return 0;
	h = key_hash(off, len);
	e = slot_for(h);
	if (!e)
		return -1;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&e->lock);
	e->stable_since = now + quarantine_ns;
	if (e->hash == h) {
		e->len = 0;
		e->flags = 0;
	}
	bpf_spin_unlock(&e->lock);
	if (exp != HINT_KEEP) {
		/* a lookup is much cheaper than an update: write only what changes */
		__u64 *cur = bpf_map_lookup_elem(&ttl_hints, &h);
		if (exp == HINT_DELETE) {
			if (cur)
				bpf_map_delete_elem(&ttl_hints, &h);
		} else if (!cur) {
			if (bpf_map_update_elem(&ttl_hints, &h, &exp, BPF_NOEXIST) &&
			    !bpf_map_lookup_elem(&ttl_hints, &h))
				g->hint_overflow = 1; /* full: keys without a hint are no longer cached */
		} else if (*cur != exp) {
			*cur = exp; /* 8-byte store: readers see the old or the new expiry */
		}
	}
	stat_inc(ST_INVALIDATIONS);
	stat_inc(ST_INVAL_COMMAND);
	return 0;
}

/* Voids every item and every request seen so far (and for the quarantine to come); `cause` is
 * the counter to bump. */
static __always_inline void invalidate_all(__u32 cause)
{
	struct ink_global *g;

	if (invalidation_off)
		return;
	g = global_state();
	if (g) /* in the future: also void what requests racing the flush inside the server fill */
		g->flush_ns = bpf_ktime_get_ns() + quarantine_ns;
	stat_inc(ST_INVALIDATIONS);
	stat_inc(cause);
}

#endif
