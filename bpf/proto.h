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
#include "scratch.h"

/* Offset of the first space, '\r' or '\n' in buf[start, end), or end: memcached's tokenizer splits
 * on spaces only, so keys may hold any other byte. Records in s->dirty whether a byte before it is
 * NUL or not ASCII (such keys are left to the server). Returns -1 if the scratch map is missing. */
__noinline int scan_token(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();
	__u32 dirty = 0;

	if (!s)
		return -1;
	if (end > SCRATCH_LEN)
		end = SCRATCH_LEN;
	for (__u32 i = 0; i < SCRATCH_LEN / 8; i++) {
		__u32 pos = start + i * 8;
		__u64 x, dm, bm;
		if (pos >= end)
			break;
		x = word_at(s, pos);
		dm = zero_bytes(x ^ (ONES * ' ')) | zero_bytes(x ^ (ONES * '\r')) |
		     zero_bytes(x ^ (ONES * '\n'));
		/* NUL, and bytes >= 0x80 (memcached takes them, the kernel leaves them to it) */
		bm = zero_bytes(x) | (x & HIGHS) | dm;
		dm = keep_bytes(dm, end - pos);
		bm = keep_bytes(bm, end - pos);
		if (dm) {
			__u32 d = first_mark(dm);
			if (bm && first_mark(bm) < d)
				dirty = 1;
			s->dirty = dirty;
			return pos + d;
		}
		if (bm)
			dirty = 1;
	}
	s->dirty = dirty;
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

#define EXPTIME_BAD (1LL << 62)

/* The signed decimal number in buf[start, end) (memcached's exptime), or EXPTIME_BAD. */
__noinline __s64 parse_exptime(__u32 start, __u32 end)
{
	struct scratch *s = get_scratch();
	__s64 v = 0;
	int neg = 0;

	if (!s || end <= start || end - start > 19)
		return EXPTIME_BAD;
	if (BUF(s, start) == '-') {
		neg = 1;
		start++;
		if (end <= start)
			return EXPTIME_BAD;
	}
	for (__u32 i = 0; i < 18; i++) {
		__u32 pos = start + i;
		__u8 c;
		if (pos >= end)
			break;
		c = BUF(s, pos);
		if (c < '0' || c > '9')
			return EXPTIME_BAD;
		v = v * 10 + (c - '0');
	}
	if (end - start > 18)
		return EXPTIME_BAD;
	return neg ? -v : v;
}

/* 64-bit hash of the key at buf[off, off+len), eight bytes at a time (a multiply-xorshift mix per
 * word, seeded with the length). The control plane has the same function (`key_hash`). */
__noinline __u64 key_hash(__u32 off, __u32 len)
{
	struct scratch *s = get_scratch();
	__u64 h = 0x9E3779B97F4A7C15ULL ^ len;

	if (!s)
		return 0;
	for (__u32 i = 0; i < 32; i++) {
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

/* What a command token is, for coherence. */
enum mc_cmd {
	CMD_UNKNOWN = 0,
	CMD_GET,       /* get, gets (read-only, keys follow) */
	CMD_STORE,     /* set add replace append prepend cas: key, then flags exptime bytes [cas] */
	CMD_DELETE,    /* delete <key> */
	CMD_TOUCH,     /* touch <key> <exptime> */
	CMD_ARITH,     /* incr decr <key> <delta>: value changes, expiry does not */
	CMD_GAT,       /* gat gats: exptime, then keys */
	CMD_META_SET,  /* ms <key> <datalen> <flags>* */
	CMD_META_DEL,  /* md <key> <flags>* */
	CMD_META_GET,  /* mg <key> <flags>*: a write with T, N, E or R */
	CMD_META_ARITH, /* ma <key> <flags>* */
	CMD_FLUSH,     /* flush_all */
	CMD_HARMLESS,  /* stats version verbosity mn me: no data changes */
	CMD_QUIT,      /* quit: no answer, the server closes */
};

static __always_inline int classify(struct scratch *s, __u32 off, __u32 n)
{
	switch (n) {
	case 2:
		if (buf_eq(s, off, "ms", 2))
			return CMD_META_SET;
		if (buf_eq(s, off, "md", 2))
			return CMD_META_DEL;
		if (buf_eq(s, off, "mg", 2))
			return CMD_META_GET;
		if (buf_eq(s, off, "ma", 2))
			return CMD_META_ARITH;
		if (buf_eq(s, off, "mn", 2) || buf_eq(s, off, "me", 2))
			return CMD_HARMLESS;
		return CMD_UNKNOWN;
	case 3:
		if (buf_eq(s, off, "get", 3))
			return CMD_GET;
		if (buf_eq(s, off, "set", 3) || buf_eq(s, off, "add", 3) || buf_eq(s, off, "cas", 3))
			return CMD_STORE;
		if (buf_eq(s, off, "gat", 3))
			return CMD_GAT;
		return CMD_UNKNOWN;
	case 4:
		if (buf_eq(s, off, "gets", 4))
			return CMD_GET;
		if (buf_eq(s, off, "incr", 4) || buf_eq(s, off, "decr", 4))
			return CMD_ARITH;
		if (buf_eq(s, off, "gats", 4))
			return CMD_GAT;
		if (buf_eq(s, off, "quit", 4))
			return CMD_QUIT;
		return CMD_UNKNOWN;
	case 5:
		if (buf_eq(s, off, "touch", 5))
			return CMD_TOUCH;
		if (buf_eq(s, off, "stats", 5))
			return CMD_HARMLESS;
		return CMD_UNKNOWN;
	case 6:
		if (buf_eq(s, off, "append", 6))
			return CMD_STORE;
		if (buf_eq(s, off, "delete", 6))
			return CMD_DELETE;
		return CMD_UNKNOWN;
	case 7:
		if (buf_eq(s, off, "replace", 7) || buf_eq(s, off, "prepend", 7))
			return CMD_STORE;
		if (buf_eq(s, off, "version", 7))
			return CMD_HARMLESS;
		return CMD_UNKNOWN;
	case 9:
		if (buf_eq(s, off, "flush_all", 9))
			return CMD_FLUSH;
		if (buf_eq(s, off, "verbosity", 9))
			return CMD_HARMLESS;
		return CMD_UNKNOWN;
	}
	return CMD_UNKNOWN;
}

#endif
