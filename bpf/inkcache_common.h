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
#define ITEM_CAP         1392  /* bytes reserved per slot (ITEM_MAX rounded up to 16) */
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
	ST_TOO_BIG,           /* hits whose reply did not fit the frame, passed to the server */
	ST_ERRORS,            /* malformed memcached frames passed untouched, helper failures */
	ST_FILL_SKIPPED,      /* replies not installed: stale-guarded, gets/CAS, too big, unmatched */
	ST_INVAL_UNPARSABLE,  /* whole-cache invalidations: segments not parsable with certainty */
	ST_INVAL_COMMAND,     /* keys invalidated by a mutating command */
	ST_INVAL_FLUSH,       /* whole-cache invalidations by flush_all */
	ST_INVAL_RESTART,     /* whole-cache invalidations: the server bound or released its port */
	ST_EXPIRED,           /* hits refused because the item's expiry had passed */
	ST_MAX,
};

/* One cache slot. `len == 0` means empty, or, with ENTRY_TOO_BIG, a marker saying that the key
 * `hash` has an item whose reply XDP cannot send on this path: its gets pass straight to the
 * server without being remembered, and its replies are not parsed for a fill. */
#define ENTRY_TOO_BIG 1
struct ink_entry {
	struct bpf_spin_lock lock;
	__u32 len;             /* bytes in item[] */
	__u64 hash;            /* hash of the key (ink_hash) */
	__u64 filled_ns;       /* bpf_ktime_get_ns() at fill */
	__u64 stable_since;    /* replies to requests older than this may not fill the slot */
	__u64 expire_ns;       /* not served from this time on (ktime); ~0 = never */
	__u16 key_len;
	__u16 flags;           /* ENTRY_TOO_BIG: a marker, no item (see below) */
	__u32 pad1;
	__u8 item[ITEM_CAP];   /* "VALUE <key> <flags> <bytes>\r\n<data>\r\n" */
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

/* Allowlist: longest-prefix match over IPv6 addresses; IPv4 as ::ffff:0:0/96. */
struct ink_lpm_key {
	__u32 prefixlen;
	__u8 addr[16];
};

#endif
