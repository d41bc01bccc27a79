// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* XDP on the server's interface: answers UDP gets whose keys all hit, straight from the driver,
 * and remembers the ones it passes (their replies may fill the cache). Everything else passes to
 * the stack untouched: the writes are walked where the server's sockets receive them
 * (inkcache_requests.bpf.c). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "csum.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"
#include "reply.h"
#include "meta.h"
#include "host.h"
#include "xsk.h"
#include "pktcopy.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The stages of a hit, for measuring their cost (config.h's stop_stage). */
#define STAGE_PARSED   1  /* Ethernet, IP, UDP parsed; the port is a server's */
#define STAGE_LOADED   2  /* the frame header checked, the request copied to scratch */
#define STAGE_HOST     3  /* the host would deliver it (host.h) */
#define STAGE_KEYS     4  /* the keys found (each is hashed at its lookup, or by warm_keys) */
#define STAGE_BOUND    5  /* global state, allowlist and amplification bound */
#define STAGE_COMPOSED 6  /* every key looked up, the reply composed in scratch */
#define STAGE(n)                                                                                   \
	do {                                                                                       \
		if (stop_stage == (n))                                                             \
			return XDP_PASS;                                                           \
	} while (0)

/* What XDP learned of each interface's frames (per CPU, slot ifindex % 64): the smallest growth
 * a frame could not take (a reply needing as much goes to TC ingress without being composed here
 * first; forgotten after a second, so one odd frame cannot send replies the slow way for long),
 * and whether its frames have no tailroom. */
struct xdp_room {
	__u32 ifindex;
	__u32 fail_min;        /* smallest growth that failed (0: none known) */
	__u64 until_ns;        /* fail_min valid until */
	__u32 no_tail;         /* the frames have no tailroom (veth, generic XDP): grow at the head */
	__u32 skips;           /* replies grown at the head since the tail was last tried */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xdp_room);
	__uint(max_entries, 64);
} xdp_room SEC(".maps");

#define ROOM_RELEARN_NS 1000000000ULL

#define TAIL_RETRY 256 /* the tail is tried again every this many replies */

/* The interface's slot, taken over if another interface had it: looked up once per request and
 * passed to the functions below (NULL: none; they then assume nothing is known). */
static __always_inline struct xdp_room *room_of(struct xdp_md *ctx)
{
	__u32 slot = ctx->ingress_ifindex & 63;
	struct xdp_room *r = bpf_map_lookup_elem(&xdp_room, &slot);

	if (r && r->ifindex != ctx->ingress_ifindex) {
		r->ifindex = ctx->ingress_ifindex;
		r->fail_min = 0;
		r->until_ns = 0;
		r->no_tail = 0;
		r->skips = 0;
	}
	return r;
}

/* Whether to try growing the frame at the tail: not where it failed before (a failing try costs
 * a helper call per reply), except every TAIL_RETRY replies. */
static __always_inline int try_tail(struct xdp_room *r)
{
	if (!r || !r->no_tail)
		return 1;
	if (++r->skips % TAIL_RETRY)
		return 0;
	r->no_tail = 0; /* set again if the tail still fails */
	return 1;
}

static __always_inline void tail_failed(struct xdp_room *r)
{
	if (r)
		r->no_tail = 1;
}

/* The longest reply (UDP payload) the frame is known to take, or DGRAM_MAX if nothing is known. */
static __always_inline __u32 frame_room(struct xdp_md *ctx, struct xdp_room *r, struct scratch *s,
				       struct pkt *p)
{
	__u32 frame_len;

	/* the clock only where something was learnt; the coarse one (table.h: a load, and a
	 * clock-source read once a jiffy), as a second's expiry needs no more */
	if (!r || !r->fail_min || coarse_now(s) >= r->until_ns)
		return DGRAM_MAX;
	frame_len = (void *)(long)ctx->data_end - (void *)(long)ctx->data;
	barrier_var(frame_len); /* else clang adds to pkt_end, which the verifier refuses */
	/* a reply of out_len bytes grows the frame by payload_off + out_len - frame_len */
	if (frame_len + r->fail_min - 1 < p->payload_off)
		return 0;
	return frame_len + r->fail_min - 1 - p->payload_off;
}

