/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The text protocol's mutations: each command of a request (UDP) or of a client's byte stream (TCP)
 * is walked exactly as memcached 1.6 reads it (try_read_command_ascii, tokenize_command and
 * process_command_ascii in proto_text.c, safe_strto* in util.c), so that
 *  - the framing is memcached's: a data block follows a storage line only when memcached reads one
 *    (a line it refuses is followed by commands, not data), and it is skipped by memcached's length;
 *  - every key a command may change is invalidated before the server sees it, with the expiry the
 *    server gives it (coherence.h), and nothing else: an unknown command or a refused line changes
 *    nothing in memcached, so it invalidates nothing;
 *  - the answers the server will give are counted as it counts them (for settling writes on
 *    followed connections); where that count depends on data (quiet meta commands, errors), the
 *    connection falls back to the quarantine.
 * Only what cannot be parsed with certainty voids the whole cache (counted as unparsable). */
#ifndef INKCACHE_MUTATIONS_H
#define INKCACHE_MUTATIONS_H

#include "inkcache_common.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "coherence.h"
#include "stream.h"
#include "commands.h"
#include "meta_writes.h"

/* set add replace append prepend cas: `<cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply]`
 * at line [pos, eol). Returns the offset after the data block memcached reads (eol + 1 when it
 * reads none). `which`: 's'et 'a'dd 'r'eplace 'A'ppend 'P'repend 'c'as. */
__noinline __s64 walk_storage(__u32 eol, __u32 which)
{
	struct scratch *s = get_scratch();
	__u32 cas = which == 'c', nt, nr, klen, koff, answers;
	__s32 vlen;
	int block;
	__u64 exp, h;

	if (!s)
		return WL_VOID;
	nt = s->tk.n + 1; /* memcached's ntokens */
	if (nt != (cas ? 7 : 6) && nt != (cas ? 8 : 7)) {
		uncountable(s); /* ERROR, no data read */
		return eol + 1;
	}
	nr = noreply(s);
	answers = !nr;
	klen = s->tk.len[1];
	koff = s->tk.off[1];
	/* every refusal below answers CLIENT_ERROR (unless noreply) and reads no data */
	if (klen > KEY_MAX || tok_number(s, 2, NUM_UNSIGNED) || tok_exptime(s, 3, &exp) ||
	    tok_number(s, 4, NUM_SIGNED))
		goto refused;
	vlen = (__s32)s->num;
	if (cas && tok_number(s, 5, NUM_UNSIGNED))
		goto refused;
	if (vlen < 0 || vlen > MC_INT_MAX - 2)
		goto refused;
	/* memcached reads <bytes> + 2 now (into the item, or swallowed if it cannot store it: too
	 * large, or out of memory; a set then deletes the old item, a replace leaves it): the key
	 * may change */
	h = key_hash(koff, klen);
	block = data_block_ok(s, eol + 1, vlen);
	if (block == 0) {
		/* refused (bad data chunk), or too large (the old item deleted): invalidated, the
		 * expiry and meta state left as they were */
		write_key(s, koff, klen, h, HINT_KEEP, 0, META_KEEP);
		uncountable(s);
		return (__s64)eol + 1 + (__s64)vlen + 2;
	}
	if (which == 'A' || which == 'P')
		exp = HINT_KEEP;     /* append/prepend keep the item's expiry */
	else if (which != 's' || block < 0)
		exp = exp_either(koff, klen, h, exp); /* may fail and leave the old item */
	/* a set leaves a fresh item (or none), if its data block is known to be taken */
	write_key(s, koff, klen, h, exp, answers, which == 's' && block > 0 ? META_CLEAN : META_KEEP);
	count_answers(s, answers);
	return (__s64)eol + 1 + (__s64)vlen + 2;
refused:
	uncountable(s);
	return eol + 1;
}

/* delete <key> [0] [noreply] */
__noinline int walk_delete(void)
{
	struct scratch *s = get_scratch();
	__u32 nt, nr = 0, valid = 1;

	if (!s)
		return -1;
	nt = s->tk.n + 1;
	if (nt < 3 || nt > 5) {
		uncountable(s); /* ERROR */
		return 0;
	}
	if (nt > 3) {
		__u32 zero = tok_is(s, 2, "0", 1);
		nr = noreply(s);
		valid = (nt == 4 && (zero || nr)) || (nt == 5 && zero && nr);
	}
	if (!valid || s->tk.len[1] > KEY_MAX) {
		uncountable(s); /* CLIENT_ERROR (silenced by noreply): nothing deleted */
		return 0;
	}
	write_key(s, s->tk.off[1], s->tk.len[1], key_hash(s->tk.off[1], s->tk.len[1]), HINT_DELETE,
		  !nr, META_KEEP);
	count_answers(s, !nr);
	return 0;
}

