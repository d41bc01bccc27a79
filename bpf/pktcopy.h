/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copies between an XDP frame and map memory by direct packet access, 8 bytes a step, the last
 * step overlapping the one before it: no helper call (each call and return costs on the hit path,
 * more so with return-thunk mitigations) and no byte loop. They fail (-1) where the bytes are not
 * in the frame's linear part (multi-buffer frames): callers fall back to the helpers. The loops
 * test a word count derived from the length, never the length itself, and their counters are dead
 * after them: every exit leaves the same state, so the verifier walks what follows once. Offsets and
 * lengths are 64-bit and bounded on the registers used: a 32-bit value widened in a register loses
 * its bounds for the verifier. */
#ifndef INKCACHE_PKTCOPY_H
#define INKCACHE_PKTCOPY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "inkcache_common.h"

#define PKT_COPY_MAX DGRAM_MAX  /* longest copy */
#define PKT_OFF_MAX  255        /* furthest start in the frame (a mask too) */

#define TO_FRAME   1 /* pkt_copy's direction: map memory -> frame */
#define FROM_FRAME 0 /* frame -> map memory */

/* Copies n bytes (8 <= n <= PKT_COPY_MAX) between frame bytes [off, off + n) and mem[0, n): into
 * the frame if `dir` is TO_FRAME, out of it if FROM_FRAME. `dir` is a constant at every call
 * site, so each inlined copy keeps one direction. */
static __always_inline int pkt_copy(struct xdp_md *ctx, __u64 off, __u8 *mem, __u64 n, int dir)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *d;
	__u64 t, words;

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
		d = data + (off & PKT_OFF_MAX) + o; /* masks: bounds that survive a spill */
		barrier_var(d);
		if ((void *)(d + 8) > end)
			return -1;
		if (dir == TO_FRAME)
			*(__u64 *)d = *(const __u64 *)(mem + o);
		else
			*(__u64 *)(mem + o) = *(__u64 *)d;
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
	if (dir == TO_FRAME)
		*(__u64 *)d = *(const __u64 *)(mem + (t & 2047));
	else
		*(__u64 *)(mem + (t & 2047)) = *(__u64 *)d;
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
