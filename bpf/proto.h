/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* memcached protocol parsing over a per-CPU scratch copy of the payload.
 *
 * The payload is copied into scratch.buf once (bpf_xdp_load_bytes / bpf_skb_load_bytes) and parsed
 * there with masked indices. Loops live in small global (non-inlined) functions that the verifier
 * checks once each with unknown arguments, and parser state lives in map memory, so verification
 * cost stays linear in the bytes scanned instead of exploding with the paths. */
#ifndef INKCACHE_PROTO_H
#define INKCACHE_PROTO_H

#include "inkcache_common.h"
#include "parsing.h"

#define BUF_MASK     (SCRATCH_LEN - 1)
#define OUT_LEN      (SCRATCH_LEN + 64)
#define OUT_MASK     (SCRATCH_LEN - 1)

/* The command (or answer) stream being walked. */
struct walk_state {
	struct ink_conn_key ck;  /* its connection */
	__u32 stream;          /* walking a followed stream: a cut line is carried over */
	__u32 exact;           /* writes are settled by the server's answers (else: quarantine) */
	__u32 desync;          /* the walker found the answers can no longer be counted */
	__u32 cmds;            /* ingress: answers the commands so far will get (next one's index) */
	__u32 skip;            /* bytes of a data block past the end of what was walked */
	__u32 answers;         /* egress: answers seen */
	__u32 udp;             /* a UDP request: a write is settled by the answer with its id */
	struct ink_req_key rk; /* the UDP request (client, port, request id) */
};

/* Arguments of table_fill (a BPF function takes at most five). */
struct fill_args {
	__u64 h;               /* key hash */
	__u64 req_ts;          /* arrival of the request the reply answers */
	__u64 exp;             /* expiry to record */
	__u32 klen;
	__u32 off;             /* item at scratch.buf[off, off + len) */
	__u32 len;
	__u32 hdr;             /* VALUE line length, "\r\n" included */
	__u32 cas;             /* length of " <cas>" at the end of the VALUE line, 0 if none */
	__u32 pad;
};
#define MAX_CMDS     8    /* commands parsed per segment; more means "cannot be sure" */

struct scratch {
	__u8 buf[SCRATCH_LEN + 64];  /* payload as received (masked indices + 16-byte chunks) */
	__u8 out[OUT_LEN];           /* reply under construction: frame header + items + END */
	__u8 hdr[128];               /* headers being moved when the frame grows at the head */
	__u16 koff[32];
	__u16 klen[32];
	__u32 dirty;                 /* scan_token saw a byte that is not printable ASCII */
	__u32 need;                  /* reply length a lookup would have reached (LK_FULL) */
	__u32 miss[32];              /* split multi-key gets: the keys that missed, in order */
	struct pkt pk;               /* TC ingress: the packet being rewritten */
	__u32 nmiss;
	__u32 miss_end;              /* the get for them being written: its end so far */
	struct fill_args fa;
	struct walk_state ws;
	struct {
		__u64 exp;             /* table_lookup: the item's expiry */
		__u32 hdr;             /* its VALUE line length */
		__u32 cas;             /* length of its " <cas>", 0 if none */
	} lk;
	struct {                     /* meta get being answered (meta.h) */
		__u8 flag[8];          /* the flags asked for, in order */
		__u32 n, seen, mode;
		__u32 opaque_off, opaque_len;
		__u32 fpos, ftl, bpos, btl, cpos, ctl; /* tokens of the staged item */
	} mg;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct scratch);
	__uint(max_entries, 1);
} scratch SEC(".maps");

/* Byte i of the scratch payload. The barrier keeps the compiler from proving the mask redundant
 * and dropping it (then the verifier, which cannot follow that proof, rejects the access). */
#define BUF(s, i) ({ __u32 __i = (i); barrier_var(__i); (s)->buf[__i & BUF_MASK]; })

/* Byte i of scratch.out, masked behind a barrier in the same way. */
#define OUTB(s, i) (*({ __u32 __i = (i); barrier_var(__i); &(s)->out[__i & OUT_MASK]; }))

static __always_inline struct scratch *get_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&scratch, &zero);
}

/* Word-at-a-time byte search (8 bytes per iteration keeps loops short for the verifier and fast).
 * In each mask, the lowest marked byte is exact; bytes above a true match may be marked falsely,
 * which never matters because only the lowest mark is used. */
#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static __always_inline __u64 zero_bytes(__u64 x)
{
	return (x - ONES) & ~x & HIGHS;
}

/* One 8-byte load or store at any byte address of a map value. The verifier allows unaligned
 * map-value access where the architecture handles it efficiently (x86-64, arm64); written as a
 * plain u64 access, clang emits one instruction instead of eight byte loads and shifts. */
#define LOAD64(p)     (*(const __u64 *)(const void *)(p))
#define STORE64(p, v) (*(__u64 *)(void *)(p) = (v))

static __always_inline __u64 word_at(struct scratch *s, __u32 pos)
{
	pos &= BUF_MASK;
	barrier_var(pos);
	return LOAD64(&s->buf[pos]);
}

/* Copies n (<= 256) bytes of scratch.buf at `from` to scratch.out at `to`, 8 bytes a step (up to
 * 7 bytes past to + n are written too). */
static __always_inline void buf_to_out(struct scratch *s, __u32 to, __u32 from, __u32 n)
{
	for (__u32 j = 0; j < 32; j++) {
		__u32 b = j * 8;
		if (b >= n)
			break;
		STORE64(&OUTB(s, to + b), word_at(s, from + b));
	}
}

/* Index of the lowest marked byte of a non-zero mask (marks are bit 7 of each byte). clang 14
 * cannot lower __builtin_ctzll for BPF: isolate the mark, then a multiply moves the index into
 * the top byte. */
static __always_inline __u32 first_mark(__u64 m)
{
	__u64 b = (m & -m) >> 7;
	return (__u32)((b * 0x0001020304050607ULL) >> 56);
}

/* Keeps the marks of bytes [0, n) of a word (n <= 8). */
static __always_inline __u64 keep_bytes(__u64 m, __u32 n)
{
	return n >= 8 ? m : m & ((1ULL << (n * 8)) - 1);
}

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

/* Keeps bytes [0, n) of a little-endian word (n <= 8). */
static __always_inline __u64 low_bytes(__u64 w, __u32 n)
{
	return n >= 8 ? w : w & ((1ULL << (n * 8)) - 1);
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
