/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU scratch area every program works in, and byte/word access to it.
 *
 * A request's payload is copied into scratch.buf once (bpf_xdp_load_bytes / bpf_skb_load_bytes)
 * and parsed there with masked indices; replies are composed in scratch.out. BPF functions take at
 * most five arguments and the verifier checks each global function once, with unknown arguments,
 * so state that a walk carries across global functions and bpf_loop callbacks lives here, in named
 * fields documented in struct scratch (scratch.ws: the stream being walked; scratch.fa: the item
 * table_fill installs; scratch.lk: what table_lookup found; scratch.mg: the meta get being
 * answered; koff/klen: the keys of a get). Everything else is passed as arguments. A bpf_loop
 * callback's counters live here too: the verifier walks a callback again until its state
 * repeats, and a count kept on the stack that indexes an array is a constant that differs on
 * every pass, so it never does (6.18.44-fc-v1252 refused inkcache_tc_ingress so: 84ff48c). */
#ifndef INKCACHE_SCRATCH_H
#define INKCACHE_SCRATCH_H

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
	__u32 stopped;         /* the server closes the connection after the commands walked */
	__u32 part;            /* bytes of a cut line carried before the next bytes walked */
	__u32 long_get;        /* skipping to the end of a get line too long to carry */
	__u32 end;             /* the end of the bytes being walked (data_block_ok) */
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
	__u32 flags;           /* ITEM_* */
};

/* A command line split as memcached's tokenize_command splits it (proto_text.c): on single
 * spaces, empty tokens skipped, the line cut at its first NUL; at most MC_TOKENS - 1 tokens, the
 * rest of the line (if any) left as a remainder. */
#define MC_TOKENS 24          /* memcached's MAX_TOKENS */
#define TOK_SLOTS 32          /* array room for them, a power of two so indexes can be masked */
#define TOK_MASK  (TOK_SLOTS - 1)

struct mc_tokens {
	__u16 off[TOK_SLOTS];
	__u16 len[TOK_SLOTS];
	__u32 n;                     /* tokens (<= MC_TOKENS - 1); memcached's ntokens is n + 1 */
	__u32 rest;                  /* offset of the remainder after token MC_TOKENS - 2, or 0 */
	__u32 end;                   /* end of the line's content (NUL cut, "\r" stripped) */
	__u32 pad;
};

/* mc_number's walk over a token, one byte per bpf_loop step (tokens are short, but memcached
 * takes any number of leading zeros or white space, so the walk is not bounded by a digit count). */
struct num_walk {
	__u64 v;
	__u64 lim;          /* the largest magnitude before ERANGE */
	__u32 start;
	__u32 end;
	__u32 state;        /* NW_* */
	__u32 neg;
	__u32 digits;
	__u32 dash;         /* a '-' anywhere in the token */
	__u32 kind;
	int bad;
};

/* b64_decode_key's walk, one key byte per bpf_loop step. */
struct b64_walk {
	__u32 off;          /* the key token */
	__u32 len;
	__u32 count;        /* pass 1: bytes in the alphabet */
	__u32 out;          /* pass 2: where the next decoded byte goes */
	__u32 block;
	__u32 n;            /* digits in block */
	__u32 pad;          /* '=' seen */
	int bad;
};

#define SL_SLOTS 8 /* scratch.sl: four destinations of each family */

