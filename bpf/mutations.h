/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The text protocol's mutations at ingress: each command of a request (UDP) or of a client's
 * byte stream (TCP) is walked as memcached reads it, every key it may change is invalidated before
 * the server sees it, its expiry recorded, and the answers the server will give are counted (for
 * settling on followed connections). Anything that cannot be parsed with certainty voids the
 * whole cache. */
#ifndef INKCACHE_MUTATIONS_H
#define INKCACHE_MUTATIONS_H

#include "inkcache_common.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "coherence.h"
#include "stream.h"

/* Kernel expiry for the exptime token at buf[start, end); unknown if it does not parse. */
static __always_inline __u64 exp_from_token(__u32 start, __u32 end)
{
	struct ink_global *g = global_state();
	__s64 e = parse_exptime(start, end);

	if (!g || e == EXPTIME_BAD)
		return EXP_UNKNOWN;
	return exptime_to_ns(e, bpf_ktime_get_ns(), g);
}

/* Meta commands: the expiry a T<ttl> (or N<ttl>, vivify) flag among the tokens in [pos, eol)
 * sets, else `dflt`. */
__noinline __u64 meta_exp(__u32 pos, __u32 eol, __u64 dflt)
{
	struct scratch *s = get_scratch();

	if (!s)
		return EXP_UNKNOWN;
	for (__u32 i = 0; i < 16; i++) {
		int t;
		__u8 c;
		if (pos >= eol)
			break;
		t = scan_token(pos, eol);
		if (t < 0)
			return EXP_UNKNOWN;
		if ((__u32)t > pos) {
			c = BUF(s, pos);
			if (c == 'T' || c == 'N')
				return exp_from_token(pos + 1, t);
		}
		pos = t + 1;
	}
	return dflt;
}

/* flush_all [delay]: voids everything now and, with a delay, refuses fills until the delayed
 * flush has surely happened in the server. */
static __always_inline void flush_command(__u32 tend, int eol, __u32 exact)
{
	struct ink_global *g = global_state();
	__u64 now = bpf_ktime_get_ns(), until = 0;

	if (exact)
		flush_exact();
	else
		invalidate_all(ST_INVAL_FLUSH);
	if (!g || invalidation_off)
		return;
	if (eol < 0) {
		until = now + 2592000ULL * NS_PER_SEC; /* delay cut off: assume the longest */
	} else if (BUF(get_scratch(), tend) == ' ') {
		int t = scan_token(tend + 1, eol);
		__s64 d = t > 0 ? parse_exptime(tend + 1, t) : EXPTIME_BAD;
		if (d > 0 && d != EXPTIME_BAD) {
			__u64 at = exptime_to_ns(d + 1, now, g); /* +1: exptime_to_ns is 1 s early */
			until = (at == EXP_UNKNOWN ? now : at) + 2 * NS_PER_SEC;
		}
	}
	if (until > g->fill_block_until)
		g->fill_block_until = until;
}

/* Meta command flags that matter here (meta_scan). */
#define MF_QUIET 1   /* q: the answer may be left out */
#define MF_B64   2   /* b: the key is base64, not the bytes seen */
#define MF_WRITE 4   /* T N E R: mg changes the item */
#define MF_COND  8   /* C M I: ms may leave the old item (and its expiry) in place */

/* The flags among the tokens in [pos, eol), or -1 if there are more than we walk. */
__noinline int meta_scan(__u32 pos, __u32 eol)
{
	struct scratch *s = get_scratch();
	int f = 0;

	if (!s)
		return -1;
	for (__u32 i = 0; i < 24; i++) {
		int t;
		__u8 c;
		if (pos >= eol)
			return f;
		t = scan_token(pos, eol);
		if (t < 0)
			return -1;
		if ((__u32)t > pos) {
			c = BUF(s, pos);
			if (c == 'q')
				f |= MF_QUIET;
			else if (c == 'b')
				f |= MF_B64;
			else if (c == 'T' || c == 'N' || c == 'E' || c == 'R')
				f |= MF_WRITE;
			else if (c == 'C' || c == 'M' || c == 'I')
				f |= MF_COND;
		}
		pos = t + 1;
	}
	return pos >= eol ? f : -1;
}

/* One command at w->pos (a bpf_loop callback: the verifier checks it once). Invalidates every key
 * it may change and counts the answers the server will give. On a followed connection
 * (scratch.ws.tracked) a line not complete yet stops the walk, to be carried over; otherwise
 * (UDP, connections not followed) the segment is all there is, and a cut line is judged on what
 * it shows. */