static __always_inline void learn_room(struct xdp_room *r, struct scratch *s, __u32 delta)
{
	__u64 now;

	if (!r)
		return;
	now = coarse_now(s); /* frame_room's clock */
	if (r->fail_min && now < r->until_ns) {
		if (delta < r->fail_min)
			r->fail_min = delta;
		return;
	}
	r->fail_min = delta;
	r->until_ns = now + ROOM_RELEARN_NS;
}

/* Turns the request frame into the reply held in scratch.out[0, out_len) (frame header included,
 * its sum `psum`, csum.h), growing it at the tail or, where the driver leaves no tailroom (veth,
 * generic XDP), at the head with the headers moved forward. Returns 0; or, if the frame cannot
 * take the reply (the packet is then unchanged), the growth it needed (> 0), or -1 for other
 * failures. */
static __always_inline int build_reply(struct xdp_md *ctx, struct xdp_room *room,
				       struct scratch *s, struct pkt *p, __u32 out_len, __u32 psum)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 mc_off = p->payload_off;               /* memcached frame header */
	__u32 frame_len = data_end - data;
	__u32 new_len = mc_off + out_len;
	int delta = (int)new_len - (int)frame_len;
	__u32 pseudo, udp_sum, src = 0;
	int ck_off;

	if (mc_off < 42 || mc_off > 120 || out_len > DGRAM_MAX || out_len < UDP_HDR_MC)
		return -1;
	if (delta != 0 && (delta < 0 || try_tail(room) ? bpf_xdp_adjust_tail(ctx, delta) : -1)) {
		if (delta < 0)
			return -1;
		if (delta > 512)
			return delta;
		/* mc_off is 42..120 (checked above); restated here, where older verifiers (6.1) have
		 * lost the bound through a spill */
		__u32 hl = mc_off;
		barrier_var(hl);
		hl &= 127; /* a mask and a lower bound on the register passed: no range check the
			    * compiler could fold into another register */
		if (hl < 42)
			return -1;
		if (bpf_xdp_adjust_head(ctx, -delta))
			return delta;
		tail_failed(room);
		/* the headers, now `delta` bytes in, move to the front (they were parsed by direct
		 * access: they are in the linear part) */
		if (pkt_move_down(ctx, delta, hl))
			return -1; /* cannot happen: the head just grew by delta */
		/* the headers read where they were, if the copy left them whole */
		if ((__u32)delta >= hl)
			src = delta;
	}
	/* the headers before the payload: it may overwrite where they were */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ck_off = reply_headers(data, data_end, p, out_len, src, &pseudo, &udp_sum);
	if (ck_off < 0)
		return -1;
	/* out_len is 8..1400 (checked above); restate it so the verifier sees the bound */
	barrier_var(out_len);
	__u32 n = ((out_len - 1) & 2047) + 1;
	/* 8-byte stores or the helper's memcpy, whichever the control plane chose (config.h) */
	if ((!reply_inline || pkt_store(ctx, mc_off, s->out, n)) &&
	    bpf_xdp_store_bytes(ctx, mc_off, s->out, n))
		return -1;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	__u16 *ck = data + (ck_off & 127);
	if ((void *)(ck + 1) > data_end)
		return -1;
	__u16 c = csum_fold(csum_add(csum_add(pseudo, udp_sum), psum));
	*ck = c ? c : 0xffff;
	return 0;
}

/* Hands the request to the TC ingress program, which builds the reply in the skb: marks it in the
 * XDP metadata and passes it. */
static __always_inline int hand_to_tc(struct xdp_md *ctx, struct pkt *p, __u16 req_id, __u32 magic)
{
	void *data, *meta;
	__u32 *mark;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32)))
		goto fail; /* the driver has no metadata: the server answers */
	data = (void *)(long)ctx->data;
	meta = (void *)(long)ctx->data_meta;
	mark = meta;
	if ((void *)(mark + 1) > data)
		goto fail;
	*mark = magic;
	if (magic == INK_META_MAGIC)
		stat_inc(ST_TC_HANDOFFS);
	return XDP_PASS;
fail:
	stat_inc(ST_ERRORS);
	remember_request(p, req_id);
	return XDP_PASS;
}

/* Whether the get in scratch.buf[0, plen) (its key at koff) is one key as parse_get_keys would
 * find it, told from the marks load_request counted: the space after the verb and the "\r\n" are
 * the only bytes below '!' or above 0x7f, so the key has no delimiter, NUL or non-ASCII byte. If
 * so, records the key as parse_get_keys does and returns 1; else 0 (the parse decides). */