/* incr/decr <key> <delta> [noreply], touch <key> <exptime> [noreply] (`touch`). */
__noinline int walk_key_op(__u32 touch)
{
	struct scratch *s = get_scratch();
	__u32 nt, nr;
	__u64 exp = HINT_KEEP;

	if (!s)
		return -1;
	nt = s->tk.n + 1;
	if (nt != 4 && nt != 5) {
		uncountable(s); /* ERROR */
		return 0;
	}
	nr = noreply(s);
	if (s->tk.len[1] > KEY_MAX ||
	    (touch ? tok_exptime(s, 2, &exp) : tok_number(s, 2, NUM_UNSIGNED))) {
		uncountable(s); /* CLIENT_ERROR: nothing changes */
		return 0;
	}
	write_key(s, s->tk.off[1], s->tk.len[1], key_hash(s->tk.off[1], s->tk.len[1]), exp, !nr,
		  META_KEEP);
	count_answers(s, !nr);
	return 0;
}

/* The keys of gat/gats from token 2 on (re-tokenizing memcached's remainder, as it does): each is
 * touched with expiry `exp`, in order, until one is longer than a key may be (memcached stops
 * there). One answer for the whole line. */
struct gat_walk {
	__u32 pos;
	__u32 end;
	__u64 exp;
	__u32 exact;
	int ret;
};

static long gat_key(__u32 i, void *ctx)
{
	struct gat_walk *w = ctx;
	int a = mc_scan_space(w->pos, w->end, 0), b;

	if (a < 0 || (__u32)a >= w->end)
		return 1;
	b = mc_scan_space(a, w->end, 1);
	if (b < 0) {
		w->ret = -1;
		return 1;
	}
	if ((__u32)b - a > KEY_MAX)
		return 1; /* CLIENT_ERROR from here on: later keys are not touched */
	invalidate_key_x(a, b - a, key_hash(a, b - a), w->exp, w->exact ? INV_EXACT : 0);
	w->pos = b;
	return 0;
}

static __always_inline int walk_gat(void)
{
	struct scratch *s = get_scratch();
	struct gat_walk w = {};
	__u64 exp;

	if (!s)
		return -1;
	if (s->tk.n < 3 || tok_exptime(s, 1, &exp)) {
		uncountable(s); /* ERROR / CLIENT_ERROR: nothing touched */
		return 0;
	}
	w.pos = s->tk.off[2];
	w.end = s->tk.end;
	w.exp = exp;
	w.exact = s->ws.exact;
	bpf_loop(SCRATCH_LEN / 2, gat_key, &w, 0);
	if (w.ret < 0)
		return -1;
	count_answers(s, 1);
	return 0;
}

/* flush_all [delay] [noreply]: voids everything; with a delay, fills are refused until the delayed
 * flush has surely happened in the server. */
__noinline int walk_flush(void)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	__u32 nt, nr;
	__u64 now = bpf_ktime_get_ns(), until = 0;
	__s32 delay = 0;

	if (!s || !g)
		return -1;
	nt = s->tk.n + 1;
	if (nt < 2 || nt > 4) {
		uncountable(s); /* ERROR */
		return 0;
	}
	nr = noreply(s);
	if (nt != (nr ? 3 : 2)) {
		if (tok_number(s, 1, NUM_SIGNED)) {
			uncountable(s); /* CLIENT_ERROR invalid exptime argument: no flush */
			return 0;
		}
		delay = (__s32)s->num;
	}
	if (s->ws.exact && !nr)
		flush_exact();
	else
		invalidate_all(ST_INVAL_FLUSH);
	count_answers(s, !nr);
	if (invalidation_off)
		return 0;
	if (delay > 0) {
		__u64 at = exptime_to_ns((__s64)delay + 2, now, g); /* +2: exptime_to_ns is 2 s early */
		until = (at == EXP_UNKNOWN ? now : at) + 2 * NS_PER_SEC;
	}
	if (until > g->fill_block_until)
		g->fill_block_until = until;
	return 0;
}

