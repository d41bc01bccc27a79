/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* memcached binary protocol requests (magic 0x80): every key a request may change is invalidated
 * before the server sees it, as the text parser does for text commands.
 *
 * A request is a 24-byte header (magic, opcode, key length BE16, extras length, data type,
 * vbucket, body length BE32, opaque, CAS), then the body: extras, key, value. Requests follow one
 * another in a segment (pipelined, quiet variants). The walk follows memcached's own rules
 * (proto_bin.c, try_read_command_binary, dispatch_bin_command), framing included: a request it
 * refuses ends the connection, an opcode it does not know swallows its body, a header or key cut
 * by a segment end is carried over to the next segment on followed connections. */
#ifndef INKCACHE_BINPROTO_H
#define INKCACHE_BINPROTO_H

#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "maps.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"

#define BIN_REQ_MAGIC 0x80
#define BIN_HDR_LEN   24
/* Every request takes at least a header, so this many cover any scratch buffer. */
#define MAX_BIN_REQS  (SCRATCH_LEN / BIN_HDR_LEN + 1)

/* bin_request results besides the next request's offset */
#define BIN_VOID     -1   /* cannot be sure: void the whole cache, stop */
#define BIN_STOP     -2   /* quit or a protocol error: memcached closes, executes nothing after */
#define BIN_CUT      -3   /* the header, extras or key go on in the next segment */

/* Opcodes (memcached protocol_binary.h); the quiet variants behave the same for coherence. */
enum bin_op {
	BIN_GET = 0x00, BIN_SET = 0x01, BIN_ADD = 0x02, BIN_REPLACE = 0x03, BIN_DELETE = 0x04,
	BIN_INCR = 0x05, BIN_DECR = 0x06, BIN_QUIT = 0x07, BIN_FLUSH = 0x08, BIN_GETQ = 0x09,
	BIN_NOOP = 0x0a, BIN_VERSION = 0x0b, BIN_GETK = 0x0c, BIN_GETKQ = 0x0d, BIN_APPEND = 0x0e,
	BIN_PREPEND = 0x0f, BIN_STAT = 0x10, BIN_SETQ = 0x11, BIN_ADDQ = 0x12, BIN_REPLACEQ = 0x13,
	BIN_DELETEQ = 0x14, BIN_INCRQ = 0x15, BIN_DECRQ = 0x16, BIN_QUITQ = 0x17, BIN_FLUSHQ = 0x18,
	BIN_APPENDQ = 0x19, BIN_PREPENDQ = 0x1a, BIN_TOUCH = 0x1c, BIN_GAT = 0x1d, BIN_GATQ = 0x1e,
	BIN_SASL_LIST = 0x20, BIN_SASL_AUTH = 0x21, BIN_SASL_STEP = 0x22, BIN_GATK = 0x23,
	BIN_GATKQ = 0x24,
};

/* What a request does, for coherence. */
enum bin_class {
	BC_UNKNOWN = 0,
	BC_READ,      /* get getq getk getkq: key, read-only */
	BC_EMPTY,     /* noop version sasl-list: no body, read-only */
	BC_QUIT,      /* quit quitq */
	BC_STAT,      /* stat [key] */
	BC_SASL,      /* sasl auth/step: mechanism as key, then data; changes no item */
	BC_STORE,     /* set add replace: extras flags(4) exptime(4), key, value */
	BC_DELETE,    /* delete: key */
	BC_ARITH,     /* incr decr: extras delta(8) initial(8) exptime(4), key */
	BC_CONCAT,    /* append prepend: key, value */
	BC_TOUCH,     /* touch gat gatq gatk gatkq: extras exptime(4), key */
	BC_FLUSH,     /* flush: optional extras delay(4) */
};

static __always_inline int bin_class_of(__u32 op)
{
	switch (op) {
	case BIN_GET: case BIN_GETQ: case BIN_GETK: case BIN_GETKQ:
		return BC_READ;
	case BIN_NOOP: case BIN_VERSION: case BIN_SASL_LIST:
		return BC_EMPTY;
	case BIN_QUIT: case BIN_QUITQ:
		return BC_QUIT;
	case BIN_STAT:
		return BC_STAT;
	case BIN_SASL_AUTH: case BIN_SASL_STEP:
		return BC_SASL;
	case BIN_SET: case BIN_ADD: case BIN_REPLACE: case BIN_SETQ: case BIN_ADDQ: case BIN_REPLACEQ:
		return BC_STORE;
	case BIN_DELETE: case BIN_DELETEQ:
		return BC_DELETE;
	case BIN_INCR: case BIN_DECR: case BIN_INCRQ: case BIN_DECRQ:
		return BC_ARITH;
	case BIN_APPEND: case BIN_PREPEND: case BIN_APPENDQ: case BIN_PREPENDQ:
		return BC_CONCAT;
	case BIN_TOUCH: case BIN_GAT: case BIN_GATQ: case BIN_GATK: case BIN_GATKQ:
		return BC_TOUCH;
	case BIN_FLUSH: case BIN_FLUSHQ:
		return BC_FLUSH;
	}
	return BC_UNKNOWN;
}

