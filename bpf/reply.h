/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Answering a UDP get in the kernel, shared by the two programs that send replies: XDP (the reply
 * built in the driver's frame when it has room) and TC ingress (the reply built in a grown skb
 * when it has not). Both parse the request, look its keys up and compose the reply here, and
 * rewrite the headers here, so the two paths cannot answer differently.
 *
 * The reply is composed in scratch.out: the memcached frame header (request id echoed, sequence
 * 0, one datagram), every item ("VALUE ..." lines and data, as memcached sent them), "END\r\n".
 * A request is answered only if every key hits and the whole reply fits one datagram. */
#ifndef INKCACHE_REPLY_H
#define INKCACHE_REPLY_H

#include "inkcache_common.h"
#include "parsing.h"
#include "csum.h"
#include "maps.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"

/* XDP metadata (bpf_xdp_adjust_meta) on a request whose reply every key hit for but whose frame
 * could not take it: the TC ingress program answers it from the skb. */
#define INK_META_MAGIC 0x31636b69 /* "ikc1" */
/* A multi-key get some of whose keys missed in XDP: TC ingress answers the keys that hit and
 * passes a get for the others to the server. */
#define INK_META_SPLIT 0x32636b69 /* "ikc2" */

/* compose_reply results (besides the reply length) */
#define RP_MISS    LK_MISS
#define RP_OVER    LK_FULL      /* longer than `limit`; scratch.need has a lower bound */
#define RP_EXPIRED LK_EXPIRED

/* Splits "get <key>[ <key>...]\r\n" or "gets ..." (the keys starting at `pos`) into keys. Returns
 * the number of keys, or -1 if the request is not in the canonical form the kernel answers (such
 * requests pass to the server, which has the last word on them). Inlined: a call costs on the
 * hit path, and its loop is short (each token's scan is scan_token's, checked once). */
static __always_inline int parse_get_keys(__u32 pos, __u32 len)
{
	struct scratch *s = get_scratch();
	__u32 n = 0;

	if (!s || len < 7 || len > PAYLOAD_MAX)
		return -1;
	if (BUF(s, len - 2) != '\r' || BUF(s, len - 1) != '\n')
		return -1;
	for (__u32 k = 0; k < MAX_GET_KEYS + 1; k++) {
		int end = scan_token(pos, len - 2);
		__u32 klen;
		if (end < 0)
			return -1;
		klen = (__u32)end - pos;
		if (klen == 0 || klen > KEY_MAX || s->dirty)
			return -1;
		if (n >= MAX_GET_KEYS)
			return -1; /* too many keys for the kernel: the server answers */
		s->koff[n & 31] = pos;
		s->klen[n & 31] = klen;
		n++;
		if ((__u32)end == len - 2)
			return n;
		if (BUF(s, end) != ' ')
			return -1; /* a bare '\r' or '\n' inside the line */
		pos = end + 1;
	}
	return -1;
}

/* The sum (csum.h) "END\r\n" adds at an even offset of a message. */
#define END_SUM ((__u32)'E' + ('N' << 8) + 'D' + ('\r' << 8) + '\n')

/* Composes the reply to the n keys parse_get_keys found (want_cas: "gets") in scratch.out, frame
 * header (request id req_id, network order) included, serving items not expired (the clocks are
 * read only if an item has an expiry: table.h's expired_at). Returns its
 * length, at most `limit`, with its sum (csum.h) in scratch.lk.sum; or RP_MISS / RP_EXPIRED if a
 * key has no servable item, or RP_OVER if the reply would be longer than `limit` (scratch.need
 * then holds the length reached: the reply needs at least that much). Inlined (a call costs on
 * the hit path). With inline_one (XDP), a 1-key get's lookup is inlined too (lookup_item); every
 * other lookup is table_lookup's, checked once. */
