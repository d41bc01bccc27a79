/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The cache table: an item log (the arena) found through a set-associative index (layout in
 * inkcache_common.h). Lookup, fill, and the log's reservation and promotion.
 *
 * A fill reserves room at the log head with an atomic add, writes the item (header and text)
 * there without a lock, then takes its set's lock (in set_state) to publish it: one 64-bit store
 * of the way (tag and position), after a full barrier. A lookup takes no lock and touches one
 * line of the index: it reads the set's ways, then the item's header and text from the log, and
 * then checks that no fill has reserved the item's bytes since (the head has not moved a whole
 * arena past it): the copy is then the item as published. Items never change once published,
 * and a way is read and written whole, so a lookup racing a writer sees the old item or the new
 * one, each whole. The key is compared in full on the copy. A lookup of a 1-key get reads the
 * key's hot slot along with its set and copies the item from there instead of from the log when
 * the slot holds the position the way names (inkcache_common.h; slot_put writes slots).
 *
 * Each set also has its coherence state (set_state, written by coherence.h): when a key of it was
 * last written (stable_since) and how many writes the server has not answered yet (open). A reply
 * may fill a set only if its request arrived after the set became stable (fill_allowed), so a
 * reply computed before a write can never be installed after the write's invalidation. */
#ifndef INKCACHE_TABLE_H
#define INKCACHE_TABLE_H

#include "inkcache_common.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "csum.h"

#define NS_PER_SEC 1000000000LL


/* table_lookup modes (its want_cas argument) */
#define LKM_CAS   1        /* gets form, only if the CAS is known */
#define LKM_STAGE 2        /* the item as stored (CAS included), for a caller that composes;
			    * `limit` bounds out_off + the item's length */

/* What a hit leaves its caller to do (scratch.lk.upkeep; lookup_upkeep does it) */
#define UPK_SLOT    1      /* copy the item into the key's hot slot (slot_put) */
#define UPK_PROMOTE 2      /* move the item to the log head (promote) */

/* table_lookup results */
#define LK_MISS     -1
#define LK_FULL     -2     /* the reply would exceed the caller's limit (scratch.need: how far) */
#define LK_EXPIRED  -3

static __always_inline __u32 tag_of(__u64 h)
{
	__u32 t = (__u32)h;
	return t ? t : 1;
}

/* The key's set: the high half of the hash scaled to n_sets (no division, any set count). */
static __always_inline __u32 set_index(__u64 h)
{
	return (__u32)(((h >> 32) * (__u64)n_sets) >> 32);
}

static __always_inline struct ink_set *set_for(__u64 h)
{
	__u32 idx = set_index(h);
	return bpf_map_lookup_elem(&sets, &idx);
}

static __always_inline struct ink_set_state *state_of(__u32 idx)
{
	return bpf_map_lookup_elem(&set_state, &idx);
}

/* A way, read or written whole (one 64-bit access: never torn). */
static __always_inline __u64 way_word(struct ink_set *set, __u32 w)
{
	return *(volatile __u64 *)&set->way[w & (WAYS - 1)];
}

static __always_inline void way_put(struct ink_set *set, __u32 w, __u32 tag, __u32 pos)
{
	*(volatile __u64 *)&set->way[w & (WAYS - 1)] = ((__u64)pos << 32) | tag;
}

#define WORD_TAG(v) ((__u32)(v))
#define WORD_POS(v) ((__u32)((v) >> 32))

/* A full barrier: a fetching atomic add (fully ordered on every architecture) on a word of this
 * CPU's scratch, whose cache line no other CPU writes. */
static __always_inline void fence(struct scratch *s)
{
	__u64 v = __sync_fetch_and_add(&s->lk.fence, 0);
	barrier_var(v); /* used: the fetching (ordered) form of the add */
}

/* The way for `tag` in `set`: 1 with the 32-bit log position it names in *pos, or 0. */
static __always_inline int find_way(struct ink_set *set, __u32 tag, __u32 *pos)
{
	for (__u32 w = 0; w < WAYS; w++) {
		__u64 v = way_word(set, w);
		if (WORD_TAG(v) == tag) {
			*pos = WORD_POS(v);
			return 1;
		}
	}
	return 0;
}

static __always_inline __u64 arena_units(void)
{
	return (__u64)n_segs * SEG_UNITS;
}

