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

/* The frame header memcached puts before every UDP payload (all fields big-endian). */
struct mc_udp_hdr {
	__u16 req_id;          /* echoed in the reply */
	__u16 seq;             /* datagram number within the message, from 0 */
	__u16 total;           /* datagrams in the message */
	__u16 reserved;        /* 0 */
};

/* Counters, one per-CPU slot each; `inkcache stats` sums them. This list is their one definition:
 * the enum below, and in Rust the Stats struct, the names, the order and the help texts (generated
 * by crates/inkcache/build.rs), all come from it. X(ENUM, name, help) */
#define INK_STATS(X) \
	X(HITS, hits, "Requests answered by the kernel.") \
	X(MISSES, misses, "Cacheable gets passed to the server because a key missed.") \
	X(FILLS, fills, "Items installed from the server's replies.") \
	X(INVALIDATIONS, invalidations, \
	  "Keys (or the whole cache) invalidated; the total of the `inval_*` counters.") \
	X(PASSED, passed, \
	  "Packets that were not for the cache (other traffic, other ports, other commands).") \
	X(REFUSED, refused, "Gets from sources outside the allowlist, passed to the server.") \
	X(TOO_BIG, too_big, \
	  "Hits whose reply would need more than one datagram, passed to the server.") \
	X(ERRORS, errors, "Malformed memcached frames passed untouched, and helper failures.") \
	X(FILL_SKIPPED, fill_skipped, \
	  "Replies not installed: guarded by a recent write, CAS-bearing, too large, or unmatched.") \
	X(INVAL_UNPARSABLE, inval_unparsable, \
	  "Whole-cache invalidations: request segments that could not be parsed with certainty.") \
	X(INVAL_COMMAND, inval_command, "Keys invalidated by mutating commands.") \
	X(INVAL_FLUSH, inval_flush, "Whole-cache invalidations by flush_all.") \
	X(INVAL_RESTART, inval_restart, \
	  "Whole-cache invalidations: the server stopped or (re)started (released or bound its port).") \
	X(EXPIRED, expired, "Hits refused because the item had expired.") \
	X(PROMOTED, promoted, "Hot items copied to the log head before the log came round to them.") \
	X(SLOT_HITS, slot_hits, "Keys served from their hot slot (item read with the set, not after it).") \
	X(CONN_TRACKED, conn_tracked, \
	  "TCP connections followed from their SYN (their writes are settled by the server's " \
	  "answers).") \
	X(CONN_UNTRACKED, conn_untracked, \
	  "Connections not followed because --max-conns were already followed (connections opened " \
	  "before attach are not followed either, and not counted).") \
	X(CONN_DESYNC, conn_desync, \
	  "Followed connections whose answers could no longer be counted (quiet meta commands, " \
	  "error answers, a gap in the stream): their writes fall back to the quarantine.") \
	X(SETTLED, settled, "Writes settled by the server's answer to them.") \
	X(QUARANTINED, quarantined, \
	  "Writes settled by the quarantine (noreply, UDP, connections not followed or lost).") \
	X(TC_HANDOFFS, tc_handoffs, \
	  "Hits whose reply did not fit the XDP frame, handed to the TC ingress program.") \
	X(TC_HITS, tc_hits, "Requests the TC ingress program answered (counted in `hits` too).") \
	X(TC_PASSED, tc_passed, \
	  "Handed-off requests the TC ingress program could not answer (a key went meanwhile, the " \
	  "skb could not grow), passed to the server.") \
	X(AMP_REFUSED, amp_refused, \
	  "Replies to sources outside the allowlist larger than `--max-amplification` times the " \
	  "request, passed to the server.") \
	X(CONN_BLIND, conn_blind, \
	  "Connections beyond --max-sockets, whose bytes cannot be walked: while one is open the " \
	  "kernel answers and fills nothing.") \
	X(SPLITS, splits, \
	  "Multi-key gets split: the kernel answered the keys that hit, memcached got a get for " \
	  "the others (its answer carries the END).") \
	X(NOT_HOST, not_host, \
	  "Gets the host's stack would not deliver to the server (a bad checksum, a destination " \
	  "MAC or address not the interface's own, a martian or own source): passed untouched.") \
	X(SHARED_PORT, shared_port, \
	  "Sockets bound to a cached port by another process than the server's (a second server): " \
	  "while one is open the kernel answers and fills nothing.")

enum ink_stat {
#define INK_STAT_ENUM(e, name, help) ST_##e,
	INK_STATS(INK_STAT_ENUM)
#undef INK_STAT_ENUM
	ST_MAX,
};

