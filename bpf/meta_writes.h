/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The meta protocol's writes (ms md ma, and mg with T N R), walked as memcached 1.6 reads them:
 * the flags as _meta_flag_preparse takes them (the first byte of each token; a repeated or unknown
 * flag, a bad number, a bad base64 key refuse the command), the key decoded as its base64_decode
 * does, the data block of ms read whenever its length parses (memcached swallows it after an
 * error), and the expiry and meta state each write may leave (coherence.h). Used by
 * mutations.h's walk_line. */
#ifndef INKCACHE_META_WRITES_H
#define INKCACHE_META_WRITES_H

#include "inkcache_common.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "coherence.h"
#include "commands.h"
/* Meta command flags (memcached's _meta_flag_preparse). */
#define MF_QUIET  (1U << 0)   /* q: some answers are left out */
#define MF_B64    (1U << 1)   /* b: the key is base64 */
#define MF_TTL    (1U << 2)   /* T<ttl> */
#define MF_VIVIFY (1U << 3)   /* N<ttl> */
#define MF_WIN    (1U << 4)   /* R<ttl>: may hand out a win token (meta state) */
#define MF_CAS    (1U << 5)   /* C<cas>: may fail on a mismatch */
#define MF_STALE  (1U << 6)   /* I: mark stale instead of deleting / set stale */
#define MF_OPAQUE_LONG (1U << 7) /* an O token over 32 bytes: an error answer */
#define MF_MODE_E (1U << 8)   /* M<mode> (ms): E add */
#define MF_MODE_AP (1U << 9)  /* A append, P prepend */
#define MF_MODE_BAD (1U << 10) /* a mode ms/ma refuse */
#define MF_MODE_OTHER (1U << 11) /* R replace, S set, or ma's I + D - */
#define MF_ERROR  (1U << 31)  /* memcached refuses the flags: the command changes nothing */

#define MFLAG_MAX_OPT_LENGTH 20 /* memcached refuses more tokens (ntokens) than this */
#define MFLAG_MAX_OPAQUE     32

/* base64 digit value (memcached's dtable), 0x80 for bytes it skips; '=' is 0. */
static __always_inline __u32 b64_val(__u8 c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	if (c == '=')
		return 0;
	return 0x80;
}

static long b64_count(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct b64_walk *w;

	if (!s)
		return 1;
	w = &s->bw;
	if (i >= w->len)
		return 1;
	if (b64_val(BUF(s, w->off + i)) != 0x80)
		w->count++;
	return 0;
}

static long b64_step(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct b64_walk *w;
	__u32 v;
	__u8 c;

	if (!s)
		return 1;
	w = &s->bw;
	if (i >= w->len)
		return 1;
	c = BUF(s, w->off + i);
	v = b64_val(c);
	if (v == 0x80)
		return 0;
	if (c == '=')
		w->pad++;
	w->block = (w->block << 6) | v;
	if (++w->n < 4)
		return 0;
	/* three bytes; they land at or before the digits just read, so in place is safe */
	s->buf[w->out & BUF_MASK] = w->block >> 16;
	s->buf[(w->out + 1) & BUF_MASK] = w->block >> 8;
	s->buf[(w->out + 2) & BUF_MASK] = w->block;
	w->out += 3;
	w->n = 0;
	w->block = 0;
	if (w->pad) {
		if (w->pad > 2)
			w->bad = 1;
		else
			w->out -= w->pad;
		return 1;
	}
	return 0;
}

/* Decodes the key token (token 1) in place as memcached's base64_decode does (skipping bytes
 * outside the alphabet, stopping after a padded block). Returns the decoded length, 0 where
 * memcached fails (then it answers an error and changes nothing). */
static __always_inline int b64_decode_key(void)
{
	struct scratch *s = get_scratch();
	struct b64_walk *w;

	if (!s)
		return 0;
	w = &s->bw;
	__builtin_memset(w, 0, sizeof(*w));
	w->off = s->tk.off[1];
	w->len = s->tk.len[1];
	if (w->len > KEY_MAX)
		return 0;
	bpf_loop(KEY_MAX, b64_count, NULL, 0);
	if (w->count == 0 || w->count % 4)
		return 0;
	w->out = w->off;
	bpf_loop(KEY_MAX, b64_step, NULL, 0);
	if (w->bad)
		return 0;
	s->tk.len[1] = w->out - w->off;
	return w->out - w->off;
}

