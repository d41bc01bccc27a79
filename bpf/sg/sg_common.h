/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Scatter-gather: wire formats, map value layouts and constants shared by the eBPF programs and
 * the inksg crate (the skeleton exposes every type here to Rust; the constants are enums so that
 * they reach Rust through BTF too). Wire fields are big-endian; map values are host order. */
#ifndef SG_COMMON_H
#define SG_COMMON_H

enum sg_limits {
	SG_MAX_WORKERS = 1024,      /* workers in one group */
	SG_BITMAP_WORDS = 16,       /* SG_MAX_WORKERS / 64 */
	SG_VEC_BYTES = 1024,        /* largest vector aggregate (and custom aggregate state) */
	SG_DGRAM_MAX = 2048,        /* largest UDP payload read (scatter datagram, answer) */
	SG_EVENT_HDR = 192,         /* bytes of struct sg_event at the start of a result */
	SG_RING_BYTES = 1 << 22,    /* ring buffer of each client */
	SG_MAX_CLIENTS = 64,        /* clients (sockets) at once */
	SG_CHUNK = 512,             /* bpf_csum_diff works on at most 512 bytes */
};

/* Magic words opening the generic protocol's datagrams ('SGS1', 'SGQ1', 'SGA1'). */
enum sg_magic {
	SG_MAGIC_SCATTER = 0x53475331, /* application -> TC egress (never leaves the host) */
	SG_MAGIC_REQ = 0x53475131,     /* to each worker */
	SG_MAGIC_ANS = 0x53474131,     /* from a worker */
};

/* How answers are read (per client). */
enum sg_proto {
	SG_PROTO_SG = 0,        /* generic: struct sg_ans_hdr + data, one datagram per answer */
	SG_PROTO_MEMCACHED = 1, /* memcached UDP frames; a server is done at END (or an error) */
};

/* Aggregation of a request's answers. Vector reducers work element-wise on big-endian u32/u64. */
enum sg_reducer {
	SG_RED_SUM = 0,
	SG_RED_MIN = 1,
	SG_RED_MAX = 2,
	SG_RED_COUNT = 3,   /* element-wise count of non-zero elements */
	SG_RED_CONCAT = 4,  /* every answer kept: records (struct sg_rec + data) */
	SG_RED_CUSTOM = 8,  /* SG_RED_CUSTOM + i: the aggregation program in `aggregators[i]` */
	SG_CUSTOM_MAX = 8,
};

/* sg_scatter_hdr.flags */
enum sg_flags {
	SG_F_INIT = 1,          /* first datagram of the request: arms the slot and its timer */
	SG_F_SECTIONS = 2,      /* a section table follows (one per worker); else one for all */
	SG_F_PATCH_WORKER = 4,  /* write the worker index at offset 8 of its section (sg_req_hdr) */
	SG_F_NO_WAKEUP = 8,     /* the client busy-polls: no ring buffer wakeups */
};

enum sg_state {
	SG_FREE = 0,
	SG_ACTIVE = 1,   /* answers admitted */
	SG_CLOSING = 2,  /* decided (need met or timed out), copies still in flight */
	SG_FINAL = 3,    /* reported */
};

enum sg_status {
	SG_DONE = 1,
	SG_TIMEOUT = 2,
};

/* sg_event.flags */
enum sg_result_flags {
	SG_R_TRUNCATED = 1, /* concatenated answers exceeded the result buffer: some were cut */
};

/* The datagram an application sends (one or more per request, in one sendmmsg). */
struct sg_scatter_hdr {
	__u32 magic;       /* SG_MAGIC_SCATTER */
	__u32 req_id;      /* low bits: slot within the client's range */
	__u16 group;
	__u16 first;       /* without SG_F_SECTIONS: workers [first, first + count) */
	__u16 count;       /* workers served by this datagram */
	__u16 need;        /* completions that end the request (the policy, resolved) */
	__u32 timeout_us;
	__u8 flags;
	__u8 reducer;
	__u16 vec_len;     /* bytes of every vector answer (vector reducers), aggregate bytes */
	__u16 asked;       /* workers asked by the whole request */
	__u16 elem;        /* vector element: 4 (u32) or 8 (u64) bytes */
};

/* A section table entry (SG_F_SECTIONS): worker `worker` gets bytes [off, off + len) of the UDP
 * payload. Without SG_F_SECTIONS one entry follows the header and serves every worker. */
struct sg_section {
	__u16 worker;
	__u16 off;
	__u16 len;
};

/* What a generic worker receives first (the library builds it into the section). */
struct sg_req_hdr {
	__u32 magic;   /* SG_MAGIC_REQ */
	__u32 req_id;
	__u16 worker;  /* patched per worker with SG_F_PATCH_WORKER */
	__u16 pad;
};

/* What a generic worker answers with, followed by the answer's data. */
struct sg_ans_hdr {
	__u32 magic;   /* SG_MAGIC_ANS */
	__u32 req_id;
	__u16 status;
	__u16 pad;
};