/* The cache is a log of items (the arena) and a set-associative index over it.
 *
 * Items (a 24-byte header, then the reply text) are appended to the arena at a global head that
 * only grows (16-byte units); the arena is a ring of SEG_BYTES segments, so an item written
 * arena-size bytes ago is overwritten ("lapped") and its index way goes stale, which every reader
 * detects. Small items take little room: a 60-byte item takes 96 bytes, not a fixed slot. An item
 * never crosses a segment.
 *
 * The index has WAYS ways per set, a set being one cache line; a key's set is picked by its hash,
 * its way by a 32-bit tag, and the key in the item is compared in full. Coherence state (when
 * replies may fill again) is kept per set, so every key of a set shares it (over-conservative,
 * never unsafe). */
#define WAYS        8
#define SEG_BYTES   65536   /* one arena map value */
#define SEG_UNITS   (SEG_BYTES / 16)
#define SEG_SLACK   2048    /* past the end of a segment: chunked copies never leave the value */
#define ITEM_CAP    ((ITEM_MAX + 15) / 16 * 16) /* largest item stored (ITEM_MAX rounded up) */

/* A way of an index set: which item holds the key whose hash has this tag, in one 64-bit word
 * (written with one store under the set's lock, read with one load without it). Everything else
 * about the item is in its header in the log (struct ink_item). */
struct ink_way {
	__u32 tag;             /* low 32 bits of the key's hash, never 0; 0 = empty */
	__u32 pos;             /* arena position of the item, 16-byte units (low 32 bits) */
} __attribute__((aligned(8))); /* else the BPF target splits a 64-bit access into two */
_Static_assert(_Alignof(struct ink_way) == 8 && sizeof(struct ink_way) == 8, "a way: one word");

/* A set of the index: one cache line, all a lookup reads before the item. The `sets` map is
 * mmapable, which places its values on a page boundary: each set is one aligned line. */
struct ink_set {
	struct ink_way way[WAYS];
};

/* A set's coherence state (coherence.h), in its own map (`set_state`, same index): lookups never
 * read it. Its lock also guards the set's ways: every writer of them holds it. */
struct ink_set_state {
	struct bpf_spin_lock lock;
	__u32 open;            /* mutations of keys of this set the server has not answered yet */
	__u64 open_since;      /* ktime of the latest of them */
	__u64 stable_since;    /* replies to requests that arrived before this may not fill */
	__u32 gen;             /* server generation `open` counts in (a restart voids the count) */
	__u32 pad;
};

/* An item in the log: this header, then its text "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n"
 * (len bytes). Written before the way that points at it, never changed after: a reader that
 * copied it and finds it not lapped (table.h) has it as it was published. */
struct ink_item {
	__u64 expire_ns;       /* not served from this time on (ktime); ~0 = never */
	__u64 filled_ns;       /* ktime of the fill (void if not after the last flush) */
	__u16 len;             /* text bytes */
	__u16 hdr_len;         /* bytes of the VALUE line, "\r\n" included */
	__u8 key_len;
	__u8 cas_flags;        /* bits 0-6: bytes of " <cas>" at the end of the VALUE line (0: no
				* CAS known); bit 7: ITEM_META_OK */
	__u16 sum;             /* the text's sum (csum.h) as if it lay at an even offset: a reply
				* that serves the text whole adds this instead of summing it */
};
#define ITEM_HDR    24      /* sizeof(struct ink_item): the text starts there */
#define ITEM_LEN_OFF 16     /* offsetof(struct ink_item, len), for user space (status) */
_Static_assert(sizeof(struct ink_item) == ITEM_HDR, "ITEM_HDR");
_Static_assert(__builtin_offsetof(struct ink_item, len) == ITEM_LEN_OFF, "ITEM_LEN_OFF");

#define ITEM_META_OK 1      /* the item carries no meta state: the kernel may answer mg for it */
#define ITEM_CAS_MASK  0x7f /* cas_flags: the CAS's bytes (at most " " and 20 digits) */
#define ITEM_FLAGS_SHIFT 7  /* cas_flags: the ITEM_* flags above them */

struct ink_seg {
	__u8 b[SEG_BYTES + SEG_SLACK];
};

/* Hot slots: a copy of recently hit small items at an address the key's hash gives, so that a
 * hit reads its set's line and its item at the same time instead of one after the other (the
 * item's address is otherwise in the set's line). A slot holds the bytes of one log position: a
 * sequence count (odd while written), the full 64-bit position copied, then the item's header
 * and text as in the log. A lookup uses the slot only if it holds the position its set's way
 * names and its count did not move while read: log bytes never change while not lapped, so the
 * slot is then the item (invalidation and replacement go through the ways, as without slots).
 * One slot per SETS_PER_SLOT sets; the slots fill arena segments past the log's (the ring is
 * n_segs segments, the slots the n_slot segments after them). */