/* The big-endian 32-bit word at buf[pos]. */
static __always_inline __u32 bin_be32(struct scratch *s, __u32 pos)
{
	return bpf_ntohl((__u32)word_at(s, pos));
}

/* A binary exptime (unsigned; memcached's realtime(): 0 never, up to 30 days relative, else an
 * absolute unix time) as a kernel expiry. */
static __always_inline __u64 bin_exp(__u32 exptime)
{
	struct ink_global *g = global_state();

	if (!g)
		return EXP_UNKNOWN;
	return exptime_to_ns((__s64)exptime, bpf_ktime_get_ns(), g);
}

/* Expiry hint for a write that either leaves the key's item as it was (expiry unchanged) or
 * creates it with expiry `exp`, and we cannot know which: add (fails if the key exists), any store
 * with a CAS (fails on a mismatch), incr/decr that may create the key. The earlier of the two
 * keeps the kernel from serving past either; without a hint the old expiry is unknown, served at
 * most max_age, so the hint becomes at most now + max_age. */
static __always_inline __u64 bin_exp_either(__u32 kpos, __u32 klen, __u64 h, __u64 exp)
{
	return exp_either(kpos, klen, h, exp);
}

/* flush [delay]: voids everything now and, with a delay, refuses fills until the delayed flush
 * has surely happened in the server (as text flush_all). `cut`: the delay is beyond the segment. */
static __always_inline void bin_flush(__u32 ext, __u32 delay, int cut)
{
	struct ink_global *g = global_state();
	__u64 now = bpf_ktime_get_ns(), until = 0;

	invalidate_all(ST_INVAL_FLUSH);
	if (!g || invalidation_off)
		return;
	if (cut) {
		until = now + 2592000ULL * NS_PER_SEC; /* delay unknown: assume the longest */
	} else if (ext == 4 && delay > 0) {
		__u64 at = exptime_to_ns((__s64)delay + 2, now, g); /* +2: exptime_to_ns is 2 s early */
		until = (at == EXP_UNKNOWN ? now : at) + 2 * NS_PER_SEC;
	}
	if (until > g->fill_block_until)
		g->fill_block_until = until;
}

/* One request at buf[pos, end), framed exactly as memcached reads it (try_read_command_binary,
 * dispatch_bin_command): it consumes the header, extras and key, then only the commands that take
 * a value read (or swallow) the rest of the body; an opcode it does not know swallows the body
 * length after the key (so its framing is followed too), and a request it refuses is a protocol
 * error after which it closes the connection. Invalidates what the request may change. Returns
 * the offset just past the request (beyond `end` if its value continues in the next segment; the
 * key has been invalidated then), BIN_CUT if the header, extras or key are cut by `end`, BIN_STOP
 * if memcached closes the connection (nothing after runs), BIN_VOID if the scratch is missing. */