static long walk_command(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct scratch *s = get_scratch();
	__u32 pos = w->pos, len = w->len, kpos, klen, e, answers, exact;
	int tend, eol, kend, cmd, t1, t2, t3, bytes = 0, mf = 0, write = 1;
	__u64 exp;

	if (!s)
		return walk_stop(w, -1);
	if (pos >= len)
		return walk_stop(w, len);
	exact = s->ws.exact;
	eol = scan_eol(pos, len);
	if (eol < 0 && s->ws.stream)
		return walk_stop(w, pos); /* the rest of the line comes in the next segment */
	tend = scan_token(pos, len);
	if (tend < 0 || (__u32)tend <= pos)
		goto unsure; /* leading space or empty line: memcached says ERROR; be safe */
	cmd = classify(s, pos, (__u32)tend - pos);
	if (cmd == CMD_UNKNOWN)
		goto unsure;
	if (eol < 0) {
		/* a cut line on a stream not followed: judge it on what it shows */
		if (cmd == CMD_HARMLESS || cmd == CMD_GET || cmd == CMD_QUIT)
			return walk_stop(w, len);
		if (cmd == CMD_FLUSH) {
			flush_command(tend, -1, 0);
			return walk_stop(w, len);
		}
		if (cmd == CMD_GAT || cmd == CMD_META_SET || cmd == CMD_META_GET ||
		    cmd == CMD_META_ARITH || cmd == CMD_META_DEL)
			goto unsure; /* flags (b, q) or keys may follow */
		if ((__u32)tend >= len || BUF(s, tend) != ' ')
			goto unsure;
		kpos = tend + 1;
		kend = scan_token(kpos, len);
		if (kend < 0 || (__u32)kend <= kpos || (__u32)kend >= len ||
		    (__u32)kend - kpos > KEY_MAX)
			goto unsure;
		exp = cmd == CMD_DELETE ? HINT_DELETE : cmd == CMD_ARITH ? HINT_KEEP : EXP_UNKNOWN;
		invalidate_key(kpos, (__u32)kend - kpos, exp);
		return walk_stop(w, len);
	}

	/* UDP: only a request that is one command is settled by its answer (the storage
	 * commands' data block is checked below, once its length is known) */
	if (s->ws.udp && (i > 0 || (cmd != CMD_STORE && cmd != CMD_META_SET &&
				    (__u32)eol + 1 != len)))
		exact = 0;
	/* a complete line [pos, eol]; its content ends before "\r\n" (or a bare "\n") */
	e = (__u32)eol;
	if (e > pos && BUF(s, e - 1) == '\r')
		e--;
	answers = 1;
	if (e - pos >= 8 && BUF(s, e - 8) == ' ' && buf_eq(s, e - 7, "noreply", 7))
		answers = 0;
	w->pos = eol + 1;

	switch (cmd) {
	case CMD_GET:
		break;
	case CMD_QUIT:
		answers = 0;
		break;
	case CMD_HARMLESS:
		if (buf_eq(s, pos, "m", 1)) { /* mn, me: flags may ask for quiet mode */
			mf = meta_scan(tend + 1, e);
			if (mf < 0 || (mf & MF_QUIET)) {
				s->ws.desync = 1;
				s->ws.exact = 0;
			}
		}
		break;
	case CMD_FLUSH:
		flush_command(tend, eol, exact && answers);
		break;
	case CMD_GAT: { /* gat <exptime> <key>*: one answer for all keys */
		int xend = scan_token(tend + 1, e);
		if (xend < 0 || (__u32)xend >= e)
			goto unsure;
		exp = exp_from_token(tend + 1, xend);
		kpos = xend + 1;
		for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
			kend = scan_token(kpos, e);
			if (kend < 0 || (__u32)kend <= kpos)
				break;
			if ((__u32)kend - kpos > KEY_MAX)
				goto unsure;
			invalidate_key_x(kpos, (__u32)kend - kpos, exp, exact);
			kpos = kend + 1;
			if (kpos >= e)
				break;
		}
		if (kpos < e)
			goto unsure; /* more keys than we walked */
		break;
	}
	default:
		/* <cmd> <key> ...: the key is the second token */
		if (BUF(s, tend) != ' ')
			goto unsure;
		kpos = tend + 1;
		kend = scan_token(kpos, e);
		if (kend < 0 || (__u32)kend <= kpos || (__u32)kend - kpos > KEY_MAX)
			goto unsure;
		klen = (__u32)kend - kpos;
		switch (cmd) {
		case CMD_STORE: /* <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply] */
			t1 = scan_token(kend + 1, e);
			t2 = t1 < 0 || (__u32)t1 >= e ? -1 : scan_token(t1 + 1, e);
			t3 = t2 < 0 || (__u32)t2 >= e ? -1 : scan_token(t2 + 1, e);
			if (t3 < 0)
				goto unsure;
			exp = exp_from_token(t1 + 1, t2);
			bytes = parse_uint(t2 + 1, t3);
			if (bytes < 0)
				goto unsure;
			/* add and cas may fail and leave the old item and its expiry */
			if (BUF(s, pos) == 'a' && BUF(s, pos + 1) == 'd')
				exp = exp_either(key_hash(kpos, klen), exp);
			else if (BUF(s, pos) == 'c')
				exp = exp_either(key_hash(kpos, klen), exp);
			break;
		case CMD_META_SET: /* ms <key> <datalen> <flag>* */
			t1 = scan_token(kend + 1, e);
			if (t1 < 0)
				goto unsure;
			bytes = parse_uint(kend + 1, t1);
			if (bytes < 0)
				goto unsure;
			mf = meta_scan(t1 + 1, e);
			exp = meta_exp(t1 + 1, e, EXP_NEVER);
			if (mf > 0 && (mf & MF_COND)) /* a mode or a CAS: may leave the old item */
				exp = exp_either(key_hash(kpos, klen), exp);
			break;
		case CMD_TOUCH: /* touch <key> <exptime> [noreply] */
			t1 = scan_token(kend + 1, e);
			exp = t1 < 0 ? EXP_UNKNOWN : exp_from_token(kend + 1, t1);
			break;
		case CMD_DELETE:
			exp = HINT_DELETE;
			break;
		case CMD_META_DEL:
			mf = meta_scan(kend + 1, e);
			exp = HINT_DELETE;
			break;
		case CMD_ARITH:
			exp = HINT_KEEP;
			break;
		case CMD_META_GET:
			mf = meta_scan(kend + 1, e);
			write = mf < 0 || (mf & MF_WRITE);
			exp = meta_exp(kend + 1, e, HINT_KEEP);
			break;
		default: /* ma */
			mf = meta_scan(kend + 1, e);
			exp = meta_exp(kend + 1, e, HINT_KEEP);
			break;
		}
		if (mf < 0)
			goto unsure;
		if (mf & MF_QUIET) {
			/* the answer may be left out: the count can no longer be trusted */
			s->ws.desync = 1;
			s->ws.exact = 0;
			exact = 0;
			answers = 0;
		}
		if (s->ws.udp && (cmd == CMD_STORE || cmd == CMD_META_SET) &&
		    (__u32)eol + 1 + (__u32)bytes + 2 != len)
			exact = 0;
		if (write) {
			if (mf & MF_B64)
				invalidate_all(ST_INVAL_UNPARSABLE); /* the real key is not what we see */
			else
				invalidate_key_x(kpos, klen, exp, exact && answers);
		}
		if (cmd == CMD_STORE || cmd == CMD_META_SET) {
			/* skip the data block: <bytes> and "\r\n" */
			__u32 next = eol + 1 + (__u32)bytes + 2;
			if (exact && answers)
				s->ws.cmds++;
			if (next > len) {
				s->ws.skip = next - len;
				return walk_stop(w, len);
			}
			w->pos = next;
			return 0;
		}
	}
	if (exact && answers)
		s->ws.cmds++;
	return 0;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
	return walk_stop(w, -1);
}

#define WALK_MAX 512 /* commands walked per chunk; more: not sure */

/* Walks the commands in scratch.buf[pos, len) (TCP or UDP) and invalidates every key they may
 * change. Returns where it stopped (see struct walk), or -1 when it could not be sure (everything
 * was invalidated). scratch.ws says whether the stream is followed and carries the counts. */
__noinline int invalidate_mutations(__u32 pos, __u32 len)
{
	struct scratch *s = get_scratch();
	struct walk w = { .pos = pos, .len = len, .ret = -2 };

	if (!s)
		return -1;
	s->ws.skip = 0;
	bpf_loop(WALK_MAX, walk_command, &w, 0);
	if (w.ret == -2) { /* more commands than we walk */
		invalidate_all(ST_INVAL_UNPARSABLE);
		return -1;
	}
	return w.ret;
}

#endif