/* The segment holding log position `pos` (16-byte units); *off gets the byte offset in it. */
static __always_inline __u32 seg_index(__u64 pos, __u32 *off)
{
	*off = ((__u32)pos & (SEG_UNITS - 1)) * 16;
	return (__u32)((pos / SEG_UNITS) % n_segs);
}

/* Log units an item of `len` text bytes takes, its header included. */
static __always_inline __u32 item_units(__u32 len)
{
	return (ITEM_HDR + len + 15) / 16;
}

/* Zero, computed from v by an instruction the compiler cannot see through: added to an offset, it
 * makes a load depend on the load of v, which keeps the two in order on every architecture (arm64
 * keeps address dependencies; x86 keeps loads in order anyway). */
static __always_inline __u32 dep_zero(__u64 v)
{
	asm volatile("%[v] &= 0" : [v] "+r"(v));
	return (__u32)v;
}

/* Key hash h's hot slot (inkcache_common.h): its arena segment; *off gets its byte offset there. */
static __always_inline __u32 slot_seg(__u64 h, __u32 *off)
{
	__u32 i = (__u32)(((h >> 32) * (__u64)n_slots) >> 32);

	*off = (i % SLOTS_PER_SEG) * SLOT_BYTES;
	return n_segs + i / SLOTS_PER_SEG;
}

/* Copies between the scratch buffers and a segment, 16 bytes a step (the last step may touch up
 * to 15 bytes past n, inside the scratch buffers' and the segment's slack). Global functions, so
 * the verifier checks each loop once, whatever the callers. */
#define COPY_FROM_BUF 0     /* scratch.buf -> segment */
#define COPY_FROM_OUT 1     /* scratch.out -> segment */

__noinline int copy_to_seg(__u32 segi, __u32 soff, __u32 src, __u32 n, __u32 from_out)
{
	struct scratch *s = get_scratch();
	struct ink_seg *seg = bpf_map_lookup_elem(&arena, &segi);
	__u32 at = soff & (SEG_BYTES - 1); /* a mask the verifier follows */
	__u8 *base;

	if (!s || !seg || n > ITEM_CAP)
		return -1;
	base = from_out ? s->out : s->buf;
	for (__u32 c = 0; c < ITEM_CAP / 16; c++) {
		__u32 o = c * 16, from = (src + o) & BUF_MASK, to = at + o;
		if (o >= n)
			break;
		barrier_var(from);
		STORE64(&seg->b[to], LOAD64(&base[from]));
		STORE64(&seg->b[to + 8], LOAD64(&base[from + 8]));
	}
	return 0;
}

/* Copies n bytes (1..ITEM_CAP) of segment `seg` at byte `from` (< SEG_BYTES + 512) to scratch.out
 * at `dst`, and with `sum` adds their sum, as they lie at dst in the reply, to scratch.lk.sum: the
 * reply's checksum is summed while it is composed, not read again (a word's 32-bit halves summed
 * in 64 bits, folded to 16 bits, bytes swapped if dst is odd: the words pair the other way in the
 * reply). A text served whole needs no sum here: its item holds it (`sum` is a constant at each
 * call site, so each inlined copy has its loop without a branch on it). 16 bytes a step; the last
 * step may touch up to 15 bytes past n, inside the scratch buffers' and the segment's slack.
 * Every word read is folded into *dep (the caller orders a later load after them: dep_zero).
 * Inlined in table_lookup (a call and its return cost ~10-15 ns each on the hit path here). What
 * keeps the verifier's walk short: the arguments pass through map memory, so every path into the
 * loop brings it the same (unknown) values; as in pktcopy.h the loop tests a step count derived
 * from n and its counter is dead after it, so every exit leaves one state and the verifier walks
 * what follows once. */