__noinline __s64 bin_request(__u32 pos, __u32 end)
{
	struct scratch *s = get_scratch();
	__u32 op, klen, ext, body, kpos, fixed, valid, fresh = 0;
	__u64 w0, cas, exp, h;
	__s64 next;
	int cls;

	if (!s || end > SCRATCH_LEN)
		return BIN_VOID;
	if (pos + BIN_HDR_LEN > end)
		return BIN_CUT;
	w0 = word_at(s, pos);
	op = (w0 >> 8) & 0xff;
	klen = bpf_ntohs((__u16)(w0 >> 16));
	ext = (w0 >> 32) & 0xff;
	body = bin_be32(s, pos + 8);
	cas = word_at(s, pos + 16);
	/* a bad magic, lengths that do not add up or a key too long: memcached closes */
	if ((w0 & 0xff) != BIN_REQ_MAGIC || klen > body || klen + ext > body || klen > KEY_MAX)
		return BIN_STOP;
	fixed = BIN_HDR_LEN + ext + klen;
	if (pos + fixed > end)
		return BIN_CUT; /* memcached waits for the extras and key */
	kpos = pos + BIN_HDR_LEN + ext;
	cls = bin_class_of(op);
	h = klen ? key_hash(kpos, klen) : 0;
	next = (__s64)pos + fixed; /* what memcached consumed before dispatching */

	switch (cls) {
	case BC_EMPTY:
		valid = !ext && !klen && !body;
		break;
	case BC_QUIT:
		return BIN_STOP;
	case BC_FLUSH:
		valid = !klen && body == ext && (ext == 0 || ext == 4);
		break;
	case BC_STORE:
		valid = ext == 8 && klen && body >= klen + 8;
		next = (__s64)pos + BIN_HDR_LEN + body; /* the value is read (or swallowed) */
		break;
	case BC_READ:
	case BC_DELETE:
		valid = !ext && klen && body == klen;
		break;
	case BC_ARITH:
		valid = ext == 20 && klen && body == klen + 20;
		break;
	case BC_CONCAT:
		valid = !ext && klen && body >= klen;
		next = (__s64)pos + BIN_HDR_LEN + body;
		break;
	case BC_STAT:
		valid = !ext; /* a body longer than the key is read as the next request */
		break;
	case BC_SASL:
		valid = !ext && klen;
		next = (__s64)pos + BIN_HDR_LEN + body; /* the data is read (or swallowed) */
		break;
	case BC_TOUCH:
		valid = ext == 4 && klen; /* a longer body is read as the next request */
		break;
	default:
		/* unknown opcode: memcached answers an error and swallows the body length, counted
		 * after the extras and key it already consumed */
		return (__s64)pos + fixed + body;
	}
	if (!valid)
		return BIN_STOP; /* a protocol error: memcached closes the connection */

	switch (cls) {
	case BC_FLUSH:
		bin_flush(ext, ext == 4 ? bin_be32(s, pos + BIN_HDR_LEN) : 0, 0);
		return next;
	case BC_STORE: /* only a set without a CAS surely leaves a fresh item (or none: a value
			* memcached cannot store unlinks the old item on a set only); add, replace and a
			* CAS may leave the old item, its expiry and meta state in place */
		exp = bin_exp(bin_be32(s, pos + BIN_HDR_LEN + 4));
		fresh = !cas && (op == BIN_SET || op == BIN_SETQ);
		if (!fresh)
			exp = bin_exp_either(kpos, klen, h, exp);
		break;
	case BC_DELETE: /* with a CAS it may fail: the item keeps its expiry then */
		if (op == BIN_GET || op == BIN_GETQ || op == BIN_GETK || op == BIN_GETKQ)
			return next;
		exp = cas ? HINT_KEEP : HINT_DELETE;
		break;
	case BC_ARITH: { /* an existing item keeps its expiry; a missing one is created with exptime,
			  * unless exptime is 0xffffffff */
		__u32 e = bin_be32(s, pos + BIN_HDR_LEN + 16);
		exp = e == 0xffffffff ? HINT_KEEP : bin_exp_either(kpos, klen, h, bin_exp(e));
		break;
	}
	case BC_CONCAT:
		exp = HINT_KEEP;
		break;
	case BC_TOUCH:
		exp = bin_exp(bin_be32(s, pos + BIN_HDR_LEN));
		break;
	default: /* read-only */
		return next;
	}
	invalidate_key(kpos, klen, h, exp, fresh ? META_CLEAN : META_KEEP);
	return next;
}

/* Walks the binary requests in scratch.buf[off, len) and invalidates every key they may change,
 * recording the expiry they set. Returns where it stopped: len, or the start of a request whose
 * header, extras or key the segment cut (a followed stream carries it over to the next segment);
 * scratch.ws.skip gets the bytes of a value still to come, scratch.ws.stopped is set when
 * memcached closes the connection. -1 if the whole cache was voided. */
__noinline int invalidate_binary(__u32 off, __u32 len)
{
	struct scratch *s = get_scratch();
	__u32 pos = off;

	if (!s || off > SCRATCH_LEN || len > SCRATCH_LEN)
		goto unsure;
	s->ws.skip = 0;
	for (__u32 c = 0; c < MAX_BIN_REQS; c++) {
		__s64 r;
		if (pos >= len)
			return len;
		r = bin_request(pos, len);
		if (r == BIN_CUT)
			return pos;
		if (r == BIN_STOP) {
			s->ws.stopped = 1;
			return len;
		}
		if (r < 0)
			goto unsure;
		if (r > len) {
			s->ws.skip = r - len;
			return len;
		}
		pos = (__u32)r;
	}
	if (pos >= len)
		return len;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
	return -1;
}

#endif