static __always_inline int compose_reply(__u32 n, __u32 req_id, __u32 want_cas, __u32 limit,
					 __u32 inline_one)
{
	struct scratch *s = get_scratch();
	__u32 out = UDP_HDR_MC;
	__u16 id = req_id;
	int r;

	if (!s)
		return RP_MISS;
	clocks_reset(s);
	s->lk.sum = 0;
	if (limit > DGRAM_MAX)
		limit = DGRAM_MAX;
	s->lk.one_key = n == 1;
	if (n == 1 && inline_one) {
		r = lookup_item(0, out, want_cas, limit, 1);
		if (r < 0)
			return r;
		lookup_upkeep(s, out, r);
		out += r;
	} else {
		if (n > 1)
			warm_keys(n);
		for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
			if (k >= n)
				break;
			r = table_lookup(k, out, want_cas, limit);
			if (r < 0)
				return r;
			lookup_upkeep(s, out, r);
			out += r;
		}
	}
	if (out + 5 > limit) { /* no key: table_lookup did not check */
		s->need = out + 5;
		return RP_OVER;
	}
	__builtin_memcpy(&s->out[out & 2047], "END\r\n", 5);
	/* the frame header's words: the id, sequence 0, one datagram, 0 */
	s->lk.sum += csum_at(END_SUM, out) + id + bpf_htons(1);
	out += 5;
	put_frame_header(s, id);
	return out;
}

struct hits_walk {
	__u32 n, want_cas, limit, out;
};

/* One key of a split multi-key get (a bpf_loop callback: hit or miss). The misses' count is
 * scratch.nmiss, not a field of the walk (scratch.h says why). */
static long hits_step(__u32 k, void *ctx)
{
	struct hits_walk *w = ctx;
	struct scratch *s;
	int r;

	if (k >= w->n || k >= MAX_GET_KEYS)
		return 1;
	r = table_lookup(k, w->out, w->want_cas, w->limit);
	s = get_scratch();
	if (!s)
		return 1;
	if (r >= 0) {
		lookup_upkeep(s, w->out, r);
		w->out += r;
		return 0;
	}
	r = s->nmiss;
	barrier_var(r);
	s->miss[r & 31] = k;
	s->nmiss = r + 1;
	return 0;
}

/* For a split multi-key get: composes in scratch.out the message for the keys that hit (frame
 * header and VALUE items, no END: the server's answer for the others ends the reply) and lists
 * the others in scratch.miss. Returns the message's length (UDP_HDR_MC if nothing hit). */
__noinline int compose_hits(__u32 n, __u32 req_id, __u32 want_cas, __u32 limit)
{
	struct scratch *s = get_scratch();
	struct hits_walk w = { .n = n, .want_cas = want_cas, .out = UDP_HDR_MC };
	__u16 id = req_id;

	if (!s)
		return -1;
	clocks_reset(s);
	w.limit = limit > DGRAM_MAX ? DGRAM_MAX : limit;
	s->lk.one_key = n == 1;
	warm_keys(n);
	s->nmiss = 0;
	bpf_loop(MAX_GET_KEYS, hits_step, &w, 0);
	put_frame_header(s, id);
	return w.out;
}

/* Appends missed key number i (and a space) to the get being written at scratch.out[*o] (a
 * bpf_loop callback). */
static long miss_step(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	__u32 k, koff, klen, at;

	if (!s || i >= s->nmiss || i >= MAX_GET_KEYS)
		return 1;
	barrier_var(i); /* keep the masks below: the verifier needs them */
	k = s->miss[i & 31];
	barrier_var(k);
	koff = s->koff[k & 31];
	klen = s->klen[k & 31];
	at = s->miss_end; /* in map memory: the verifier need not follow its value */
	if (klen == 0 || klen > KEY_MAX || at + klen + 2 > DGRAM_MAX) {
		s->miss_end = 0; /* cannot happen: the keys came from a request of this size */
		return 1;
	}
	buf_to_out(s, at, koff, klen);
	OUTB(s, at + klen) = ' ';
	s->miss_end = at + klen + 1;
	return 0;
}

/* Writes into scratch.out (after the frame header already there) the get for the keys listed in
 * scratch.miss ("get " or "gets " as the request had it). Returns its length, frame header
 * included, or -1. */
__noinline int compose_miss_request(__u32 want_cas)
{
	struct scratch *s = get_scratch();
	__u32 o = UDP_HDR_MC;

	if (!s || s->nmiss == 0)
		return -1;
	__builtin_memcpy(&s->out[o], "gets ", 5);
	o += want_cas ? 5 : 4;
	if (!want_cas)
		OUTB(s, o - 1) = ' ';
	s->miss_end = o;
	bpf_loop(MAX_GET_KEYS, miss_step, NULL, 0);
	o = s->miss_end;
	if (o <= UDP_HDR_MC + 5 || o > DGRAM_MAX)
		return -1;
	/* the last space becomes the line end */
	OUTB(s, o - 1) = '\r';
	OUTB(s, o) = '\n';
	return o + 1;
}

