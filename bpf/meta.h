/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Meta get (`mg <key> <flag>*`) answered from the cache, byte for byte as memcached answers it:
 * `VA <size> <flags>*\r\n<data>\r\n` with `v`, else `HD <flags>*\r\n`, the return flags in the
 * order the request gives them. Answered only when every flag asked for is known from the stored
 * item: v (value), f (client flags), k (key), c (CAS, if the item was filled from a gets reply),
 * s (size), t (only when the item never expires: "t-1"; a remaining TTL in memcached's clock is
 * not known exactly), O<opaque> (echoed), q (no effect on a hit). Anything else (h, l, b, the
 * flags that write: T N E R, duplicates, tokens after single-letter flags, extra spaces) passes
 * to the server, as does a miss. Each step is a small global function: the verifier checks it
 * once, whatever the flags. */
#ifndef INKCACHE_META_H
#define INKCACHE_META_H

#include "inkcache_common.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"

#define MG_FLAGS_MAX 8     /* return flags answered in the kernel */
#define MG_OPAQUE_MAX 32   /* memcached's opaque token limit */
#define MG_STAGE 640       /* where the item is staged in scratch.out (above any VA line) */


/* Parses the flag token at scratch.buf[pos, e) of a meta get; returns the position after it, or
 * -1 if the kernel does not answer such a request. */
__noinline int mg_parse_flag(__u32 pos, __u32 e)
{
	struct scratch *s = get_scratch();
	__u32 bit, tl;
	int t;
	__u8 c;

	if (!s || pos >= e || s->mg.n >= MG_FLAGS_MAX || BUF(s, pos) != ' ')
		return -1;
	pos++;
	t = scan_token(pos, e);
	if (t < 0 || (__u32)t <= pos || s->dirty)
		return -1;
	tl = (__u32)t - pos;
	c = BUF(s, pos);
	switch (c) {
	case 'v': bit = 1; break;
	case 'f': bit = 2; break;
	case 'k': bit = 4; break;
	case 'c': bit = 8; break;
	case 's': bit = 16; break;
	case 't': bit = 32; break;
	case 'q': bit = 64; break;
	case 'O': bit = 128; break;
	default:
		return -1;
	}
	if (s->mg.seen & bit)
		return -1; /* memcached: CLIENT_ERROR duplicate flag */
	if (c == 'O') {
		if (tl - 1 > MG_OPAQUE_MAX)
			return -1;
		s->mg.opaque_off = pos + 1;
		s->mg.opaque_len = tl - 1;
	} else if (tl != 1) {
		return -1;
	}
	s->mg.seen |= bit;
	s->mg.flag[s->mg.n & 7] = c;
	s->mg.n++;
	return t;
}

/* Copies n (<= 256) bytes within scratch.out from `from` down to `to` (to < from), 8 bytes a
 * step; up to 7 bytes past to + n are written too. */
static __always_inline void out_move(struct scratch *s, __u32 to, __u32 from, __u32 n)
{
	for (__u32 i = 0; i < 32; i++) {
		__u32 o = i * 8;
		if (o >= n)
			break;
		STORE64(&OUTB(s, to + o), LOAD64(&OUTB(s, from + o)));
	}
}

/* The end of the token at scratch.out[pos, pos + 21): the first ' ' or '\r', or -1. */
__noinline int out_token_end(__u32 pos)
{
	struct scratch *s = get_scratch();

	if (!s)
		return -1;
	for (__u32 i = 0; i < 21; i++) {
		__u8 c = OUTB(s, pos + i);
		if (c == ' ' || c == '\r')
			return pos + i;
	}
	return -1;
}

/* Appends return flag number i of the meta get at scratch.out[o]; returns the new end. */
__noinline int mg_put_flag(__u32 i, __u32 o)
{
	struct scratch *s = get_scratch();
	__u32 from = 0, n = 0;
	__u8 c;

	if (!s || o > MG_STAGE - 300)
		return -1;
	c = s->mg.flag[i & 7];
	switch (c) {
	case 'f':
		from = s->mg.fpos;
		n = s->mg.ftl;
		break;
	case 's':
		from = s->mg.bpos;
		n = s->mg.btl;
		break;
	case 'c':
		from = s->mg.cpos;
		n = s->mg.ctl;
		break;
	case 't': /* answered only for items that never expire */
		OUTB(s, o) = ' ';
		OUTB(s, o + 1) = 't';
		OUTB(s, o + 2) = '-';
		OUTB(s, o + 3) = '1';
		return o + 4;
	case 'k': /* the key, from the request */
	case 'O': /* the opaque token, from the request */
		OUTB(s, o) = ' ';
		OUTB(s, o + 1) = c;
		from = c == 'k' ? 3 : s->mg.opaque_off;
		n = c == 'k' ? s->klen[0] : s->mg.opaque_len;
		if (n > KEY_MAX)
			return -1;
		buf_to_out(s, o + 2, from, n);
		return o + 2 + n;
	default: /* v, q: nothing to return */
		return o;
	}
	if (n > 20)
		return -1;
	OUTB(s, o) = ' ';
	OUTB(s, o + 1) = c;
	out_move(s, o + 2, from, n);
	return o + 2 + n;
}