static __always_inline int copy_item(struct scratch *s, struct ink_seg *seg, __u64 from, __u64 dst,
				     __u64 n, __u64 sum, __u64 *dep, __u32 inlined)
{
	__u64 acc = 0, x = 0, steps, a, b, rest, o, to, fr;
	const __u8 *src;

	s->lk.cp_from = from;
	s->lk.cp_dst = dst;
	s->lk.cp_n = n;
	from = s->lk.cp_from;
	dst = s->lk.cp_dst;
	n = s->lk.cp_n;
	if (n == 0 || n > ITEM_CAP || from >= SEG_BYTES + 512)
		return -1;
	src = &seg->b[from];
	if (inlined) {
		/* where the copy is inlined in XDP's entry program, clang spills `from` before the
		 * check and reloads it after, and 6.1 keeps no bounds for a spilled unknown scalar:
		 * the loop reads through a pointer made from a copy checked just before (a spilled
		 * pointer keeps its bounds) */
		fr = from;
		barrier_var(fr);
		if (fr >= SEG_BYTES + 512)
			return -1;
		src = &seg->b[fr];
		barrier_var(src);
	}
	steps = n >> 4;
	for (__u64 c = 0; c < ITEM_CAP / 16; c++) {
		if (c >= steps)
			break;
		o = c * 16;
		to = (dst + o) & OUT_MASK;
		barrier_var(to);
		a = LOAD64(src + o);
		b = LOAD64(src + o + 8);
		STORE64(&s->out[to], a);
		STORE64(&s->out[to + 8], b);
		x ^= a ^ b;
		if (sum)
			acc += csum_halves(a) + csum_halves(b);
	}
	rest = n & 15;
	if (rest) { /* the last step: only the bytes before n count */
		o = n & ~15ULL;
		barrier_var(o);
		o &= 2047; /* bounds on the register used */
		to = (dst + o) & OUT_MASK;
		fr = from + o;
		barrier_var(to);
		barrier_var(fr);
		if (fr >= SEG_BYTES + 512 + ITEM_CAP)
			return -1;
		a = LOAD64(&seg->b[fr]);
		b = LOAD64(&seg->b[fr + 8]);
		STORE64(&s->out[to], a);
		STORE64(&s->out[to + 8], b);
		x ^= a ^ b;
		if (sum) {
			a = low_bytes(a, rest);
			b = rest > 8 ? low_bytes(b, rest - 8) : 0;
			acc += csum_halves(a) + csum_halves(b);
		}
	}
	if (sum)
		s->lk.sum += csum_at(acc, dst);
	*dep ^= x;
	return 0;
}

/* Writes an item's header at log position p (the text goes ITEM_HDR bytes after it; `sum` is its
 * sum, struct ink_item). */
static __always_inline int item_put(__u64 p, __u64 exp, __u64 filled, __u32 len, __u32 hdr,
				    __u32 klen, __u32 cas, __u32 flags, __u32 sum)
{
	__u32 soff, segi = seg_index(p, &soff);
	struct ink_seg *seg = bpf_map_lookup_elem(&arena, &segi);
	struct ink_item *it;

	if (!seg)
		return -1;
	it = (void *)&seg->b[soff & (SEG_BYTES - 1)];
	it->expire_ns = exp;
	it->filled_ns = filled;
	it->len = len;
	it->hdr_len = hdr;
	it->key_len = klen;
	it->cas_flags = (cas & ITEM_CAS_MASK) | (flags << ITEM_FLAGS_SHIFT);
	it->sum = sum;
	return 0;
}

/* How far the coarse clock may lag the monotonic clock, with a wide margin. It is a monotonic
 * reading taken in the current jiffy (coarse_now): jiffies advance from the monotonic clock, a
 * tick (1-10 ms, CONFIG_HZ 1000-100) at a time while ticks run, and a CPU woken from idle by an
 * interrupt brings them up to date on the way in (tick_nohz_irq_enter), before any softirq runs
 * XDP. The kernel's coarse clock (bpf_ktime_get_coarse_ns) lags by the same. */
#define COARSE_SLACK_NS (250ULL * 1000000ULL)

/* Starts a request's monotonic clock (expired_at): every caller of table_lookup calls this first.
 * A reading kept from an earlier request would be in the past, and serve items expired since. */
static __always_inline void clocks_reset(struct scratch *s)
{
	s->lk.now = 0;
}