/* The meta flags from token `from` on, as memcached's _meta_flag_preparse reads them (the first
 * byte of each token is its flag; a repeated or unknown flag, or a bad number, is an error). A 'b'
 * flag decodes the key in place. Returns MF_* bits (MF_ERROR: refused). */
__noinline __u32 meta_flags(__u32 from, __u32 is_ma)
{
	struct scratch *s = get_scratch();

	if (!s)
		return MF_ERROR;
	s->mf.seen0 = 0;
	s->mf.seen1 = 0;
	s->mf.f = 0;
	for (__u32 i = 0; i < MC_TOKENS; i++) {
		__u32 t = from + i, off, len, bit;
		__u8 o;
		if (t >= s->tk.n)
			break;
		off = s->tk.off[t & TOK_MASK];
		len = s->tk.len[t & TOK_MASK];
		o = BUF(s, off);
		if (o >= 127)
			return MF_ERROR;
		bit = o & 63;
		if (o < 64) {
			if (s->mf.seen0 & (1ULL << bit))
				return MF_ERROR;
			s->mf.seen0 |= 1ULL << bit;
		} else {
			if (s->mf.seen1 & (1ULL << bit))
				return MF_ERROR;
			s->mf.seen1 |= 1ULL << bit;
		}
		switch (o) {
		case 'b':
			s->mf.f |= MF_B64;
			if (!b64_decode_key())
				s->mf.f |= MF_ERROR;
			break;
		case 'N':
		case 'T':
		case 'R':
			if (mc_number(off + 1, off + len, NUM_SIGNED))
				s->mf.f |= MF_ERROR;
			s->mf.f |= o == 'N' ? MF_VIVIFY : o == 'T' ? MF_TTL : MF_WIN;
			break;
		case 'F':
		case 'C':
		case 'J':
		case 'D':
			if (mc_number(off + 1, off + len, NUM_UNSIGNED))
				s->mf.f |= MF_ERROR;
			if (o == 'C')
				s->mf.f |= MF_CAS;
			break;
		case 'M':
			if (len != 2) {
				s->mf.f |= MF_ERROR;
				break;
			}
			o = BUF(s, off + 1);
			if (is_ma)
				s->mf.f |= (o == 'I' || o == '+' || o == 'D' || o == '-') ? MF_MODE_OTHER
										   : MF_MODE_BAD;
			else if (o == 'E')
				s->mf.f |= MF_MODE_E;
			else if (o == 'A' || o == 'P')
				s->mf.f |= MF_MODE_AP;
			else if (o == 'R' || o == 'S')
				s->mf.f |= MF_MODE_OTHER;
			else
				s->mf.f |= MF_MODE_BAD;
			break;
		case 'O':
			if (len > MFLAG_MAX_OPAQUE)
				s->mf.f |= MF_OPAQUE_LONG;
			break;
		case 'q':
			s->mf.f |= MF_QUIET;
			break;
		case 'I':
			s->mf.f |= MF_STALE;
			break;
		case 'l': case 'P': case 'L': case 'k': case 's': case 't': case 'c': case 'f':
		case 'v': case 'h': case 'u':
			break;
		default:
			return MF_ERROR; /* CLIENT_ERROR invalid flag */
		}
	}
	return s->mf.f;
}

/* The expiry hint for a meta write to the key in token 1 (already decoded): T sets the item's
 * expiry where it exists, N that of an item it creates; either may not apply (no item, a CAS
 * mismatch), so the earliest of the old expiry and those given is recorded. `ttl_tok`/`viv_tok`
 * are the token indexes of T and N (0 if absent). */
static __always_inline __u64 meta_exp(struct scratch *s, __u32 f, __u64 dflt)
{
	__u64 exp = dflt;

	for (__u32 i = 2; i < MC_TOKENS; i++) {
		__u32 off;
		__u8 o;
		if (i >= s->tk.n)
			break;
		off = s->tk.off[i & TOK_MASK];
		o = BUF(s, off);
		if (o == 'T' || o == 'N') {
			__u64 e;
			if (mc_number(off + 1, off + s->tk.len[i & TOK_MASK], NUM_SIGNED))
				return EXP_UNKNOWN;
			e = exp_of((__s32)s->num);
			if (exp == HINT_KEEP || e < exp)
				exp = e;
		}
	}
	return exp;
}