/* Composes the answer to the meta get in scratch.buf[0, len) into scratch.out[8, ...) (after the
 * UDP frame header), at most `limit` bytes. Returns the reply's length (frame header included),
 * or < 0 to pass: -1 when the request is not one the kernel answers, LK_* from the lookup. */
__noinline int compose_mg(__u32 len, __u32 limit)
{
	struct scratch *s = get_scratch();
	__u32 pos, e, klen, o, hdr, ilen, dpos, dlen;
	int kend, end, r;

	if (!s || len < 6 || len > PAYLOAD_MAX)
		return -1;
	if (BUF(s, len - 2) != '\r' || BUF(s, len - 1) != '\n')
		return -1;
	e = len - 2;
	kend = scan_token(3, e);
	if (kend < 0 || (__u32)kend <= 3 || s->dirty)
		return -1;
	klen = (__u32)kend - 3;
	if (klen > KEY_MAX)
		return -1;
	s->koff[0] = 3;
	s->klen[0] = klen;
	s->lk.one_key = 1;
	clocks_reset(s);
	s->mg.n = 0;
	s->mg.seen = 0;
	pos = (__u32)kend;
	for (__u32 i = 0; i < MG_FLAGS_MAX; i++) {
		int t;
		if (pos >= e)
			break;
		t = mg_parse_flag(pos, e);
		if (t < 0)
			return -1;
		pos = (__u32)t;
	}
	if (pos < e)
		return -1;

	r = table_lookup(0, MG_STAGE, LKM_STAGE | ((s->mg.seen & 8) ? LKM_CAS : 0),
			 OUT_LEN);
	if (r < 0)
		return r;
	lookup_upkeep(s, MG_STAGE, r);
	/* an item that may carry meta state (stale, a win token sent) gets flags from memcached
	 * that a get reply does not show: memcached answers */
	if (!(s->lk.flags & ITEM_META_OK))
		return -1;
	if ((s->mg.seen & 32) && s->lk.exp != EXP_NEVER)
		return -1;
	/* the staged item: "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n" */
	ilen = (__u32)r;
	hdr = s->lk.hdr;
	if (hdr > ilen || hdr < klen + 12)
		return -1;
	s->mg.fpos = MG_STAGE + 6 + klen + 1;
	end = out_token_end(s->mg.fpos);
	if (end < 0 || (__u32)end <= s->mg.fpos)
		return -1;
	s->mg.ftl = (__u32)end - s->mg.fpos;
	s->mg.bpos = (__u32)end + 1;
	end = out_token_end(s->mg.bpos);
	if (end < 0 || (__u32)end <= s->mg.bpos)
		return -1;
	s->mg.btl = (__u32)end - s->mg.bpos;
	s->mg.cpos = (__u32)end + 1;
	s->mg.ctl = s->lk.cas ? s->lk.cas - 1 : 0;
	dpos = MG_STAGE + hdr;
	dlen = ilen - hdr; /* data and its "\r\n" */

	o = UDP_HDR_MC;
	if (s->mg.seen & 1) {
		OUTB(s, o) = 'V';
		OUTB(s, o + 1) = 'A';
		OUTB(s, o + 2) = ' ';
		if (s->mg.btl > 10)
			return -1;
		out_move(s, o + 3, s->mg.bpos, s->mg.btl);
		o += 3 + s->mg.btl;
	} else {
		OUTB(s, o) = 'H';
		OUTB(s, o + 1) = 'D';
		o += 2;
	}
	for (__u32 i = 0; i < MG_FLAGS_MAX; i++) {
		int t;
		if (i >= s->mg.n)
			break;
		t = mg_put_flag(i, o);
		if (t < 0)
			return -1;
		o = (__u32)t;
	}
	if (o > MG_STAGE - 2)
		return -1;
	OUTB(s, o) = '\r';
	OUTB(s, o + 1) = '\n';
	o += 2;
	if (s->mg.seen & 1) {
		if (o + dlen > limit || o + dlen > DGRAM_MAX || dlen > ITEM_CAP)
			return LK_FULL;
		/* the data moves down from the stage (o < dpos): ascending 8-byte steps are safe */
		for (__u32 j = 0; j < ITEM_CAP / 8 + 1; j++) {
			__u32 b = j * 8;
			if (b >= dlen)
				break;
			STORE64(&OUTB(s, o + b), LOAD64(&OUTB(s, dpos + b)));
		}
		o += dlen;
	} else if (o > limit) {
		return LK_FULL;
	}
	return o;
}

#endif
