/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The memcached text protocol as memcached's tokenizer sees it, over the scratch copy of the
 * payload: token and line scans (a word at a time), numbers, the key hash, command names.
 *
 * Loops live in small global (non-inlined) functions that the verifier checks once each with
 * unknown arguments, so verification cost stays linear in the bytes scanned instead of exploding
 * with the paths. */
#ifndef INKCACHE_PROTO_H
#define INKCACHE_PROTO_H

#include "inkcache_common.h"
#include "config.h"
#include "scratch.h"
#include "csum.h"

/* Offset of the first space, '\r' or '\n' in buf[start, end), or end: memcached's tokenizer splits
 * on spaces only, so keys may hold any other byte. Records in s->dirty whether a byte before it is
 * NUL or not ASCII (such keys are left to the server). Returns -1 if the scratch map is missing. */
__noinline int scan_token(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();
	__u64 acc = 0; /* NUL and non-ASCII bytes seen in the words before */

	if (!s)
		return -1;
	if (end > SCRATCH_LEN)
		end = SCRATCH_LEN;
	/* one branch a word (the exit): older verifiers (6.1) walk every path of every iteration */
	for (__u32 i = 0; i < SCRATCH_LEN / 8; i++) {
		__u32 pos = start + i * 8;
		__u64 x, dm, bm, km;
		if (pos >= end)
			break;
		x = word_at(s, pos);
		dm = zero_bytes(x ^ (ONES * ' ')) | zero_bytes(x ^ (ONES * '\r')) |
		     zero_bytes(x ^ (ONES * '\n'));
		/* NUL, and bytes >= 0x80 (memcached takes them, the kernel leaves them to it) */
		bm = zero_bytes(x) | (x & HIGHS);
		km = low_mask(end - pos);
		dm &= km;
		bm &= km;
		if (dm) {
			/* the marks below the first delimiter's */
			s->dirty = (acc | (bm & ((dm & -dm) - 1))) != 0;
			return pos + first_mark(dm);
		}
		acc |= bm;
	}
	s->dirty = acc != 0;
	return end;
}

/* Offset of the first '\n' in buf[start, end), or -1 if none. */
__noinline int scan_eol(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();

	if (!s)
		return -1;
	if (end > SCRATCH_LEN)
		end = SCRATCH_LEN;
	for (__u32 i = 0; i < SCRATCH_LEN / 8; i++) {
		__u32 pos = start + i * 8;
		__u64 m;
		if (pos >= end)
			break;
		m = keep_bytes(zero_bytes(word_at(s, pos) ^ (ONES * '\n')), end - pos);
		if (m)
			return pos + first_mark(m);
	}
	return -1;
}

/* The unsigned decimal number in buf[start, end): -1 if empty, not all digits, or >= 2^31. */
__noinline int parse_uint(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();
	__s64 v = 0;

	if (!s || end <= start || end - start > 10)
		return -1;
	for (__u32 i = 0; i < 10; i++) {
		__u32 pos = start + i;
		__u8 c;
		if (pos >= end)
			break;
		c = BUF(s, pos);
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
	}
	if (v > 0x7fffffff)
		return -1;
	return (int)v;
}

/* Whether buf[start, end) is 1 to 20 decimal digits (a CAS unique). */
__noinline int all_digits(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();

	if (!s || end <= start || end - start > 20)
		return 0;
	for (__u32 i = 0; i < 20; i++) {
		__u8 c;
		if (start + i >= end)
			break;
		c = BUF(s, start + i);
		if (c < '0' || c > '9')
			return 0;
	}
	return 1;
}

/* memcached's command lines (try_read_command_ascii, tokenize_command, safe_strto* in util.c). */

/* End of the content of the line [pos, eol) (eol at its '\n'): a '\r' before the '\n' is cut
 * (not for a one-byte line: memcached keeps a lone "\r"), and the content ends at its first NUL
 * (memcached tokenizes with strlen). */
__noinline int mc_content_end(__u32 pos, __u32 eol)
{
	struct scratch *s = get_scratch();
	__u32 e = eol;

	if (!s || eol > SCRATCH_LEN || pos > eol)
		return -1;
	if (e - pos > 1 && BUF(s, e - 1) == '\r')
		e--;
	for (__u32 i = 0; i < SCRATCH_LEN / 8; i++) {
		__u32 p = pos + i * 8;
		__u64 m;
		if (p >= e)
			break;
		m = keep_bytes(zero_bytes(word_at(s, p)), e - p);
		if (m)
			return p + first_mark(m);
	}
	return e;
}