struct scratch {
	__u8 buf[SCRATCH_LEN + 64];  /* payload as received (masked indices + 16-byte chunks) */
	__u8 out[OUT_LEN];           /* reply under construction: frame header + items + END */
	__u16 koff[32];
	__u16 klen[32];
	__u64 kh[32];                /* their hashes (warm_keys: gets of several keys) */
	__u32 dirty;                 /* scan_token saw a byte that is not printable ASCII */
	__u32 need;                  /* reply length a lookup would have reached (LK_FULL) */
	__u32 miss[32];              /* split multi-key gets: the keys that missed, in order */
	struct pkt pk;               /* the packet being handled (XDP, TC ingress): kept off the stack */
	struct {                     /* host.h server_listens: destinations a socket was found for
				      * (XDP), by family and address (host.h sl_of) */
		__u8 daddr[16];
		__u32 ifindex;         /* the device the stack takes it up at */
		__u16 port;            /* network order */
		__u16 pad;
		__u64 gen;             /* ink_global.gen + 1 when found; 0: nothing known */
	} sl[SL_SLOTS];
	struct {                     /* the request as XDP copied it into buf (pktcopy.h) */
		__u32 sum;             /* its sum (csum.h, as buf_sum gives it) */
		__u32 marks;           /* its bytes below '!' or above 0x7f; ~0: not counted */
		__s32 keys;            /* the keys of its get, as handle_get found them */
		__u32 cas;             /* and whether it is a `gets` */
	} rq;
	__u32 nmiss;                 /* how many: hits_step counts them here, pass by pass */
	__u32 miss_end;              /* the get for them being written: its end so far */
	struct fill_args fa;
	struct walk_state ws;
	struct mc_tokens tk;         /* the command line being walked, as memcached tokenizes it */
	__u64 num;                   /* mc_number: the value parsed */
	struct num_walk nw;          /* mc_number's state (bpf_loop steps share it) */
	struct b64_walk bw;          /* b64_decode_key's state */
	struct {                     /* hint_get: the key's hint; fill_expiry: meta_ok */
		__u64 v;
		__u32 meta;
		__u32 meta_ok;
	} hint;
	struct ink_hint hint_new;    /* hint_put: a new ttl_hints entry being built */
	struct {
		__u64 exp;             /* table_lookup: the item's expiry */
		__u32 hdr;             /* its VALUE line length */
		__u32 cas;             /* length of its " <cas>", 0 if none */
		__u32 flags;           /* its ITEM_* */
		__u32 klen;            /* its key length */
		__u32 isum;            /* its text's sum (struct ink_item) */
		__u32 pad2;
		__u64 filled;          /* its fill time (a promoted copy keeps it) */
		__u64 now;             /* the clock for the request's keys, 0 until one needs it */
		__u64 sum;             /* copy_item, compose_reply: the reply's sum so far (csum.h) */
		__u64 fence;           /* target of table.h's fence() */
		__u64 warm;            /* warm_keys: what it read (kept, so the loads are made) */
		__u64 slot_sq;         /* the hot slot's count when its item was read; 0: not read */
		__u64 one_key;         /* the request has one key: its lookup uses the hot slots */
		__u64 slot_credit;     /* 1-key lookups read the hot slot while > 0: +2 for each item
					* that fits one, -1 for each that does not (table_lookup) */
		/* values passed through map memory, whose values the verifier does not follow, so
		 * that every path into a loop leaves it the same state */
		volatile __u64 cp_from, cp_dst, cp_n; /* copy_item's arguments */
		__u64 h, p;            /* table_lookup: the key's hash, the item's log position */
		__u32 pos;             /* and its way's 32-bit position */
		__u32 upkeep;          /* UPK_*: what the caller does after a hit (lookup_upkeep) */
	} lk;
	struct {                     /* meta_flags' state: in map memory, whose values the verifier
				      * does not follow (flag combinations as register constants
				      * multiply its states: 6.1 gives up) */
		volatile __u64 seen0, seen1; /* flags seen: bytes 0-63, 64-126 */
		volatile __u32 f;      /* MF_* so far */
		__u32 pad;
	} mf;
	struct {                     /* meta get being answered (meta.h) */
		__u8 flag[8];          /* the flags asked for, in order */
		__u32 n, seen, mode;
		__u32 opaque_off, opaque_len;
		__u32 fpos, ftl, bpos, btl, cpos, ctl; /* tokens of the staged item */
	} mg;
	struct {                     /* the coarse clock (table.h's coarse_now): this CPU's last
				      * monotonic reading and the jiffies it was taken in; kept
				      * across requests (0: none yet) */
		__u64 jiffies;
		__u64 ns;
	} clk;
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

/* The same, volatile: one access the compiler neither repeats, merges nor leaves out (a seqcount's
 * reads). Through void * too: cast straight from &b[i] of a byte array, clang splits a volatile
 * load into eight byte loads and their shifts (22 instructions instead of one). */
#define LOAD64_ONCE(p)     (*(const volatile __u64 *)(const volatile void *)(p))
#define STORE64_ONCE(p, v) (*(volatile __u64 *)(volatile void *)(p) = (v))

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

/* The mask of bytes [0, min(n, 8)) of a little-endian word (n < 2^31), without a branch: each
 * branch in a word loop is a path more for the verifier to walk (scan_token's: under ISA v3, Linux
 * 7.2 walked it 891,596 instructions with keep_bytes' branches). n8 = min(n, 8) comes from a sign
 * mask, and the mask from two shifts of n8 * 4 bits (one shift of 64 would be undefined). Where
 * the loop has other branches, keep_bytes' branch costs the verifier less (table_lookup's). */
static __always_inline __u64 low_mask(__u32 n)
{
	__u32 over = (__u32)((__s32)(8 - n) >> 31); /* all ones if n > 8 */
	__u32 n8 = (n & ~over) | (8 & over);

	return ~((~0ULL << (n8 * 4)) << (n8 * 4));
}

/* Keeps the marks of bytes [0, n) of a word (n <= 8). */
static __always_inline __u64 keep_bytes(__u64 m, __u32 n)
{
	return n >= 8 ? m : m & ((1ULL << (n * 8)) - 1);
}


/* Keeps bytes [0, n) of a little-endian word (n <= 8). */
static __always_inline __u64 low_bytes(__u64 w, __u32 n)
{
	return n >= 8 ? w : w & ((1ULL << (n * 8)) - 1);
}


/* The frame header of a one-datagram reply to request `req_id` (network order) at scratch.out[0]:
 * the id echoed, sequence 0, one datagram, reserved 0. */
static __always_inline void put_frame_header(struct scratch *s, __u16 req_id)
{
	struct mc_udp_hdr *fh = (struct mc_udp_hdr *)s->out;

	fh->req_id = req_id;
	fh->seq = 0;
	fh->total = bpf_htons(1);
	fh->reserved = 0;
}

#endif
