/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the text command walkers share (mutations.h, meta_writes.h): the expiry of a token as
 * memcached reads it, the counting of the answers the server will give, and a write to a key. */
#ifndef INKCACHE_COMMANDS_H
#define INKCACHE_COMMANDS_H

#include "inkcache_common.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "coherence.h"

#define MC_INT_MAX 0x7fffffff

/* walk_line results besides the offset of the next command */
#define WL_VOID -1    /* not sure what the line does: the whole cache was voided */
#define WL_STOP -2    /* memcached closes the connection after this line (quit, HTTP): nothing
		       * after it is executed */

/* Kernel expiry for memcached's int32 exptime (EXP_UNKNOWN: do not serve). */
static __always_inline __u64 exp_of(__s32 e)
{
	struct ink_global *g = global_state();

	if (!g)
		return EXP_UNKNOWN;
	return exptime_to_ns(e, bpf_ktime_get_ns(), g);
}

/* The exptime token i as memcached reads it (safe_strtol, truncated to int32): 0 and the kernel
 * expiry in *exp, or -1 if memcached refuses it. */
static __always_inline int tok_exptime(struct scratch *s, __u32 i, __u64 *exp)
{
	if (tok_number(s, i, NUM_SIGNED))
		return -1;
	*exp = exp_of((__s32)s->num);
	return 0;
}

/* The line's answers: `n` more, if they are still counted exactly. */
static __always_inline void count_answers(struct scratch *s, __u32 n)
{
	if (s->ws.exact)
		s->ws.cmds += n;
}

/* The answers can no longer be counted (an error answer, a quiet meta command, a command whose
 * answer is open-ended): this connection's writes fall back to the quarantine. */
static __always_inline void uncountable(struct scratch *s)
{
	s->ws.desync = 1;
	s->ws.exact = 0;
}

/* A write to key [off, off + len) that the line's answer (if `answers`) settles; `meta`: what it
 * does to the item's meta state (META_*). */
static __always_inline void write_key(struct scratch *s, __u32 off, __u32 len, __u64 h, __u64 exp,
				      __u32 answers, __u32 meta)
{
	invalidate_key_x(off, len, h, exp,
			 ((s->ws.exact && answers) ? INV_EXACT : 0) | (meta << INV_META_SHIFT));
}

/* Whether the data block of a storage command, its <bytes> at scratch.buf[start, start + vlen),
 * ends in "\r\n" as memcached requires: 1 yes; 0 no (memcached answers CLIENT_ERROR bad data
 * chunk and the item stays as it was, its expiry and meta state included: complete_nread_ascii);
 * -1 not known here (the block ends past the bytes being walked). */
static __always_inline int data_block_ok(struct scratch *s, __u64 start, __u64 vlen)
{
	__u64 end = start + vlen;

	if (end + 2 > s->ws.end)
		return -1;
	return BUF(s, end) == '\r' && BUF(s, end + 1) == '\n';
}

/* Whether the last token is "noreply" (memcached's set_noreply_maybe). */
static __always_inline int noreply(struct scratch *s)
{
	return s->tk.n > 1 && tok_is(s, s->tk.n - 1, "noreply", 7);
}

#endif