/* The coarse clock: a monotonic reading taken by this CPU since jiffies last advanced, so never
 * ahead of the monotonic clock and behind it by less than a jiffy lasts. The verifier inlines
 * bpf_jiffies64() as one load; the monotonic clock is read (a helper call) once a jiffy per CPU.
 * Jiffies are read first: a reading taken after jiffies became J belongs to J. (Where the CPU may
 * reorder the two loads, as arm64 may, the reading can be a jiffy older: still far within
 * COARSE_SLACK_NS.) On this project's AMD VM the helper calls of bpf_ktime_get_coarse_ns() cost
 * ~30 ns a hit with an expiry, their returns going through the kernel's return thunk
 * (docs/results/hitcost.md, twenty-fourth run). */
static __always_inline __u64 coarse_now(struct scratch *s)
{
	__u64 j = bpf_jiffies64();

	if (j != s->clk.jiffies) {
		s->clk.ns = bpf_ktime_get_ns();
		s->clk.jiffies = j;
	}
	return s->clk.ns;
}

/* Whether an item expiring at exp (ktime) has expired. The coarse clock decides alone for items
 * more than COARSE_SLACK_NS from their expiry, which the monotonic clock cannot have reached; the
 * others are decided by the monotonic clock, read at most once per request (kept in scratch.lk
 * from clocks_reset on). */
static __always_inline int expired_at(struct scratch *s, __u64 exp)
{
	__u64 now;

	if (coarse_now(s) + COARSE_SLACK_NS < exp)
		return 0;
	now = s->lk.now;
	if (!now) {
		now = bpf_ktime_get_ns();
		s->lk.now = now;
	}
	return now >= exp;
}

/* Full log position of a way's 32-bit position, relative to the head. */
static __always_inline __u64 full_pos(__u64 head, __u32 pos)
{
	return head - (__u32)((__u32)head - pos);
}

/* Reserves `units` 16-byte units at the log head that do not cross a segment end (a crossing
 * reservation is abandoned: its bytes stay unused until the log comes round). */
static __always_inline int arena_reserve(struct ink_global *g, __u32 units, __u64 *pos)
{
	for (int i = 0; i < 3; i++) {
		__u64 p = __sync_fetch_and_add(&g->head, units);
		if ((p & (SEG_UNITS - 1)) + units <= SEG_UNITS) {
			*pos = p;
			return 0;
		}
	}
	return -1;
}

/* The way a new item for `tag` takes: the key's own, else an empty or lapped one, else the one
 * whose item is oldest in the log (first in, first out; hot items are moved to the head on hits).
 * Expired and flushed items are not looked for: that would read every way's item. */
static __always_inline __u32 pick_way(struct ink_set *set, __u32 tag, __u64 head)
{
	__u32 victim = 0, stale = WAYS, oldest = 0;

	for (__u32 w = 0; w < WAYS; w++) {
		__u64 v = way_word(set, w);
		__u32 age = (__u32)head - WORD_POS(v);
		if (WORD_TAG(v) == tag)
			return w;
		if (stale == WAYS && (WORD_TAG(v) == 0 || age > arena_units()))
			stale = w;
		if (age > oldest) {
			oldest = age;
			victim = w;
		}
	}
	return stale < WAYS ? stale : victim;
}

/* May a reply to a request that arrived at req_ts fill this set now? (set locked) */
static __always_inline int fill_allowed(struct ink_set_state *st, struct ink_global *g,
					__u64 req_ts, __u64 now)
{
	if (st->stable_since >= req_ts || g->flush_ns >= req_ts || now < g->fill_block_until ||
	    g->blind > 0)
		return 0;
	if (st->open && st->gen == (__u32)g->gen && now - st->open_since < settle_max_ns)
		return 0;
	if (g->flush_open > 0 && now - g->flush_open_since < settle_max_ns)
		return 0;
	return 1;
}

/* Eight bytes of scratch.out at pos. */
static __always_inline __u64 out_word(struct scratch *s, __u32 pos)
{
	pos &= OUT_MASK;
	barrier_var(pos);
	return LOAD64(&s->out[pos]);
}

/* Copies the item at log position p into key hash h's hot slot: its header from the log, its text
 * (len bytes) from scratch.out at src, where table_lookup copied it. Skipped if another CPU is
 * writing the slot. The count is odd while the slot is written; the atomics order the bytes
 * between its two moves. */