/* Command names (token 0), as process_command_ascii dispatches them. */
enum mc_kind {
	MK_ERROR = 0,  /* answered ERROR: changes nothing */
	MK_READ,       /* get gets bget: reads only, one answer */
	MK_GAT,        /* gat gats */
	MK_STORE,      /* set add replace append prepend cas (walk_storage's `which` in mk_arg) */
	MK_DELETE,
	MK_ARITH,      /* incr decr */
	MK_TOUCH,
	MK_FLUSH,
	MK_ONE,        /* version verbosity cache_memlimit: one line, no data change */
	MK_STATS,      /* stats: a multi-line answer (STAT/ITEM/PREFIX ... END), no data change */
	MK_OTHER,      /* slabs lru lru_crawler watch shutdown extstore ...: no data change, answers
			* not counted (some are open-ended) */
	MK_QUIT,       /* quit: the connection closes */
	MK_META,       /* mg ms md ma me mn (the second letter in mk_arg) */
	MK_HTTP,       /* an HTTP request line: memcached closes the connection */
};

/* What token 0 is. *arg gets the storage command's letter or the meta command's second letter. */
__noinline int mc_kind(__u32 *arg)
{
	struct scratch *s = get_scratch();
	__u32 n, len, off;
	__u8 c0, c1;

	if (!s || !arg)
		return MK_ERROR;
	n = s->tk.n;
	if (n == 0)
		return MK_ERROR;
	len = s->tk.len[0];
	off = s->tk.off[0];
	if (len < 2)
		return MK_ERROR;
	c0 = BUF(s, off);
	c1 = BUF(s, off + 1);
	*arg = 0;
	if (c0 == 'm' && len == 2) {
		*arg = c1;
		return MK_META;
	}
	if (c0 == 'g') {
		if (n < 2)
			return MK_ERROR; /* WANT_TOKENS_MIN(3) */
		if (tok_is(s, 0, "get", 3) || tok_is(s, 0, "gets", 4))
			return MK_READ;
		if (tok_is(s, 0, "gat", 3) || tok_is(s, 0, "gats", 4))
			return MK_GAT;
		return MK_ERROR;
	}
	if (c0 == 's') {
		if (tok_is(s, 0, "set", 3)) {
			*arg = 's';
			return MK_STORE;
		}
		if (tok_is(s, 0, "stats", 5))
			return MK_STATS;
		if (tok_is(s, 0, "shutdown", 8) || tok_is(s, 0, "slabs", 5))
			return MK_OTHER;
		return MK_ERROR;
	}
	if (c0 == 'a') {
		if (tok_is(s, 0, "add", 3))
			*arg = 'a';
		else if (tok_is(s, 0, "append", 6))
			*arg = 'A';
		return *arg ? MK_STORE : MK_ERROR;
	}
	if (c0 == 'c') {
		if (tok_is(s, 0, "cas", 3)) {
			*arg = 'c';
			return MK_STORE;
		}
		if (tok_is(s, 0, "cache_memlimit", 14))
			return MK_OTHER;
		return MK_ERROR;
	}
	if (c0 == 'i')
		return tok_is(s, 0, "incr", 4) ? MK_ARITH : MK_ERROR;
	if (c0 == 'd') {
		if (tok_is(s, 0, "delete", 6))
			return MK_DELETE;
		if (tok_is(s, 0, "decr", 4))
			return MK_ARITH;
		return MK_ERROR;
	}
	if (c0 == 't')
		return tok_is(s, 0, "touch", 5) ? MK_TOUCH : MK_ERROR;
	if (tok_is(s, 0, "replace", 7)) {
		*arg = 'r';
		return MK_STORE;
	}
	if (tok_is(s, 0, "prepend", 7)) {
		*arg = 'P';
		return MK_STORE;
	}
	if (tok_is(s, 0, "bget", 4))
		return n < 2 ? MK_ERROR : MK_READ;
	if (tok_is(s, 0, "flush_all", 9))
		return MK_FLUSH;
	if (tok_is(s, 0, "version", 7) || tok_is(s, 0, "verbosity", 9))
		return MK_ONE;
	if (tok_is(s, 0, "quit", 4))
		return MK_QUIT;
	if (tok_is(s, 0, "lru_crawler", 11) || tok_is(s, 0, "watch", 5) || tok_is(s, 0, "lru", 3) ||
	    tok_is(s, 0, "extstore", 8) || tok_is(s, 0, "refresh_certs", 13) ||
	    tok_is(s, 0, "misbehave", 9) || tok_is(s, 0, "debugtime", 9))
		return MK_OTHER;
	/* anything else: memcached closes on an HTTP request line (its last token starts with
	 * "HTTP/"), else answers ERROR */
	{
		__u32 last = (n - 1) & TOK_MASK;
		__u32 loff = s->tk.off[last];
		if (s->tk.len[last] >= 5 && BUF(s, loff) == 'H' && BUF(s, loff + 1) == 'T' &&
		    BUF(s, loff + 2) == 'T' && BUF(s, loff + 3) == 'P' && BUF(s, loff + 4) == '/')
			return MK_HTTP;
	}
	return MK_ERROR;
}

