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

static __always_inline struct ink_entry *slot_for(__u64 hash)
{
	__u32 idx = (__u32)hash & slot_mask;
	return bpf_map_lookup_elem(&cache, &idx);
}

/* Invalidates the key at scratch.buf[off, off+len): the slot becomes unfillable by replies to
 * requests that arrived before now, and the item goes if it is this key's. */
__noinline int invalidate_key(__u32 off, __u32 len)
{
	struct ink_entry *e;
	__u64 h, now;

	if (invalidation_off)
		return 0;
	h = key_hash(off, len);
	e = slot_for(h);
	if (!e)
		return -1;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&e->lock);
	e->stable_since = now;
	if (e->hash == h)
		e->len = 0;
	bpf_spin_unlock(&e->lock);
	stat_inc(ST_INVALIDATIONS);
	return 0;
}

/* Voids every item and every request seen so far. */
static __always_inline void invalidate_all(void)
{
	struct ink_global *g;

	if (invalidation_off)
		return;
	g = global_state();
	if (g)
		g->flush_ns = bpf_ktime_get_ns();
	stat_inc(ST_INVALIDATIONS);
}

#endif