__noinline int slot_put(__u64 h, __u64 p, __u32 src, __u32 len)
{
	__u32 soff, segi = slot_seg(h, &soff), loff, lsegi = seg_index(p, &loff);
	struct ink_seg *seg = bpf_map_lookup_elem(&arena, &segi);
	struct ink_seg *log = bpf_map_lookup_elem(&arena, &lsegi);
	__u64 *seq, q;
	int r = 0;

	if (!seg || !log || len > SLOT_ITEM_MAX - ITEM_HDR)
		return -1;
	soff &= SEG_BYTES - 1;
	loff &= SEG_BYTES - 1;
	seq = (void *)&seg->b[soff];
	q = *(volatile __u64 *)seq;
	if ((q & 1) || __sync_val_compare_and_swap(seq, q, q + 1) != q)
		return -1;
	STORE64_ONCE(&seg->b[soff + 8], p);
	for (__u32 i = 0; i < ITEM_HDR; i += 8)
		STORE64(&seg->b[soff + SLOT_META + i], LOAD64(&log->b[loff + i]));
	if (copy_to_seg(segi, soff + SLOT_META + ITEM_HDR, src, len, COPY_FROM_OUT)) {
		STORE64_ONCE(&seg->b[soff + 8], ~0ULL); /* no position: never used */
		r = -1;
	}
	q = __sync_fetch_and_add(seq, 1);
	barrier_var(q); /* used: the fetching (ordered) form of the add */
	return r;
}

/* Writes the item table_lookup found (its text at scratch.out[src, src+len), its header fields in
 * scratch.lk) at the log head and moves key h's way there if it still points at old_pos: an old
 * item that is still read survives the log coming round. */
__noinline int promote(__u64 h, __u32 old_pos, __u32 src, __u32 len)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	__u32 idx = set_index(h), soff, tag = tag_of(h);
	struct ink_set *set = bpf_map_lookup_elem(&sets, &idx);
	struct ink_set_state *st = state_of(idx);
	__u64 p;

	if (!s || !g || !set || !st || len == 0 || len > ITEM_CAP)
		return -1;
	if (arena_reserve(g, item_units(len), &p))
		return -1;
	if (item_put(p, s->lk.exp, s->lk.filled, len, s->lk.hdr, s->lk.klen, s->lk.cas,
		     s->lk.flags, s->lk.isum))
		return -1;
	if (copy_to_seg(seg_index(p, &soff), soff + ITEM_HDR, src, len, COPY_FROM_OUT))
		return -1;
	fence(s); /* the item is in the log before the way names it */
	bpf_spin_lock(&st->lock);
	for (__u32 w = 0; w < WAYS; w++) {
		__u64 v = way_word(set, w);
		if (WORD_TAG(v) == tag && WORD_POS(v) == old_pos) {
			way_put(set, w, tag, (__u32)p);
			break;
		}
	}
	bpf_spin_unlock(&st->lock);
	stat_inc(ST_PROMOTED);
	return 0;
}

#define SHORT_KEY 32 /* warm_keys hashes keys up to this long inline */

/* For a get of n > 1 keys: hashes each into scratch.kh (where table_lookup finds it) and reads
 * every key's index set, then every found item's first two lines, before the lookups. Each
 * pass's loads are independent, so the CPU waits on memory for all the keys at once rather than
 * twice per key, and the lookups that follow find the lines in its cache. Nothing read here is
 * used but the hashes: the lookups read and check it all again. */
__noinline int warm_keys(__u32 n)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	__u64 sink = 0, head;

	if (!s || !g)
		return 0;
	/* every hash first: the set reads below then follow each other closely enough for the CPU
	 * to have them all in flight at once */
	for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
		if (k >= n)
			break;
		__u32 len = *(volatile __u16 *)&s->klen[k];
		/* keys of up to 32 bytes (the usual ones) hashed here; longer ones by a call: a
		 * 32-word loop inside the loop over the keys took most of inkcache_xdp's verifier
		 * walk under ISA v3 (759,461 instructions on 6.18) */
		s->kh[k] = len <= SHORT_KEY ? hash_words(s, s->koff[k], len, SHORT_KEY / 8)
					    : key_hash(s->koff[k], len);
	}
	for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
		struct ink_set *set;
		if (k >= n)
			break;
		set = set_for(s->kh[k]);
		if (set)
			sink += way_word(set, 0);
	}
	head = *(volatile __u64 *)&g->head;
	for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
		__u64 h, p;
		__u32 pos = 0, soff, segi;
		struct ink_set *set;
		struct ink_seg *seg;
		if (k >= n)
			break;
		h = s->kh[k];
		set = set_for(h);
		if (!set || !find_way(set, tag_of(h), &pos))
			continue;
		p = full_pos(head, pos);
		segi = seg_index(p, &soff);
		seg = bpf_map_lookup_elem(&arena, &segi);
		if (!seg)
			continue;
		soff &= SEG_BYTES - 1;
		sink += LOAD64(&seg->b[soff]) + LOAD64(&seg->b[soff + 64]);
	}
	s->lk.warm = sink;
	return 0;
}

