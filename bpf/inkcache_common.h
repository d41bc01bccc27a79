/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types and constants shared by the eBPF programs and user space (the skeletons expose them). */
#ifndef INKCACHE_COMMON_H
#define INKCACHE_COMMON_H

/* memcached limits and the bounds of the kernel cache. */
#define KEY_MAX          250   /* memcached's KEY_MAX_LENGTH */
#define UDP_HDR_MC       8     /* memcached UDP frame header */
#define DGRAM_MAX        1400  /* largest datagram memcached sends, frame header included */
#define PAYLOAD_MAX      (DGRAM_MAX - UDP_HDR_MC)
/* An item is stored as the bytes memcached sends for it: "VALUE <key> <flags> <bytes>\r\n<data>\r\n".
 * A single-key reply adds "END\r\n", so an item fits one datagram when it is at most this long. */
#define ITEM_MAX         (PAYLOAD_MAX - 5)
#define MAX_GET_KEYS     24    /* keys per get answered in the kernel; more pass to the server */
#define SCRATCH_LEN      2048  /* per-CPU scratch: request bytes parsed, reply built */

/* Counters, one per-CPU slot each; `inkcache stats` sums them. Keep in sync with stats.rs. */
enum ink_stat {
	ST_HITS = 0,          /* requests answered by the kernel */
	ST_MISSES,            /* cacheable get requests passed because a key missed */
	ST_FILLS,             /* items installed from server replies */
	ST_INVALIDATIONS,     /* keys (or the whole cache) invalidated by mutations */
	ST_PASSED,            /* packets not for us (other traffic, other ports, not a get) */
	ST_REFUSED,           /* gets from sources outside the allowlist, passed to the server */
	ST_TOO_BIG,           /* hits whose reply would exceed one datagram, passed to the server */
	ST_ERRORS,            /* malformed memcached frames passed untouched, helper failures */
	ST_FILL_SKIPPED,      /* replies not installed: stale-guarded, gets/CAS, too big, unmatched */
	ST_INVAL_UNPARSABLE,  /* whole-cache invalidations: segments not parsable with certainty */
	ST_INVAL_COMMAND,     /* keys invalidated by a mutating command */
	ST_INVAL_FLUSH,       /* whole-cache invalidations by flush_all */
	ST_INVAL_RESTART,     /* whole-cache invalidations: the server bound or released its port */
	ST_EXPIRED,           /* hits refused because the item's expiry had passed */
	ST_PROMOTED,          /* hot items copied to the log head before the log overwrote them */
	ST_CONN_TRACKED,      /* TCP connections followed from their SYN */
	ST_CONN_UNTRACKED,    /* connections not followed (seen mid-stream, or table full) */
	ST_CONN_DESYNC,       /* followed connections whose stream was lost */
	ST_SETTLED,           /* writes settled by the server's answer */
	ST_QUARANTINED,       /* writes settled by the quarantine (no answer to wait for) */
	ST_TC_HANDOFFS,       /* hits whose reply did not fit the XDP frame: handed to TC ingress */
	ST_TC_HITS,           /* requests TC ingress answered (counted in ST_HITS too) */
	ST_TC_PASSED,         /* handed-off requests TC ingress could not answer, passed to the server */
	ST_AMP_REFUSED,       /* replies to sources outside the allowlist over --max-amplification */
	ST_SPLITS,            /* multi-key gets split: the kernel answered the keys that hit, the
			       * server got a get for the others */
	ST_MAX,
};

/* The cache is a log of item bytes (the arena) and a set-associative index over it.
 *
 * Items are appended to the arena at a global head that only grows (16-byte units); the arena is
 * a ring of SEG_BYTES segments, so an item written arena-size bytes ago is overwritten ("lapped")
 * and its index way goes stale, which every reader detects. Small items take little room: a
 * 50-byte value uses 96 bytes, not a fixed slot. An item never crosses a segment.
 *
 * The index has WAYS ways per set; a key's set is picked by its hash, its way by a 32-bit tag and
 * the key length, and the key bytes in the item are compared in full. Coherence state (when
 * replies may fill again) is kept per set, so every key of a set shares it (over-conservative,
 * never unsafe). */
#define WAYS        8
#define SEG_BYTES   65536   /* one arena map value */
#define SEG_UNITS   (SEG_BYTES / 16)
#define SEG_SLACK   2048    /* past the end of a segment: chunked copies never leave the value */
#define ITEM_CAP    1392    /* largest item stored (ITEM_MAX rounded up to 16) */