static __always_inline int one_clean_key(struct scratch *s, __u32 koff, __u32 plen)
{
	__u32 klen = plen - koff - 2;

	if (s->rq.marks != 3 || plen < koff + 3 || klen > KEY_MAX ||
	    BUF(s, plen - 2) != '\r' || BUF(s, plen - 1) != '\n')
		return 0;
	s->koff[0] = koff;
	s->klen[0] = klen;
	return 1;
}

static __always_inline int handle_get(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				      __u32 plen, __u16 req_id, __u32 want_cas)
{
	__u32 koff = want_cas ? 5 : 4;
	int n = one_clean_key(s, koff, plen) ? 1 : parse_get_keys(koff, plen), out, r;
	struct xdp_room *room;
	__u32 bound, limit;

	/* read back from map memory, whose values the verifier does not follow: both ways of
	 * finding the keys, and get and gets, leave it one state to walk the rest with (the
	 * inlined lookup included), not two */
	s->rq.keys = n;
	n = *(volatile __s32 *)&s->rq.keys;
	s->rq.cas = want_cas;
	want_cas = *(volatile __u32 *)&s->rq.cas;

	STAGE(STAGE_KEYS);

	if (n <= 0 || p->ip_opts) {
		stat_inc(ST_PASSED); /* not in the form the kernel answers: the server decides */
		if (n > 0)
			remember_request(p, req_id);
		return XDP_PASS;
	}
	bound = reply_bound(p);
	{
		struct ink_global *g = global_state();
		if (!g || g->blind > 0) { /* a connection's writes are unseen: answer nothing */
			stat_inc(ST_PASSED);
			return XDP_PASS;
		}
	}
	if (bound == 0) {
		stat_inc(ST_REFUSED);
		remember_request(p, req_id);
		return XDP_PASS;
	}
	STAGE(STAGE_BOUND);
	room = room_of(ctx);
	limit = frame_room(ctx, room, s, p);
	out = compose_reply(n, req_id, want_cas, limit < bound ? limit : bound, 1);
	if (out < 0) {
		if (count_unanswerable(s, out, bound)) {
			/* a multi-key get with a key missing: the others may hit; TC ingress answers
			 * those and passes a get for the rest (memcached answers each key of a UDP get
			 * with its own datagram, ~6 us a key: answering the hits here is cheaper) */
			if (n > 1 && (out == RP_MISS || out == RP_EXPIRED) && !no_split)
				return hand_to_tc(ctx, p, req_id, INK_META_SPLIT);
			remember_request(p, req_id);
			return XDP_PASS;
		}
		/* known not to fit: not even composed */
		return hand_to_tc(ctx, p, req_id, INK_META_MAGIC);
	}
	STAGE(STAGE_COMPOSED);
	r = build_reply(ctx, room, s, p, out, (__u32)s->lk.sum);
	if (r == 0) {
		stat_inc(ST_HITS);
		return XDP_TX;
	}
	if (r > 0)
		learn_room(room, s, r);
	return hand_to_tc(ctx, p, req_id, INK_META_MAGIC);
}

/* A meta get (`mg <key> <flags>*`) in scratch.buf[0, plen): answered in the frame if every flag
 * is one the kernel answers and the item is here; returns XDP_TX, or XDP_PASS after counting why
 * not (the caller then walks it as a command: mg with T, N, E or R writes). */
static __always_inline int handle_mg(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				     __u32 plen, __u16 req_id)
{
	__u32 bound = reply_bound(p);
	int r = bound ? compose_mg(plen, bound) : -1;

	if (r > 0) {
		put_frame_header(s, req_id);
		if (build_reply(ctx, room_of(ctx), s, p, r, reply_payload_sum(s, r)) == 0) {
			stat_inc(ST_HITS);
			return XDP_TX;
		}
		stat_inc(ST_TOO_BIG); /* no room in this frame: the server answers */
	} else if (r == LK_MISS || r == LK_EXPIRED) {
		stat_inc(r == LK_EXPIRED ? ST_EXPIRED : ST_MISSES);
	} else if (!bound) {
		stat_inc(ST_REFUSED);
	}
	return XDP_PASS;
}

#define VERB_GET  1
#define VERB_GETS 2
#define VERB_MG   3