/* The allowlist's verdict on recent sources, per CPU, one slot by address: a get from a source
 * seen before reads one slot instead of walking the LPM trie (the allowlist is fixed at attach).
 * Shared by XDP and TC ingress like every map of the same name. */
#define ALLOW_MEMO_SLOTS 64 /* the slot is 6 bits of a hash of the address */

struct allow_memo {
	__u64 a0, a1;          /* the source address */
	__u32 verdict;         /* 0: empty, 1: allowed, 2: not */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct allow_memo);
	__uint(max_entries, ALLOW_MEMO_SLOTS);
} allow_memo SEC(".maps");

static __always_inline int allowed(struct pkt *p)
{
	struct ink_lpm_key k = { .prefixlen = 128 };
	__u64 a0 = LOAD64(&p->saddr[0]), a1 = LOAD64(&p->saddr[8]);
	__u32 slot = ((a0 ^ a1) * 0x9e3779b97f4a7c15ULL) >> 58; /* the top 6 bits: every byte counts */
	struct allow_memo *m = bpf_map_lookup_elem(&allow_memo, &slot);
	int ok;

	if (m && m->verdict && m->a0 == a0 && m->a1 == a1)
		return m->verdict == 1;
	__builtin_memcpy(k.addr, p->saddr, 16);
	ok = bpf_map_lookup_elem(&allow, &k) != NULL;
	if (m) {
		m->a0 = a0;
		m->a1 = a1;
		m->verdict = ok ? 1 : 2;
	}
	return ok;
}

/* The longest reply (UDP payload) the kernel may send to this request: a datagram to an
 * allowlisted source, else --max-amplification times the request's UDP payload (0: none). */
static __always_inline __u32 reply_bound(struct pkt *p)
{
	__u64 b;

	if (allowed(p))
		return DGRAM_MAX;
	b = (__u64)max_amplification * p->payload_len;
	return b > DGRAM_MAX ? DGRAM_MAX : (__u32)b;
}

/* Remembers a get passed to the server (client, port, request id, now): its reply may fill. */
static __always_inline void remember_request(struct pkt *p, __u16 req_id)
{
	struct ink_req_key k = {};
	struct ink_req_val v = { .ts_ns = bpf_ktime_get_ns() };

	__builtin_memcpy(k.addr, p->saddr, 16);
	k.port = p->sport;
	k.req_id = req_id;
	bpf_map_update_elem(&pending, &k, &v, BPF_ANY);
}

/* Counts why a reply could not be composed (RP_* from compose_reply; `bound` from reply_bound)
 * unless it was only for a limit tighter than the bound (XDP's room in the frame). Returns 1 if
 * counted (the request goes to the server), 0 if the reply is within the bound. */
static __always_inline int count_unanswerable(struct scratch *s, int r, __u32 bound)
{
	if (r == RP_OVER) {
		if (s->need > DGRAM_MAX) {
			stat_inc(ST_TOO_BIG);
			return 1;
		}
		if (s->need > bound) {
			stat_inc(ST_AMP_REFUSED);
			return 1;
		}
		return 0;
	}
	if (r == RP_EXPIRED)
		stat_inc(ST_EXPIRED);
	stat_inc(ST_MISSES);
	return 1;
}

/* Ones' complement sum of the reply in scratch.out[0, out_len) (out_len <= DGRAM_MAX), in memory
 * order; zero-pads it to a multiple of 4 for bpf_csum_diff. */
static __always_inline __u32 reply_payload_sum(struct scratch *s, __u32 out_len)
{
	__u32 sum = 0;

	__builtin_memset(&s->out[out_len & 2047], 0, 4);
	for (__u32 c = 0; c < 3; c++) {
		__u32 o = c * 512, n;
		if (o >= out_len)
			break;
		n = out_len - o;
		if (n > 512)
			n = 512;
		n = (n + 3) & ~3U;
		barrier_var(n);
		n &= 1023;
		sum = csum_add(sum, (__u32)bpf_csum_diff(NULL, 0, (void *)&s->out[o], n, 0));
	}
	return sum;
}

/* Writes the reply's headers at [data, data_end) (parsed into p) from the request's, read at
 * `src` bytes further on: 0 where they are in place, or how far the head grew when they were
 * copied down and their first copy is still whole (pkt_move_down; the copy's words then need not
 * be read back while its stores are in flight: a load spanning two of them waits for both to
 * reach the cache, and a grown head's line is usually another CPU's). MAC, IP addresses and ports
 * swapped, lengths for a UDP payload of out_len bytes, TTL/hop limit 64, IPv4 header checksum
 * (updated, not summed again: the headers are a request's that host_delivers checked, or a
 * reply's this function wrote); every other byte is left as it is at data. Reads every field it
 * needs before writing it and never reads what it wrote. The UDP checksum is left to the caller:
 * *pseudo gets the pseudo header's sum, *udp_sum the UDP header's (checksum field as 0); both in
 * memory order. Returns the offset of the UDP checksum field, or -1 if the headers are not where
 * p says. */
