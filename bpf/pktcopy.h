/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Moves bytes between an XDP frame and map memory by direct packet access, 8 bytes a step, the last
 * step overlapping the one before it: no helper call and no byte loop. The request is read so
 * (load_request), and summed and classified on the way. The reply is written so (pkt_store) or by
 * bpf_xdp_store_bytes, as config.h's reply_inline says: over ~90 bytes the helper's memcpy beat
 * the stores on the Intel VM, and the stores beat it by ~8% of a hit on the AMD VM, whose kernel
 * returns from every helper through a thunk (docs/results/hitcost.md, twenty-first run). They
 * fail (-1) where the bytes are not in the frame's linear part (multi-buffer frames): callers fall
 * back to the helpers. The loops test a word count derived from the length, never the length
 * itself, and what they accumulate is stored as soon as they end: every exit leaves the same
 * state, so the verifier walks what follows once. Offsets and lengths are 64-bit and bounded on
 * the registers used: a 32-bit value widened in a register loses its bounds for the verifier. */
#ifndef INKCACHE_PKTCOPY_H
#define INKCACHE_PKTCOPY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "inkcache_common.h"
#include "csum.h"
#include "scratch.h"

#define PKT_COPY_MAX DGRAM_MAX  /* longest copy */
#define PKT_OFF_MAX  255        /* furthest start in the frame (a mask too) */

/* Bytes below '!' (space and the controls: every delimiter of the text protocol) or above 0x7f,
 * each marked in bit 7: no carry crosses a byte (the low seven bits plus 0x5f stay below 0x100),
 * so every mark is exact. */
static __always_inline __u64 special_bytes(__u64 w)
{
	return (w | ~((w & 0x7f7f7f7f7f7f7f7fULL) + 0x5f5f5f5f5f5f5f5fULL)) & HIGHS;
}

/* Copies the request, frame bytes [off, off + n) (8 <= n <= PKT_COPY_MAX), to scratch.buf[0, n),
 * and records in scratch.rq its sum (csum.h, as buf_sum gives it) and how many of its bytes
 * special_bytes marks. */
static __always_inline int load_request(struct xdp_md *ctx, __u64 off, struct scratch *s, __u64 n)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u64 t, words, w, rem, acc = 0, marks = 0;
	__u8 *d;

	barrier_var(n);
	barrier_var(off);
	if (n < 8 || n > PKT_COPY_MAX || off > PKT_OFF_MAX)
		return -1;
	barrier_var(off); /* the compiler keeps the masks below, which it could prove redundant */
	words = n >> 3; /* the loop bounds this, not n: n's bounds stay the same whatever the exit */
	for (__u64 i = 0; i < PKT_COPY_MAX / 8; i++) {
		__u64 o = i * 8;
		if (i >= words)
			break;
		d = data + (off & PKT_OFF_MAX) + o;
		barrier_var(d);
		if ((void *)(d + 8) > end)
			return -1;
		w = *(__u64 *)d;
		STORE64(&s->buf[o], w);
		acc += csum_halves(w);
		marks += special_bytes(w) >> 7; /* a count per byte lane */
	}
	t = n - 8;
	barrier_var(t); /* bounded on the register used */
	if (t > PKT_COPY_MAX - 8)
		return -1;
	barrier_var(t);
	d = data + (off & PKT_OFF_MAX) + (t & 2047);
	barrier_var(d); /* one register for the check and the access */
	if ((void *)(d + 8) > end)
		return -1;
	w = *(__u64 *)d;
	STORE64(&s->buf[t & 2047], w);
	rem = n & 7;
	if (rem) { /* the bytes past the last whole word: the top `rem` of the overlapping one */
		w >>= (8 - rem) * 8;
		acc += csum_halves(w);
		marks += (special_bytes(w) & low_mask(rem)) >> 7;
	}
	s->rq.sum = csum_at(acc, 0);
	/* the byte lanes (each at most PKT_COPY_MAX / 8 + 1) summed pairwise: exact at any length,
	 * and no branch on n, which would split its range for the verifier */
	marks = (marks & 0x00ff00ff00ff00ffULL) + ((marks >> 8) & 0x00ff00ff00ff00ffULL);
	marks = (marks & 0x0000ffff0000ffffULL) + ((marks >> 16) & 0x0000ffff0000ffffULL);
	s->rq.marks = (__u32)((marks & 0xffffffff) + (marks >> 32));
	return 0;
}

/* Frame bytes [off, off + n) <- mem[0, n) (8 <= n <= PKT_COPY_MAX): the reply written by direct
 * access, without a helper call. */
static __always_inline int pkt_store(struct xdp_md *ctx, __u64 off, const __u8 *mem, __u64 n)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u64 t, words;
	__u8 *d;

	barrier_var(n);
	barrier_var(off);
	if (n < 8 || n > PKT_COPY_MAX || off > PKT_OFF_MAX)
		return -1;
	barrier_var(off);
	words = n >> 3;
	for (__u64 i = 0; i < PKT_COPY_MAX / 8; i++) {
		__u64 o = i * 8;
		if (i >= words)
			break;
		d = data + (off & PKT_OFF_MAX) + o;
		barrier_var(d);
		if ((void *)(d + 8) > end)
			return -1;
		*(__u64 *)d = *(const __u64 *)(mem + o);
	}
	t = n - 8;
	barrier_var(t);
	if (t > PKT_COPY_MAX - 8)
		return -1;
	barrier_var(t);
	d = data + (off & PKT_OFF_MAX) + (t & 2047);
	barrier_var(d);
	if ((void *)(d + 8) > end)
		return -1;
	*(__u64 *)d = *(const __u64 *)(mem + (t & 2047));
	return 0;
}

/* Frame bytes [0, n) <- [by, by + n), 8 <= n <= 127, by <= 512: headers moved down after the head
 * grew by `by`. Ascending, each word read before it can be overwritten; the last, overlapping word
 * is read first (with by < 8 the loop overwrites its source). */
static __always_inline int pkt_move_down(struct xdp_md *ctx, __u64 by, __u64 n)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *d, *from;
	__u64 last, t, words;

	barrier_var(n);
	barrier_var(by);
	if (n < 8 || n > 127 || by > 512)
		return -1;
	barrier_var(by);
	t = n - 8;
	barrier_var(t);
	if (t > 127 - 8)
		return -1;
	barrier_var(t);
	from = data + (by & 1023) + (t & 127);
	barrier_var(from);
	if ((void *)(from + 8) > end)
		return -1;
	last = *(__u64 *)from;
	words = n >> 3;
	for (__u64 i = 0; i < 127 / 8; i++) {
		__u64 o = i * 8;
		if (i >= words)
			break;
		from = data + (by & 1023) + o;
		d = data + o;
		barrier_var(from);
		barrier_var(d);
		if ((void *)(from + 8) > end || (void *)(d + 8) > end)
			return -1;
		*(__u64 *)d = *(__u64 *)from;
	}
	d = data + (t & 127);
	barrier_var(d);
	if ((void *)(d + 8) > end)
		return -1;
	*(__u64 *)d = last;
	return 0;
}

#endif