struct ink_way {
	__u32 tag;             /* low 32 bits of the key hash, never 0; 0 = empty */
	__u32 pos;             /* arena position of the item, 16-byte units (low 32 bits) */
	__u64 expire_ns;       /* not served from this time on (ktime); ~0 = never */
	__u64 filled_ns;       /* ktime of the fill (void if not after the last flush) */
	__u16 len;             /* item bytes: "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n" */
	__u16 hdr_len;         /* bytes of the VALUE line, "\r\n" included */
	__u8 key_len;
	__u8 cas_len;          /* bytes of " <cas>" at the end of the VALUE line; 0: no CAS known */
	__u8 pad0;
	__u8 pad;
};

struct ink_set {
	struct bpf_spin_lock lock;
	__u32 open;            /* mutations of keys of this set the server has not answered yet */
	__u64 open_since;      /* ktime of the latest of them */
	__u64 stable_since;    /* replies to requests that arrived before this may not fill */
	__u32 gen;             /* server generation `open` counts in (a restart voids the count) */
	__u32 pad;
	struct ink_way way[WAYS];
};

struct ink_seg {
	__u8 b[SEG_BYTES + SEG_SLACK];
};

/* A TCP connection to the server, followed from its SYN so that each write can be settled by the
 * server's answer to it (see stream.h). */
#define CONN_FIFO   32      /* writes per connection awaiting their answers */
#define PART_MAX    320     /* a command or answer line cut by a segment end, carried over */

#define CONN_DESYNC  1      /* the byte stream was lost (a gap, a line too long): segments are
			     * walked on their own, writes fall back to the quarantine */
#define CONN_INEXACT 2      /* the stream is followed but answers can no longer be counted (quiet
			     * meta, an error answer, a full FIFO): writes fall back to the quarantine */
#define CONN_OUT_OK  4      /* the server's initial sequence number is known (SYN-ACK seen) */

struct ink_conn_key {
	__u8 caddr[16];        /* client, IPv4 as ::ffff:a.b.c.d */
	__u8 saddr[16];        /* server */
	__u16 cport;           /* network order */
	__u16 sport;
};

struct ink_pending_write {
	__u32 answer;          /* index of the answer that settles it, in the connection's answers */
	__u32 set;             /* index of the key's set */
};

struct ink_conn {
	/* 64-bit where updated atomically (clang's BPF target has 64-bit atomics only before v3) */
	__u64 flags;           /* CONN_* */
	__u64 in_busy;         /* a CPU is walking the client's bytes (claimed with cmpxchg) */
	__u64 out_busy;        /* a CPU is walking the server's bytes */
	__u64 fifo_head;       /* writes awaiting answers: a ring, pushed at ingress... */
	__u64 fifo_tail;       /* ...settled at egress */
	__u32 gen;             /* server generation */
	/* client -> server */
	__u32 in_seq;          /* next sequence number expected */
	__u32 in_skip;         /* bytes of a data block still to come */
	__u32 in_cmds;         /* commands seen that the server answers */
	__u32 in_part_len;
	/* server -> client */
	__u32 out_seq;
	__u32 out_skip;        /* bytes of a value still to come */
	__u32 out_answers;     /* answers seen */
	__u32 out_part_len;
	__u32 pad;
	struct ink_pending_write fifo[CONN_FIFO];
	__u8 in_part[PART_MAX];
	__u8 out_part[PART_MAX];
};

/* A get request passed to the server, waiting for its reply (which may fill the cache). */
struct ink_req_key {
	__u8 addr[16];         /* client address; IPv4 as ::ffff:a.b.c.d */
	__u16 port;            /* client port, network order */
	__u16 req_id;          /* memcached UDP request id, network order */
	__u32 pad;
};

/* Kernel-side expiry of a key, learned from the last mutation that set it (ktime ns).
 * 1 = already expired or unknown (never serve), ~0 = never expires. */
#define EXP_NEVER   (~0ULL)
#define EXP_UNKNOWN 1ULL

struct ink_req_val {
	__u64 ts_ns;           /* when the request arrived */
};

/* A UDP write waiting for its answer (the answer carries the request's id). */
struct ink_udp_write {
	__u64 ts_ns;           /* when it arrived */
	__u32 set;             /* its key's set, or FLUSH_SET */
	__u32 gen;             /* server generation */
};

/* Allowlist: longest-prefix match over IPv6 addresses; IPv4 as ::ffff:0:0/96. */
struct ink_lpm_key {
	__u32 prefixlen;
	__u8 addr[16];
};

#endif