static __always_inline int reply_headers(void *data, void *data_end, struct pkt *p, __u32 out_len,
					 __u32 src, __u32 *pseudo, __u32 *udp_sum)
{
	void *from = data + (src & 511);
	struct ethhdr *eth = data, *seth = from;
	struct udphdr *udp, *sudp;
	__u32 ulen = 8 + out_len, sum, l3 = p->l3_off & 63, d4, s4;
	__u16 d2, s2, len16 = bpf_htons(ulen), sport, dport;

	barrier_var(l3); /* one register: p may live in map memory */
	if ((void *)(eth + 1) > data_end || (void *)(seth + 1) > data_end)
		return -1;
	/* the MACs swapped by 4- and 2-byte words (cast through void *: a memcpy of the byte
	 * arrays is compiled to byte loads and stores) */
	d4 = *(__u32 *)(void *)seth->h_dest;
	d2 = *(__u16 *)(void *)(seth->h_dest + 4);
	s4 = *(__u32 *)(void *)seth->h_source;
	s2 = *(__u16 *)(void *)(seth->h_source + 4);
	*(__u32 *)(void *)eth->h_dest = s4;
	*(__u16 *)(void *)(eth->h_dest + 4) = s2;
	*(__u32 *)(void *)eth->h_source = d4;
	*(__u16 *)(void *)(eth->h_source + 4) = d2;

	if (!p->ipv6) {
		struct iphdr *ip = data + l3, *sip = from + l3;
		barrier_var(ip); /* one pointer for the bound check and the accesses */
		barrier_var(sip);
		if ((void *)(ip + 1) > data_end || (void *)(sip + 1) > data_end)
			return -1;
		__be32 sa = sip->saddr, da = sip->daddr;
		__u16 ttl_proto = *(__u16 *)&sip->ttl, tot = bpf_htons(sizeof(*ip) + ulen);
		/* the header checksum updated for the two words that change (RFC 1624, eqn. 3):
		 * the request's was checked (host.h), and swapping the addresses keeps the sum */
		__u32 hc = (__u16)~sip->check + (__u16)~sip->tot_len + (__u16)~ttl_proto;
		/* the TTL is the word's first byte in memory, the protocol its second */
		ttl_proto = bpf_htons((__u16)(64 << 8)) | (ttl_proto & bpf_htons(0xff));
		ip->saddr = da;
		ip->daddr = sa;
		ip->tot_len = tot;
		*(__u16 *)&ip->ttl = ttl_proto;
		ip->check = csum_fold(hc + tot + ttl_proto);
		udp = (void *)(ip + 1);
		sudp = (void *)(sip + 1);
	} else {
		struct ipv6hdr *ip6 = data + l3, *sip6 = from + l3;
		barrier_var(ip6);
		barrier_var(sip6);
		if ((void *)(ip6 + 1) > data_end || (void *)(sip6 + 1) > data_end)
			return -1;
		struct in6_addr sa = sip6->saddr, da = sip6->daddr;
		ip6->saddr = da;
		ip6->daddr = sa;
		ip6->payload_len = len16;
		ip6->hop_limit = 64;
		udp = (void *)(ip6 + 1);
		sudp = (void *)(sip6 + 1);
	}
	if ((void *)(udp + 1) > data_end || (void *)(sudp + 1) > data_end)
		return -1;
	/* the addresses as parsing kept them: the request's, swapped (the sum is the same) */
	sum = addr_sum(p->saddr, p->ipv6) + addr_sum(p->daddr, p->ipv6);
	sport = sudp->source;
	dport = sudp->dest;
	udp->source = dport;
	udp->dest = sport;
	udp->len = len16;
	udp->check = 0;
	/* pseudo header: addresses, protocol, UDP length (IPv6's 32-bit length sums the same) */
	*pseudo = csum_add(sum, bpf_htons(IPPROTO_UDP) + len16);
	*udp_sum = (__u32)sport + dport + len16;
	return l3 + (p->ipv6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr)) +
	       __builtin_offsetof(struct udphdr, check);
}

#endif