/* mg ms md ma me mn (`op` the second letter). For ms, returns the offset after its data block. */
__noinline __s64 walk_meta(__u32 eol, __u32 op)
{
	struct scratch *s = get_scratch();
	__u32 nt, f, koff, klen, answers = 1;
	__s32 vlen = 0;
	__u64 exp, h;
	__u32 meta;
	int block;

	if (!s)
		return WL_VOID;
	nt = s->tk.n + 1;
	if (op == 'n') { /* mn */
		count_answers(s, 1);
		return eol + 1;
	}
	if (op != 'g' && op != 's' && op != 'd' && op != 'a' && op != 'e')
		goto error; /* ERROR */
	if (nt < 3)
		goto error; /* ERROR (me: CLIENT_ERROR) */
	if (op == 'e') { /* me <key> [b]: a debug dump, changes nothing */
		count_answers(s, 1);
		return eol + 1;
	}
	if (s->tk.len[1] > KEY_MAX || nt > MFLAG_MAX_OPT_LENGTH)
		goto error;
	if (op == 's') {
		/* ms <key> <datalen> <flags>*: once the length parses, memcached reads the data block
		 * whatever happens next (stored, or swallowed after an error) */
		if (nt == 3 || tok_number(s, 2, NUM_SIGNED))
			goto error;
		vlen = (__s32)s->num;
		if (vlen < 0 || vlen > MC_INT_MAX - 2)
			goto error;
	}
	f = meta_flags(op == 's' ? 3 : 2, op == 'a');
	if (f & (MF_ERROR | MF_MODE_BAD)) {
		uncountable(s); /* CLIENT_ERROR: nothing changes */
		goto done;
	}
	if (f & (MF_QUIET | MF_OPAQUE_LONG))
		uncountable(s); /* answers left out, or an error after the effect */
	koff = s->tk.off[1];
	klen = s->tk.len[1];
	h = key_hash(koff, klen);
	switch (op) {
	case 'g': /* T sets the expiry, N creates the item, R hands out win tokens */
		if (!(f & (MF_TTL | MF_VIVIFY | MF_WIN)))
			goto done;
		exp = (f & (MF_TTL | MF_VIVIFY)) ? meta_exp(s, f, HINT_KEEP) : HINT_KEEP;
		if (f & MF_VIVIFY)
			exp = exp_either(koff, klen, h, exp);
		write_key(s, koff, klen, h, exp, answers,
			  (f & (MF_VIVIFY | MF_WIN)) ? META_DIRTY : META_KEEP);
		break;
	case 's':
		block = data_block_ok(s, eol + 1, vlen);
		if (block == 0) { /* bad data chunk (or too large: deleted), as walk_storage */
			write_key(s, koff, klen, h, HINT_KEEP, 0, META_KEEP);
			uncountable(s);
			break;
		}
		if (f & MF_MODE_AP)
			exp = HINT_KEEP;
		else
			exp = meta_exp(s, f, EXP_NEVER); /* no T: never expires */
		if ((f & (MF_MODE_E | MF_CAS | MF_STALE)) || block < 0)
			exp = exp_either(koff, klen, h, exp);
		/* a fresh item, unless a mode or CAS may keep the old one, or the block is not
		 * known to be taken */
		if (f & MF_STALE)
			meta = META_DIRTY;
		else if ((f & (MF_MODE_E | MF_MODE_AP | MF_CAS)) || block < 0)
			meta = META_KEEP;
		else
			meta = META_CLEAN;
		write_key(s, koff, klen, h, exp, answers, meta);
		break;
	case 'd':
		if (f & MF_STALE) /* marked stale, not deleted; T sets its expiry */
			exp = (f & MF_TTL) ? exp_either(koff, klen, h, meta_exp(s, f, HINT_KEEP))
					   : HINT_KEEP;
		else
			exp = (f & MF_CAS) ? HINT_KEEP : HINT_DELETE;
		write_key(s, koff, klen, h, exp, answers, (f & MF_STALE) ? META_DIRTY : META_KEEP);
		break;
	default: /* ma: the value changes; T or N (on an item it creates) set the expiry */
		exp = (f & (MF_TTL | MF_VIVIFY)) ? exp_either(koff, klen, h, meta_exp(s, f, HINT_KEEP))
						 : HINT_KEEP;
		write_key(s, koff, klen, h, exp, answers, META_KEEP);
		break;
	}
	count_answers(s, 1);
done:
	return op == 's' ? (__s64)eol + 1 + (__s64)vlen + 2 : (__s64)eol + 1;
error:
	uncountable(s);
	return eol + 1;
}

#endif
