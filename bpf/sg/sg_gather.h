/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Gathering answers into a slot: admission (dedup, late, non-member), aggregation under the
 * slot's lock, and the report to the client's ring buffer. Shared by the gather program, the
 * timeout callback and applications' aggregation programs (sg_plugin.h).
 *
 * A slot's life: SG_ACTIVE (answers admitted) -> SG_CLOSING (policy met or timed out: nothing
 * more is admitted, answers already admitted finish their copy) -> SG_FINAL (reported once, by
 * whoever brings `done` up to `got` in SG_CLOSING). A duplicate is refused before it touches the
 * aggregate: the `seen` bit is tested and set under the lock together with the aggregation. */
#ifndef SG_GATHER_H
#define SG_GATHER_H

#include "sg_maps.h"

static __always_inline int bit_test(const __u64 *map, __u32 w)
{
	__u32 word = w >> 6;

	sg_barrier_var(word);
	return (map[word & (SG_BITMAP_WORDS - 1)] >> (w & 63)) & 1;
}

static __always_inline void bit_set(__u64 *map, __u32 w)
{
	__u32 word = w >> 6;

	sg_barrier_var(word);
	map[word & (SG_BITMAP_WORDS - 1)] |= 1ULL << (w & 63);
}

/* Writes the report (struct sg_event and the result) and sends it to the client's ring buffer.
 * Called once per request, after the slot reached SG_FINAL: nothing writes the slot any more. */
static __always_inline void sg_finalize(__u32 idx, struct sg_slot *s, __u64 now)
{
	__u8 *res = bpf_map_lookup_elem(&results, &idx);
	struct sg_event *ev = (void *)res;
	__u32 client = s->client;
	__u32 len;
	void *ring;

	if (!res)
		return;
	ev->req_id = s->req_id;
	ev->slot = idx;
	ev->status = s->status;
	ev->flags = s->flags >> 4;
	ev->asked = s->asked_n;
	ev->answered = s->complete;
	ev->pad = 0;
	ev->elapsed_ns = now - s->start_ns;
	for (int i = 0; i < SG_BITMAP_WORDS; i++)
		ev->missing[i] = s->asked[i] & ~s->seen[i];
	if (s->proto == SG_PROTO_SG && s->reducer != SG_RED_CONCAT) {
		__builtin_memcpy(res + SG_EVENT_HDR, s->agg, SG_VEC_BYTES);
		len = s->vec_len;
		if (len > SG_VEC_BYTES)
			len = SG_VEC_BYTES;
	} else {
		len = s->len;
		if (len > result_cap)
			len = result_cap;
	}
	ev->len = len;
	sg_count(s->status == SG_TIMEOUT ? ST_TIMEOUTS : ST_COMPLETED);
	ring = bpf_map_lookup_elem(&rings, &client);
	if (!ring || bpf_ringbuf_output(ring, res, SG_EVENT_HDR + len,
					(s->flags & SG_F_NO_WAKEUP) ? BPF_RB_NO_WAKEUP : 0))
		sg_count(ST_RING_FULL);
}

/* Why an answer is refused (0: admitted). Called with the slot locked. */
static __always_inline __u32 sg_refuse(struct sg_slot *s, __u32 req_id, __u32 req_mask, __u32 w)
{
	if (s->state != SG_ACTIVE || (s->req_id & req_mask) != req_id)
		return ST_LATE;
	if (!bit_test(s->asked, w))
		return ST_NON_MEMBERS;
	if (bit_test(s->seen, w))
		return ST_DUPLICATES;
	return 0;
}

/* After an admitted answer is written (slot locked): counts it, decides. 1: report now. */
static __always_inline int sg_written(struct sg_slot *s)
{
	s->done++;
	if (s->state == SG_CLOSING && s->done == s->got) {
		s->state = SG_FINAL;
		return 1;
	}
	return 0;
}

/* A worker's answer is complete (slot locked). */
static __always_inline void sg_complete(struct sg_slot *s, __u32 w)
{
	bit_set(s->seen, w);
	s->complete++;
	if (s->state == SG_ACTIVE && s->complete >= s->need) {
		s->state = SG_CLOSING;
		s->status = SG_DONE;
	}
}

/* Element-wise vector reduction of `data` (big-endian elements) into `agg` (host order); the
 * caller checked len == vec_len. Runs with the slot locked: plain bounded loops, no calls. */
static __always_inline void sg_reduce_vec(__u8 *agg, const __u8 *data, __u32 len, __u32 reducer,
					  __u32 elem)
{
	if (elem == 8) {
		__u64 *a = (__u64 *)agg;
		const __u64 *d = (const __u64 *)data;

		for (__u32 i = 0; i < SG_VEC_BYTES / 8; i++) {
			__u64 v;

			if (i * 8 >= len)
				break;
			v = __builtin_bswap64(d[i]);
			if (reducer == SG_RED_SUM)
				a[i] += v;
			else if (reducer == SG_RED_MIN)
				a[i] = v < a[i] ? v : a[i];
			else if (reducer == SG_RED_MAX)
				a[i] = v > a[i] ? v : a[i];
			else
				a[i] += v != 0;
		}
	} else {
		__u32 *a = (__u32 *)agg;
		const __u32 *d = (const __u32 *)data;

		for (__u32 i = 0; i < SG_VEC_BYTES / 4; i++) {
			__u32 v;

			if (i * 4 >= len)
				break;
			v = __builtin_bswap32(d[i]);
			if (reducer == SG_RED_SUM)
				a[i] += v;
			else if (reducer == SG_RED_MIN)
				a[i] = v < a[i] ? v : a[i];
			else if (reducer == SG_RED_MAX)
				a[i] = v > a[i] ? v : a[i];
			else
				a[i] += v != 0;
		}
	}
}

/* An answer aggregated in one critical section (vector and custom reducers). The data is in
 * the per-CPU scratch; `sc` says which slot and worker. Between sg_agg_begin (returns the
 * locked slot, or NULL when refused) and sg_agg_end the caller updates s->agg. */
struct sg_agg {
	struct sg_slot *slot;
	struct sg_scratch *sc;
	int rc;        /* the aggregation's verdict: < 0 refuses the answer as malformed */
};

static __always_inline struct sg_slot *sg_agg_begin(struct sg_agg *a)
{
	__u32 zero = 0, idx, why;
	struct sg_scratch *sc = bpf_map_lookup_elem(&xdp_scratch, &zero);
	struct sg_slot *s;

	a->slot = NULL;
	a->sc = sc;
	a->rc = 0;
	if (!sc)
		return NULL;
	idx = sc->slot;
	s = bpf_map_lookup_elem(&slots, &idx);
	if (!s)
		return NULL;
	bpf_spin_lock(&s->lock);
	why = sg_refuse(s, sc->req_id, 0xffffffff, sc->worker);
	if (why) {
		bpf_spin_unlock(&s->lock);
		sg_count(why);
		return NULL;
	}
	a->slot = s;
	return s;
}

static __always_inline int sg_agg_end(struct sg_agg *a)
{
	struct sg_slot *s = a->slot;
	int fin = 0;

	if (!s)
		return XDP_DROP;
	if (a->rc < 0) {
		bpf_spin_unlock(&s->lock);
		sg_count(ST_MALFORMED);
		return XDP_DROP;
	}
	s->got++;
	sg_complete(s, a->sc->worker);
	fin = sg_written(s);
	bpf_spin_unlock(&s->lock);
	sg_count(ST_ANSWERS);
	if (fin)
		sg_finalize(a->sc->slot, s, bpf_ktime_get_ns());
	return XDP_DROP;
}

#endif