/* A UDP datagram to the server: the memcached frame header, then one request. Gets (get, gets,
 * mg) are answered when every key hits; everything else passes (writes are walked where the
 * server's socket receives them: inkcache_requests.bpf.c). */
static __always_inline int handle_udp(struct xdp_md *ctx, struct scratch *s, struct pkt *p)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct mc_udp_hdr *fh = data + (p->payload_off & 127);
	__u32 plen, fsum, verb = 0;
	__u16 req_id;

	if (p->payload_len < UDP_HDR_MC || (void *)(fh + 1) > data_end) {
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}
	plen = p->payload_len - UDP_HDR_MC;
	req_id = fh->req_id;
	fsum = (__u32)fh->req_id + fh->seq + fh->total + fh->reserved; /* for host_delivers */
	/* the kernel answers the usual one-datagram requests (memcached also takes other sequence
	 * numbers, and drops datagrams announcing several) */
	if (fh->seq != 0 || fh->total != bpf_htons(1) || plen < 6 || plen > PAYLOAD_MAX) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	/* plen is 6..PAYLOAD_MAX (checked above); restate it so the verifier sees the bound */
	plen = ((plen - 1) & 2047) + 1;
	if (load_request(ctx, p->payload_off + UDP_HDR_MC, s, plen)) {
		/* not in the linear part: copied by the helper, summed after, not classified (the
		 * parse finds the keys) */
		int sum;
		if (bpf_xdp_load_bytes(ctx, p->payload_off + UDP_HDR_MC, s->buf, plen) ||
		    (sum = buf_sum(0, plen)) < 0) {
			stat_inc(ST_ERRORS);
			return XDP_PASS;
		}
		s->rq.sum = sum;
		s->rq.marks = ~0U;
	}
	STAGE(STAGE_LOADED);
	if (plen >= 7 && buf_eq(s, 0, "get ", 4))
		verb = VERB_GET;
	else if (plen >= 8 && buf_eq(s, 0, "gets ", 5))
		verb = VERB_GETS;
	else if (buf_eq(s, 0, "mg ", 3) && !p->ip_opts)
		verb = VERB_MG;
	if (!verb) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	/* one place for the host checks and one for gets: each is inlined once */
	if (!host_delivers(ctx, s, p, fsum)) {
		if (verb == VERB_MG)
			stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	STAGE(STAGE_HOST);
	if (verb != VERB_MG)
		return handle_get(ctx, s, p, plen, req_id, verb == VERB_GETS);
	if (handle_mg(ctx, s, p, plen, req_id) == XDP_TX)
		return XDP_TX;
	stat_inc(ST_PASSED);
	return XDP_PASS;
}

/* Most traffic is not for the cache. An untagged IPv4 frame carrying a TCP segment (walked where
 * the server's socket receives it, never here) or a UDP datagram to a port no server has passes
 * at a glance, before the parse; everything else is parsed, and passes there if it is not ours.
 * Either way it is counted as passed. */
static __always_inline int passes_at_a_glance(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);

	if ((void *)(udp + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return 0;
	if (ip->protocol == IPPROTO_TCP)
		return 1;
	return ip->protocol == IPPROTO_UDP && !server_port(bpf_ntohs(udp->dest));
}

/* The entry point: a dispatcher. Packets that are not UDP to a server port pass at once. */
SEC("xdp")
int inkcache_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct scratch *s;
	struct pkt *p;
	__u16 port;
	int act;

	if (passes_at_a_glance(data, data_end)) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	s = get_scratch();
	if (!s) {
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}
	p = &s->pk; /* the packet's layout lives in the scratch: the stack is short */
	if (parse_packet(data, data_end, p) != PARSE_OK) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	port = bpf_ntohs(p->dport);
	if (!server_port(port)) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	if (p->proto != IPPROTO_UDP) {
		stat_inc(ST_PASSED); /* TCP: walked where the server's socket receives it */
		return XDP_PASS;
	}
	STAGE(STAGE_PARSED);
	act = handle_udp(ctx, s, p);
	/* in cooperative mode, what goes to the server goes to inkcached's AF_XDP sockets if it
	 * has any (xsk.h); in transparent mode the server's sockets must see every request (the
	 * socket-side programs walk its writes and fill from its answers) */
	return act == XDP_PASS && coop_mode ? xsk_redirect(ctx) : act;
}