/* Appends key k's item (a 1-key get's key is hashed here, a multi-key get's are in scratch.kh:
 * warm_keys) to scratch.out at out_off: in `get` form (without the CAS), or with want_cas in
 * `gets` form (only if its CAS is known), serving it if not expired (the clocks are read if the
 * item has an expiry: expired_at; the caller starts them with clocks_reset). Returns the
 * bytes appended, or LK_*; LK_FULL (nothing copied) if the reply would then be longer than
 * `limit` with "END\r\n" added. Adds the appended bytes' sum to scratch.lk.sum (csum.h). On a
 * hit, scratch.lk.upkeep says what the caller must do next, before its next lookup:
 * lookup_upkeep. That is left to the caller so that no call chain holds both a lookup's frame
 * and promote's: XDP inlines a 1-key get's lookup (a call and its return cost ~4% of a hot hit
 * here, hitcost.md's twenty-eighth run), and its frame then holds the lookup's spills too.
 * `inlined`: the caller is that inlined copy (copy_item then takes care of 6.1's verifier). */
static __always_inline int lookup_item(__u32 k, __u32 out_off, __u32 want_cas, __u32 limit,
				       __u32 inlined)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_set *set;
	struct ink_seg *seg, *slot;
	struct ink_item *it;
	__u32 koff, klen, pos = 0, len, hdr, ikl, iflags, isum, cas, first, out_len, soff, segi, sloff;
	__u32 upkeep;
	__u64 h, head, p, exp, filled, dep, sq = 0, spos = 0;

	if (!s || !g || out_off > UDP_HDR_MC + PAYLOAD_MAX)
		return LK_MISS;
	koff = s->koff[k & 31];
	klen = s->klen[k & 31];
	if (klen == 0 || klen > KEY_MAX)
		return LK_MISS;
	/* a 1-key get's key is hashed here (no call), a multi-key get's by warm_keys; the length
	 * read again, unlinked from klen: the hash loop's exits would otherwise each leave klen a
	 * different range, and the verifier would walk the rest once for each */
	h = s->lk.one_key ? hash_of(s, koff, *(volatile __u16 *)&s->klen[k & 31]) : s->kh[k & 31];
	set = set_for(h);
	if (!set)
		return LK_MISS;
	/* the hot slot is read before the set's ways are looked at: both wait on memory together */
	segi = slot_seg(h, &sloff);
	sloff &= SEG_BYTES - 1;
	/* not where recent items were too big for a slot (large values): reading it would only
	 * add a miss */
	slot = s->lk.one_key && s->lk.slot_credit ? bpf_map_lookup_elem(&arena, &segi) : NULL;
	if (slot) {
		__u64 line2 = LOAD64(&slot->b[sloff + 64]);
		barrier_var(line2); /* loaded now, with the first line: most items span two */
		sq = LOAD64_ONCE(&slot->b[sloff]);
		/* the slot's position and bytes are read after its count (seqcount reader) */
		sloff += dep_zero(sq);
		spos = LOAD64_ONCE(&slot->b[sloff + 8]);
	}
	if (!find_way(set, tag_of(h), &pos))
		return LK_MISS;
	head = *(volatile __u64 *)&g->head;
	p = full_pos(head, pos);
	if (head - p > arena_units())
		return LK_MISS; /* lapped */
	if (sq && !(sq & 1) && spos == p) {
		/* the slot holds the item the way names (its count is checked again at the end) */
		soff = sloff + SLOT_META;
	} else {
		sq = 0;
		segi = seg_index(p, &soff);
	}
	s->lk.slot_sq = sq;
	/* kept in the scratch, not in registers, while the item is copied: the copy's loop needs
	 * them, and spilled they would take stack that the TC ingress program's deepest call
	 * chain does not have (512 bytes in all, counted in 32-byte steps by 6.1) */
	s->lk.h = h;
	s->lk.p = p;
	s->lk.pos = pos;
	seg = bpf_map_lookup_elem(&arena, &segi);
	if (!seg)
		return LK_MISS;
	it = (void *)&seg->b[soff & (SEG_BYTES - 1)];
	exp = it->expire_ns;
	filled = it->filled_ns;
	len = it->len;
	hdr = it->hdr_len;
	ikl = it->key_len;
	iflags = it->cas_flags;
	isum = it->sum;
	/* every value read from the log, for ordering the head's second read after them */
	dep = exp ^ filled ^ len ^ hdr ^ ikl ^ iflags ^ isum;
	cas = iflags & ITEM_CAS_MASK;
	if (ikl != klen || filled <= g->flush_ns)
		return LK_MISS;
	/* an item that never expires needs no clock; else the request's, read at most once */
	if (exp != EXP_NEVER && expired_at(s, exp))
		return LK_EXPIRED;
	if ((want_cas & LKM_CAS) && !cas)
		return LK_MISS;
	if (len > ITEM_CAP || hdr < klen + 12 + cas || hdr > len)
		return LK_MISS;
	/* get form: the VALUE line without " <cas>", then the data */
	first = (want_cas || !cas) ? len : hdr - 2 - cas;
	out_len = (want_cas || !cas) ? len : len - cas;
	if (s->lk.one_key) {
		__u64 c = s->lk.slot_credit;
		if (first == len && len <= SLOT_ITEM_MAX - ITEM_HDR)
			s->lk.slot_credit = c < SLOT_CREDIT_MAX ? c + 2 : c;
		else if (c)
			s->lk.slot_credit = c - 1;
	}
	if (want_cas & LKM_STAGE) {
		if (out_off + len > limit || out_off + len > OUT_LEN - 32)
			return LK_FULL;
	} else if (out_off + out_len + 5 > limit || out_off + out_len + 5 > DGRAM_MAX) {
		s->need = out_off + out_len + 5;
		return LK_FULL;
	}
	s->lk.exp = exp;
	s->lk.filled = filled;
	s->lk.flags = iflags >> ITEM_FLAGS_SHIFT;
	s->lk.klen = klen;
	s->lk.hdr = hdr;
	s->lk.cas = cas;
	s->lk.isum = isum;
	soff &= SEG_BYTES - 1;
	if (first == len) {
		/* served whole: its sum is the item's, moved to where it lies in the reply */
		if (copy_item(s, seg, soff + ITEM_HDR, out_off, len, 0, &dep, inlined))
			return LK_MISS;
		s->lk.sum += csum_at(isum, out_off);
	} else if (copy_item(s, seg, soff + ITEM_HDR, out_off, first, 1, &dep, inlined) ||
		   copy_item(s, seg, soff + ((ITEM_HDR + hdr - 2) & 511), out_off + first,
			     len - (hdr - 2), 1, &dep, inlined)) {
		return LK_MISS;
	}

	/* the key, 8 bytes at a time, against the copy ("VALUE " is 6 bytes). Reading it from the
	 * item instead (folded into dep) measured 4-5% dearer per hot hit (docs/results/hitcost.md,
	 * twenty-fifth run). */
	for (__u32 i = 0; i < 32; i++) {
		__u32 o = i * 8;
		if (o >= klen)
			break;
		if (low_bytes(out_word(s, out_off + 6 + o) ^ word_at(s, koff + o), klen - o))
			return LK_MISS;
	}
	if ((out_word(s, out_off + 6 + klen) & 0xff) != ' ')
		return LK_MISS;
	/* nothing reserved the item's bytes while we read them: the head is read after the header
	 * and text, its address made to depend on every word of them (dep_zero: a load-load order
	 * on every architecture, with no locked operation; measured neutral against fence() on the
	 * Intel VM, hitcost.md's fourteenth run). The compiler barrier keeps clang from moving the
	 * reads past it. */
	barrier();
	head = *(volatile __u64 *)((void *)&g->head + dep_zero(dep));
	h = s->lk.h;
	p = s->lk.p;
	if (head - p > arena_units())
		return LK_MISS;
	/* what the caller does next (lookup_upkeep), both only for an item served whole, whose
	 * copy (out_len == len bytes at out_off) is what they write: an item about to be
	 * overwritten that is still read moves to the head (approximates LRU); a 1-key get's item
	 * not read from its hot slot is copied there, for its next hit to read with the set */
	upkeep = head - p > arena_units() / 4 * 3 && first == len ? UPK_PROMOTE : 0;
	if (s->lk.slot_sq) {
		segi = slot_seg(h, &sloff);
		slot = bpf_map_lookup_elem(&arena, &segi);
		/* the slot's count read again after the copy (the head's read carries the order) */
		sloff = (sloff + dep_zero(head)) & (SEG_BYTES - 1);
		if (!slot || LOAD64_ONCE(&slot->b[sloff]) != s->lk.slot_sq)
			return LK_MISS; /* rewritten while copied */
		stat_inc(ST_SLOT_HITS);
	} else if (s->lk.one_key && first == len && len <= SLOT_ITEM_MAX - ITEM_HDR) {
		upkeep |= UPK_SLOT;
	}
	s->lk.upkeep = upkeep;
	return out_len;
}