/* The command line [pos, eol] (eol at its '\n'): what it changes, what it answers, and where the
 * next command starts (after its data block, if memcached reads one). */
static __always_inline __s64 walk_line(__u32 pos, __u32 eol)
{
	struct scratch *s = get_scratch();
	__u32 arg = 0;
	int e, kind;

	if (!s)
		return WL_VOID;
	e = mc_content_end(pos, eol);
	if (e < 0 || mc_tokenize(pos, e) < 0)
		return WL_VOID;
	kind = mc_kind(&arg);
	switch (kind) {
	case MK_STORE:
		return walk_storage(eol, arg);
	case MK_META:
		return walk_meta(eol, arg);
	case MK_READ:
	case MK_STATS:
	case MK_ONE:
		count_answers(s, 1);
		if (kind == MK_ONE && tok_is(s, 0, "verbosity", 9) &&
		    (s->tk.n + 1 < 3 || s->tk.n + 1 > 4 || noreply(s)))
			uncountable(s); /* ERROR, or a noreply that silences it */
		break;
	case MK_GAT:
		if (walk_gat() < 0)
			return WL_VOID;
		break;
	case MK_DELETE:
		walk_delete();
		break;
	case MK_ARITH:
		walk_key_op(0);
		break;
	case MK_TOUCH:
		walk_key_op(1);
		break;
	case MK_FLUSH:
		walk_flush();
		break;
	case MK_QUIT:
	case MK_HTTP:
		return WL_STOP;
	default: /* MK_ERROR, MK_OTHER: no data changes; answers not counted */
		uncountable(s);
		break;
	}
	return eol + 1;
}

/* One command at w->pos (a bpf_loop callback: the verifier checks it once). A line not complete
 * yet stops the walk there: the caller carries it over to the next bytes (on a connection whose
 * position is not known it cannot, and voids the cache; at the end of a UDP datagram memcached
 * drops it). */
static long walk_command(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct scratch *s = get_scratch();
	__u32 pos = w->pos, len = w->len;
	__s64 next;
	int eol;

	if (!s)
		return walk_stop(w, -1);
	if (pos >= len)
		return walk_stop(w, len);
	eol = scan_eol(pos, len);
	if (eol < 0) /* a line not complete yet: the caller carries it over (or, at the end of a
		      * datagram, drops it as memcached does) */
		return walk_stop(w, pos);
	/* UDP: only a request that is one write is settled by its answer */
	if (s->ws.udp && i > 0)
		s->ws.exact = 0;
	next = walk_line(pos, eol);
	if (next == WL_VOID) {
		invalidate_all(ST_INVAL_UNPARSABLE);
		return walk_stop(w, -1);
	}
	if (next == WL_STOP) {
		s->ws.stopped = 1;
		return walk_stop(w, len);
	}
	if (s->ws.udp && next != len && next != (__s64)eol + 1)
		s->ws.exact = 0; /* a data block that does not end the datagram: more follows */
	if (next > len) {
		s->ws.skip = next - len;
		return walk_stop(w, len);
	}
	w->pos = next;
	return 0;
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
	s->ws.end = len;
	bpf_loop(WALK_MAX, walk_command, &w, 0);
	if (w.ret == -2) { /* more commands than we walk */
		invalidate_all(ST_INVAL_UNPARSABLE);
		return -1;
	}
	return w.ret;
}

#endif