/* Exact marks (bit 7) of the bytes of x that are not zero (no false marks, unlike zero_bytes). */
static __always_inline __u64 nonzero_bytes(__u64 x)
{
	return (((x & ~HIGHS) + ~HIGHS) | x) & HIGHS;
}

/* First offset in [pos, end) whose byte is (want_space) or is not (!want_space) a space; end if
 * none. Eight bytes a step. */
__noinline int mc_scan_space(__u32 pos, __u32 end, __u32 want_space)
{
	struct scratch *s = get_scratch();

	if (!s || end > SCRATCH_LEN)
		return -1;
	for (__u32 i = 0; i < SCRATCH_LEN / 8; i++) {
		__u32 p = pos + i * 8;
		__u64 m;
		if (p >= end)
			break;
		m = nonzero_bytes(word_at(s, p) ^ (ONES * ' ')); /* the bytes that are not spaces */
		if (want_space)
			m = ~m & HIGHS;
		m = keep_bytes(m, end - p);
		if (m)
			return p + first_mark(m);
	}
	return end;
}

/* Splits the line content [pos, end) into scratch.tk as memcached does. Returns the number of
 * tokens, or -1 if the scratch map is missing. */
__noinline int mc_tokenize(__u32 pos, __u32 end)
{
	struct scratch *s = get_scratch();
	__u32 n = 0;

	if (!s || end > SCRATCH_LEN)
		return -1;
	s->tk.rest = 0;
	s->tk.end = end;
	for (__u32 i = 0; i < MC_TOKENS - 1; i++) {
		int a = mc_scan_space(pos, end, 0), b;
		if (a < 0 || (__u32)a >= end)
			break;
		b = mc_scan_space(a, end, 1);
		if (b < 0)
			return -1;
		s->tk.off[i & TOK_MASK] = a;
		s->tk.len[i & TOK_MASK] = b - a;
		n = i + 1;
		pos = b;
		if (n == MC_TOKENS - 1) {
			/* memcached stops at its last token slot: what follows the space after it is
			 * the remainder (get-style commands re-tokenize it) */
			if ((__u32)b + 1 < end)
				s->tk.rest = b + 1;
			break;
		}
	}
	s->tk.n = n;
	return n;
}

/* Whether token i is the literal `lit` (n <= 12 bytes). */
static __always_inline int tok_is(struct scratch *s, __u32 i, const char *lit, __u32 n)
{
	__u32 off;

	if (i >= s->tk.n || s->tk.len[i & TOK_MASK] != n)
		return 0;
	off = s->tk.off[i & TOK_MASK];
#pragma unroll
	for (__u32 j = 0; j < 12; j++) {
		if (j >= n)
			break;
		if (BUF(s, off + j) != (__u8)lit[j])
			return 0;
	}
	return 1;
}