/* One concatenated answer in a result (SG_RED_CONCAT, memcached): this header, then `len` bytes. */
struct sg_rec {
	__u16 worker;
	__u16 len;
	__u16 seq;     /* memcached frame's sequence number and total (0, 1 for generic answers) */
	__u16 total;
};

/* A completed request as user space receives it: this header (SG_EVENT_HDR bytes, padded), then
 * `len` bytes: the aggregate (vector/custom reducers) or the records (concatenation). */
struct sg_event {
	__u32 req_id;
	__u32 slot;
	__u8 status;       /* enum sg_status */
	__u8 flags;        /* enum sg_result_flags */
	__u16 asked;
	__u16 answered;    /* workers admitted (complete for memcached) */
	__u16 pad;
	__u32 len;
	__u64 elapsed_ns;  /* from the scatter to the decision */
	__u64 missing[SG_BITMAP_WORDS]; /* asked, not (completely) answered */
};

/* A request in flight (array `slots`, index = client base + request id's low bits). */
struct sg_slot {
	struct bpf_spin_lock lock;
	__u32 state;       /* enum sg_state */
	__u32 req_id;
	__u16 group;
	__u16 need;
	__u16 got;         /* answers (datagrams) admitted */
	__u16 done;        /* admitted answers fully written */
	__u16 complete;    /* workers whose answer is complete */
	__u16 asked_n;
	__u8 reducer;
	__u8 proto;
	__u8 status;
	__u8 flags;        /* sg_scatter_hdr.flags | result flags << 4 */
	__u16 vec_len;
	__u16 client;
	__u32 len;         /* concatenated bytes reserved */
	__u8 elem;         /* vector element bytes */
	__u8 pad[3];
	__u64 start_ns;
	__u64 deadline_ns;
	__u64 asked[SG_BITMAP_WORDS];
	__u64 seen[SG_BITMAP_WORDS];   /* workers admitted (complete for memcached): dedup */
	struct bpf_timer timer;
	__u8 agg[SG_VEC_BYTES];
};

/* A registered client socket (hash `clients`, key = its UDP port, host order). */
struct sg_client {
	__u32 slot_base;
	__u32 slot_mask;   /* slots per client - 1 */
	__u16 index;       /* its ring buffer in `rings` */
	__u8 proto;        /* enum sg_proto */
	__u8 pad;
};

/* A worker of a group (array `workers`, index = group * SG_MAX_WORKERS + worker). */
struct sg_worker {
	__u8 addr[16];     /* IPv4: first 4 bytes */
	__u16 port;        /* host order */
	__u8 family;       /* 4 or 6; 0: unused */
	__u8 pad;
	__u32 ifindex;     /* output interface and MACs resolved by the library; 0: ask the FIB */
	__u8 dmac[6];
	__u8 smac[6];
};

/* Key of `members` (who may answer for a group). */
struct sg_member_key {
	__u8 addr[16];     /* IPv4: first 4 bytes, rest zero */
	__u16 port;        /* host order */
	__u16 group;
};

/* Counters, one per-CPU slot each (keep in sync with stats.rs). */
enum sg_stat {
	ST_SCATTERS = 0,   /* requests armed */
	ST_CLONES,         /* datagrams sent to workers */
	ST_CLONE_ERRORS,   /* clones that could not be sent (route, helper failure) */
	ST_NO_NEIGH,       /* workers whose neighbour (ARP/NDP) is not resolved */
	ST_BUSY,           /* scatters refused: slot still in flight, or bad header */
	ST_ANSWERS,        /* answers admitted */
	ST_DUPLICATES,     /* answers dropped: already answered */
	ST_LATE,           /* answers dropped: request complete, timed out or unknown */
	ST_NON_MEMBERS,    /* answers dropped: sender not asked / not in the group */
	ST_MALFORMED,      /* answers dropped: bad header, length or frame */
	ST_TRUNCATED,      /* concatenated answers cut (result buffer full) */
	ST_COMPLETED,      /* requests completed by their policy */
	ST_TIMEOUTS,       /* requests ended by their timeout */
	ST_RING_FULL,      /* results lost: the client's ring buffer was full */
	ST_MAX,
};

/* Every type user space needs, in one variable, so that the skeleton generates them all. */
struct sg_layouts {
	struct sg_scatter_hdr scatter;
	struct sg_section section;
	struct sg_req_hdr req;
	struct sg_ans_hdr ans;
	struct sg_rec rec;
	struct sg_event event;
	enum sg_limits limits;
	enum sg_magic magic;
	enum sg_proto proto;
	enum sg_reducer reducer;
	enum sg_flags flags;
	enum sg_state state;
	enum sg_status status;
	enum sg_result_flags result_flags;
	enum sg_stat stat;
};

/* Keeps the compiler from moving a bounds check away from the use the verifier must see. */
#define sg_barrier_var(v) asm volatile("" : "+r"(v))

#endif
