// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Cooperative mode, kernel side: a server that knows its own writes (inkcached --cooperative)
 * installs and invalidates kernel cache entries itself, in batches. It writes operations into
 * its slice of the mmap-able coop_ops array, then runs this program once with BPF_PROG_TEST_RUN
 * (the packet data says which slice and how many). The table is changed only through the
 * functions the other programs use (table.h's table_fill, coherence.h's invalidate_key_x), so
 * this follows whatever layout the table has.
 *
 * Ordering, which the server keeps (crates/inkcached/src/coop.rs): an invalidation runs after the
 * server applied the write and before it answers it, and leaves the key's set stable from then
 * on; an install carries read_ts, a CLOCK_MONOTONIC time taken before the server read the item,
 * and table_fill refuses it if the set was written at or after read_ts. So an install racing a
 * write either lands before the write's invalidation (which removes it) or is refused.
 *
 * The object loaded by the control plane reuses the attachment's pinned maps; its per-CPU
 * scratch is its own (nothing shared with the other programs running meanwhile). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define COOP_INSTALL    1
#define COOP_INVALIDATE 2
#define COOP_FLUSH      3

/* One operation (layout shared with crates/inkcache/src/coop.rs through the skeleton). */
struct coop_op {
	__u32 kind;
	__u32 klen;    /* key length */
	__u32 len;     /* install: item length */
	__u32 hdr;     /* install: length of the VALUE line, \r\n included */
	__u32 cas;     /* install: length of " <cas>" in the VALUE line */
	__u32 pad;
	__u64 exp_ns;  /* install: expiry (CLOCK_MONOTONIC ns, 0: none); flush: delay in ns */
	__u64 read_ts; /* install: CLOCK_MONOTONIC ns taken before the server read the item */
	__u8 data[ITEM_CAP]; /* install: "VALUE <key> <flags> <bytes> <cas>\r\n<data>\r\n";
			      * invalidate: the key */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct coop_op);
	__uint(max_entries, 64); /* workers x batch, set by the control plane */
} coop_ops SEC(".maps");

/* The test-run packet: which operations to run. */
struct coop_req {
	__u32 first;
	__u32 count;
};

/* So that the skeleton carries both layouts. */
struct coop_op coop_op_layout;
struct coop_req coop_req_layout;

/* Copies n bytes (rounded up to 8, at most ITEM_CAP) of op->data to scratch.buf[0..). */
static __always_inline void to_buf(struct scratch *s, struct coop_op *op, __u32 n)
{
	for (__u32 i = 0; i < ITEM_CAP / 8; i++) {
		if (i * 8 >= n)
			break;
		*(__u64 *)&s->buf[i * 8] = *(__u64 *)&op->data[i * 8];
	}
}

static long run_op(__u32 i, void *ctx)
{
	struct coop_req *r = ctx;
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct coop_op *op;
	__u32 idx = r->first + i;
	__u64 now, cap;

	if (i >= r->count)
		return 1;
	op = bpf_map_lookup_elem(&coop_ops, &idx);
	if (!op || !s || !g)
		return 1;
	if (op->kind == COOP_INSTALL) {
		if (op->klen == 0 || op->klen > KEY_MAX || op->len > ITEM_CAP || op->len < 8 ||
		    op->hdr < op->klen + 12 || op->hdr > op->len || op->len - op->cas > ITEM_MAX) {
			stat_inc(ST_FILL_SKIPPED);
			return 0;
		}
		to_buf(s, op, op->len);
		now = bpf_ktime_get_ns();
		cap = now + max_age_ns;
		s->fa.h = key_hash(6, op->klen); /* the key follows "VALUE " */
		s->fa.req_ts = op->read_ts;
		s->fa.exp = (op->exp_ns && op->exp_ns < cap) ? op->exp_ns : cap;
		s->fa.klen = op->klen;
		s->fa.off = 0;
		s->fa.len = op->len;
		s->fa.hdr = op->hdr;
		s->fa.cas = op->cas;
		if (s->fa.exp <= now) {
			stat_inc(ST_FILL_SKIPPED);
			return 0;
		}
		stat_inc(table_fill() ? ST_FILLS : ST_FILL_SKIPPED);
	} else if (op->kind == COOP_INVALIDATE) {
		if (op->klen == 0 || op->klen > KEY_MAX)
			return 0;
		to_buf(s, op, op->klen);
		invalidate_key_x(0, op->klen, key_hash(0, op->klen), HINT_KEEP, INV_SERVER);
	} else if (op->kind == COOP_FLUSH) {
		now = bpf_ktime_get_ns();
		if (g->flush_ns < now)
			g->flush_ns = now;
		/* flush_all <delay>: items stored before then die then; install nothing meanwhile */
		if (op->exp_ns && g->fill_block_until < now + op->exp_ns)
			g->fill_block_until = now + op->exp_ns;
		stat_inc(ST_INVALIDATIONS);
		stat_inc(ST_INVAL_FLUSH);
	}
	return 0;
}

SEC("xdp")
int inkcache_coop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct coop_req r;
	struct coop_req *in = data;

	if ((void *)(in + 1) > data_end)
		return XDP_ABORTED;
	r = *in;
	if (r.count > 1024)
		return XDP_ABORTED;
	bpf_loop(r.count, run_op, &r, 0);
	return XDP_PASS;
}