/* lookup_item as a function of its own: the verifier checks it once, whatever its callers. */
__noinline int table_lookup(__u32 k, __u32 out_off, __u32 want_cas, __u32 limit)
{
	return lookup_item(k, out_off, want_cas, limit, 0);
}

/* What a hit of lookup_item / table_lookup left to do (scratch.lk.upkeep), its item's copy being
 * the `len` bytes (the lookup's result) at scratch.out[out_off]. Called after every hit, before
 * the next lookup. */
static __always_inline void lookup_upkeep(struct scratch *s, __u32 out_off, __u32 len)
{
	__u32 todo = s->lk.upkeep;

	if (!todo)
		return;
	if (todo & UPK_SLOT)
		slot_put(s->lk.h, s->lk.p, out_off, len);
	if (todo & UPK_PROMOTE)
		promote(s->lk.h, s->lk.pos, out_off, len);
}

/* Installs the item at scratch.buf[fa.off, +fa.len) for key hash fa.h if the set allows it (see
 * fill_allowed). Returns 1 if installed, 0 if not. */
__noinline int table_fill(void)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_set_state *st;
	struct ink_set *set;
	__u32 tag, soff, len, off, w, ok, idx;
	__u64 now, p, head;
	int sum;

	if (!s || !g)
		return 0;
	len = s->fa.len;
	off = s->fa.off;
	/* the CAS's length must fit its 7 bits of the header (" " and at most 20 digits) */
	if (len == 0 || len > ITEM_CAP || s->fa.klen == 0 || s->fa.klen > KEY_MAX ||
	    s->fa.cas > ITEM_CAS_MASK)
		return 0;
	idx = set_index(s->fa.h);
	set = bpf_map_lookup_elem(&sets, &idx);
	st = state_of(idx);
	if (!set || !st)
		return 0;
	tag = tag_of(s->fa.h);
	now = bpf_ktime_get_ns();
	/* cheap refusal before taking room in the log */
	bpf_spin_lock(&st->lock);
	ok = fill_allowed(st, g, s->fa.req_ts, now);
	bpf_spin_unlock(&st->lock);
	if (!ok)
		return 0;
	if (arena_reserve(g, item_units(len), &p))
		return 0;
	sum = buf_sum(off, len);
	if (sum < 0)
		return 0;
	if (item_put(p, s->fa.exp, now, len, s->fa.hdr, s->fa.klen, s->fa.cas, s->fa.flags, sum))
		return 0;
	if (copy_to_seg(seg_index(p, &soff), soff + ITEM_HDR, off, len, COPY_FROM_BUF))
		return 0;
	fence(s); /* the item is in the log before the way names it */
	head = *(volatile __u64 *)&g->head;
	bpf_spin_lock(&st->lock);
	ok = fill_allowed(st, g, s->fa.req_ts, now); /* a write may have come meanwhile */
	if (ok) {
		w = pick_way(set, tag, head);
		if (w < WAYS)
			way_put(set, w, tag, (__u32)p);
	}
	bpf_spin_unlock(&st->lock);
	return ok;
}

#endif