/* C's isspace in the "C" locale. */
static __always_inline int c_isspace(__u8 c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

#define NUM_SIGNED   0    /* strtol: a signed 64-bit long */
#define NUM_UNSIGNED 1    /* strtoul/strtoull: unsigned 64-bit, a '-' negates, and a value with
			   * the sign bit set is refused if the token holds a '-' anywhere */

#define NW_SPACE  0     /* leading white space */
#define NW_DIGITS 1     /* after the sign: digits */
#define NW_AFTER  2     /* after the digits: white space must come, then anything */

static long num_step(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct num_walk *w;
	__u32 p;
	__u8 c;

	if (!s)
		return 1;
	w = &s->nw;
	p = w->start + i;
	if (p >= w->end)
		return 1;
	c = BUF(s, p);
	if (c == '-')
		w->dash = 1;
	switch (w->state) {
	case NW_SPACE:
		if (c_isspace(c))
			return 0;
		w->state = NW_DIGITS;
		if (c == '+' || c == '-') {
			w->neg = c == '-';
			if (w->kind == NUM_SIGNED && w->neg)
				w->lim = 1ULL << 63;
			return 0;
		}
		/* fall through: the first digit */
	case NW_DIGITS:
		if (c >= '0' && c <= '9') {
			if (w->v > (w->lim - (c - '0')) / 10) {
				w->bad = 1; /* ERANGE */
				return 1;
			}
			w->v = w->v * 10 + (c - '0');
			w->digits++;
			return 0;
		}
		if (!w->digits || !c_isspace(c)) {
			w->bad = 1; /* no digits, or junk right after them */
			return 1;
		}
		w->state = NW_AFTER; /* white space: the rest is ignored (but a '-' still counts) */
		return 0;
	default:
		return 0;
	}
}

/* memcached's safe_strtol / safe_strtoul / safe_strtoull on the bytes [start, end) of a token
 * (the token ends at a space, the line end or a NUL: the C string memcached parses). Leading
 * white space and a sign are taken, at least one digit must follow, then the token must end or
 * go on with white space (whatever follows it is ignored). Returns 0 and the 64-bit value in
 * scratch.num (the caller truncates as memcached does), or -1 where memcached refuses it. */
static __always_inline int mc_number(__u32 start, __u32 end, __u32 kind)
{
	struct scratch *s = get_scratch();
	struct num_walk *w;
	__u64 v;

	if (!s || end > SCRATCH_LEN || start >= end)
		return -1;
	w = &s->nw;
	__builtin_memset(w, 0, sizeof(*w));
	w->start = start;
	w->end = end;
	w->kind = kind;
	w->lim = kind == NUM_SIGNED ? (1ULL << 63) - 1 : ~0ULL;
	bpf_loop(end - start, num_step, NULL, 0);
	if (w->bad || !w->digits)
		return -1;
	v = w->v;
	if (w->neg)
		v = -v;
	/* safe_strtoul: a value with the sign bit set is refused if the token has a '-' */
	if (kind != NUM_SIGNED && (__s64)v < 0 && w->dash)
		return -1;
	s->num = v;
	return 0;
}

/* mc_number of token i. */
static __always_inline int tok_number(struct scratch *s, __u32 i, __u32 kind)
{
	__u32 off;

	if (i >= s->tk.n)
		return -1;
	off = s->tk.off[i & TOK_MASK];
	return mc_number(off, off + s->tk.len[i & TOK_MASK], kind);
}

/* 64-bit hash of the key at buf[off, off+len), eight bytes at a time (a multiply-xorshift mix per
 * word, seeded with the secret hash_seed and the length). The control plane has the same function
 * (`inkcache::key_hash`). Inlined where a call would cost on the hit path (table_lookup hashes its
 * key at its top, where few paths reach the loop); key_hash is the global form for the rest.
 * hash_words reads at most max_words words: a key of up to max_words * 8 bytes (a compile-time
 * constant, the loop's bound, which is what the verifier walks). */
static __always_inline __u64 hash_words(struct scratch *s, __u32 off, __u32 len, __u32 max_words)
{
	__u64 h = 0x9E3779B97F4A7C15ULL ^ hash_seed ^ len;

	for (__u32 i = 0; i < max_words; i++) {
		__u32 pos = i * 8;
		if (pos >= len)
			break;
		h ^= low_bytes(word_at(s, off + pos), len - pos);
		h *= 0xff51afd7ed558ccdULL;
		h ^= h >> 33;
	}
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 29;
	return h;
}

/* hash_words for a key of any length (up to KEY_MAX). */
static __always_inline __u64 hash_of(struct scratch *s, __u32 off, __u32 len)
{
	return hash_words(s, off, len, 32);
}

__noinline __u64 key_hash(__u32 off, __u32 len)
{
	struct scratch *s = get_scratch();

	return s ? hash_of(s, off, len) : 0;
}

/* The sum (csum.h) of scratch.buf[off, off + len) (len <= ITEM_CAP) as if it lay at an even
 * offset: what struct ink_item keeps of a text filled from there, and a request's sum where XDP
 * could not sum it as it copied it (pktcopy.h). */
__noinline int buf_sum(__u32 off, __u32 len)
{
	struct scratch *s = get_scratch();
	__u32 words = len >> 3, rest = len & 7;
	__u64 acc = 0;

	if (!s || len > ITEM_CAP)
		return -1;
	for (__u32 i = 0; i < ITEM_CAP / 8; i++) {
		if (i >= words)
			break;
		acc += csum_halves(word_at(s, off + i * 8));
	}
	if (rest)
		acc += csum_halves(low_bytes(word_at(s, off + (len & ~7U)), rest));
	return (int)csum_at(acc, 0);
}

static __always_inline int buf_eq(struct scratch *s, __u32 off, const char *lit, __u32 n)
{
#pragma unroll
	for (__u32 i = 0; i < 12; i++) {
		if (i >= n)
			break;
		if (BUF(s, off + i) != (__u8)lit[i])
			return 0;
	}
	return 1;
}

#endif