#define SLOT_BYTES    256
#define SLOT_META     16      /* sequence count and position, before the item */
#define SLOTS_PER_SEG (SEG_BYTES / SLOT_BYTES)
#define SETS_PER_SLOT 4
/* largest item (header and text) a slot takes: a copy's last 16-byte step stays in the slot */
#define SLOT_ITEM_MAX (SLOT_BYTES - SLOT_META - 16)
/* A CPU's 1-key lookups read the slot only while enough recent items fit one (at least one in
 * three): where values are large the slot read is a miss that buys nothing. The credit is capped
 * so that a change of workload is followed within a few dozen lookups. */
#define SLOT_CREDIT_MAX 32

/* A TCP connection to the server, followed from its SYN so that each write can be settled by the
 * server's answer to it (see stream.h). */
#define CONN_FIFO   32      /* writes per connection awaiting their answers */
#define PART_MAX    320     /* a command or answer line cut by a segment end, carried over */

#define CONN_DESYNC  1      /* the byte stream was lost (a gap, a line too long): segments are
			     * walked on their own, writes fall back to the quarantine */
#define CONN_INEXACT 2      /* the stream is followed but answers can no longer be counted (quiet
			     * meta, an error answer): writes fall back to the quarantine (a write
			     * that finds the FIFO full is quarantined alone: fifo_push) */
#define CONN_OUT_OK  4      /* the server's initial sequence number is known (SYN-ACK seen) */
#define CONN_TEXT    8      /* the connection speaks the text protocol (its first byte said so) */
#define CONN_BINARY  16     /* ... the binary protocol */
#define CONN_STOPPED 32     /* memcached closes it (quit, a protocol error, an HTTP request) */

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
	__u32 in_long;         /* skipping to the end of a get line too long to carry */
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

/* What the kernel knows of a key written since attach (the ttl_hints map, keyed by the key's
 * hash): its expiry, and whether its item may carry meta state a get reply does not show. The key
 * is stored and compared, so two keys whose hashes collide never share a hint: the entry is then
 * marked shared and neither key is served. */
/* An interface the kernel answers on, as the control plane found it at attach (the `ifaces`
 * map, by ifindex): the kernel answers only what the host's stack would deliver (host.h). */
#define IFACE_SLOTS  256    /* `ifaces` entries, by ifindex % IFACE_SLOTS (interfaces attached
			     * together must differ there: attach refuses otherwise) */
#define IFACE_ADDRS  16     /* addresses listed per interface and family (at most 16: a bit each in
			     * v4_local, v6_local); more are not answered */
#define VLAN_DEVS    256    /* `vlans` entries: VLAN devices on attached interfaces (more are not
			     * answered on) */
#define IFACE_CSUM_PARTIAL 1 /* virtual interface: local senders' UDP checksums may be partial */
#define IFACE_LOOPBACK 2    /* loopback: every source is the host itself, every host address local */

/* Each family's addresses in a list of its own: a request is compared with its own family's only
 * (an IPv6 header naming an IPv4 address v4-mapped is no host's), and IPv4's as 4-byte words. A
 * list holds the interface's unicast addresses (their bit set in *_local: requests to them are
 * answered) and the host's others and the broadcasts (never a source). */
struct ink_iface {
	__u32 ifindex;         /* 0: no interface in this slot */
	__u8 mac[6];
	__u8 flags;            /* IFACE_* */
	__u8 nv4;              /* entries used in v4 */
	__u16 v4_local;        /* bit i: v4[i] is one of this interface's unicast addresses */
	__u16 v6_local;        /* bit i: v6[i] is */
	__u8 nv6;              /* entries used in v6 */
	__u8 pad[3];
	__be32 v4[IFACE_ADDRS];     /* as on the wire */
	__u8 v6[IFACE_ADDRS][16];
};
_Static_assert(IFACE_ADDRS <= 16, "a bit per address in v4_local and v6_local");

/* A VLAN device on an attached interface (the `vlans` map's key): the interface's ifindex and the
 * tags that lead to the device, outermost first, each its TPID (0x8100 for 802.1Q, 0x88a8 for
 * 802.1ad) in the high half and its VLAN id in the low half (0x8100002a: 802.1Q, id 42); 0 where
 * there is no further tag (a device on the interface itself has tag[1] 0). */
struct ink_vlan_key {
	__u32 ifindex;
	__u32 tag[2];
};

#define HINT_SHARED 0xff      /* klen of an entry two keys hash to */
#define KEY_ROOM    256       /* KEY_MAX rounded up to 8-byte words */

struct ink_hint {
	__u64 v;               /* expiry (ms) and hint generation, packed (coherence.h) */
	__u8 klen;             /* the key's length, or HINT_SHARED */
	__u8 meta;             /* the item may carry meta state (stale, win token sent): mg is
				* answered by the server */
	__u8 pad[6];
	__u8 key[KEY_ROOM];
};

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
