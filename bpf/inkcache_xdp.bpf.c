// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* XDP on the server's interface: answers UDP gets whose keys all hit, straight from the driver;
 * invalidates keys that mutating commands (TCP or UDP) are about to change; passes everything else
 * to the stack untouched. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "csum.h"
#include "maps.h"
#include "proto.h"
#include "cache.h"
#include "reply.h"
#include "xsk.h"
#include "binproto.h"
#include "meta.h"
#include "stream.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Kernel expiry for the exptime token at buf[start, end); unknown if it does not parse. */
static __always_inline __u64 exp_from_token(__u32 start, __u32 end)
{
	struct ink_global *g = global_state();
	__s64 e = parse_exptime(start, end);

	if (!g || e == EXPTIME_BAD)
		return EXP_UNKNOWN;
	return exptime_to_ns(e, bpf_ktime_get_ns(), g);
}

/* Meta commands: the expiry a T<ttl> (or N<ttl>, vivify) flag among the tokens in [pos, eol)
 * sets, else `dflt`. */
__noinline __u64 meta_exp(__u32 pos, __u32 eol, __u64 dflt)
{
	struct scratch *s = get_scratch();

	if (!s)
		return EXP_UNKNOWN;
	for (__u32 i = 0; i < 16; i++) {
		int t;
		__u8 c;
		if (pos >= eol)
			break;
		t = scan_token(pos, eol);
		if (t < 0)
			return EXP_UNKNOWN;
		if ((__u32)t > pos) {
			c = BUF(s, pos);
			if (c == 'T' || c == 'N')
				return exp_from_token(pos + 1, t);
		}
		pos = t + 1;
	}
	return dflt;
}

/* flush_all [delay]: voids everything now and, with a delay, refuses fills until the delayed
 * flush has surely happened in the server. */
static __always_inline void flush_command(__u32 tend, int eol, __u32 exact)
{
	struct ink_global *g = global_state();
	__u64 now = bpf_ktime_get_ns(), until = 0;

	if (exact)
		flush_exact();
	else
		invalidate_all(ST_INVAL_FLUSH);
	if (!g || invalidation_off)
		return;
	if (eol < 0) {
		until = now + 2592000ULL * NS_PER_SEC; /* delay cut off: assume the longest */
	} else if (BUF(get_scratch(), tend) == ' ') {
		int t = scan_token(tend + 1, eol);
		__s64 d = t > 0 ? parse_exptime(tend + 1, t) : EXPTIME_BAD;
		if (d > 0 && d != EXPTIME_BAD) {
			__u64 at = exptime_to_ns(d + 1, now, g); /* +1: exptime_to_ns is 1 s early */
			until = (at == EXP_UNKNOWN ? now : at) + 2 * NS_PER_SEC;
		}
	}
	if (until > g->fill_block_until)
		g->fill_block_until = until;
}

/* Meta command flags that matter here (meta_scan). */
#define MF_QUIET 1   /* q: the answer may be left out */
#define MF_B64   2   /* b: the key is base64, not the bytes seen */
#define MF_WRITE 4   /* T N E R: mg changes the item */
#define MF_COND  8   /* C M I: ms may leave the old item (and its expiry) in place */

/* The flags among the tokens in [pos, eol), or -1 if there are more than we walk. */
__noinline int meta_scan(__u32 pos, __u32 eol)
{
	struct scratch *s = get_scratch();
	int f = 0;

	if (!s)
		return -1;
	for (__u32 i = 0; i < 24; i++) {
		int t;
		__u8 c;
		if (pos >= eol)
			return f;
		t = scan_token(pos, eol);
		if (t < 0)
			return -1;
		if ((__u32)t > pos) {
			c = BUF(s, pos);
			if (c == 'q')
				f |= MF_QUIET;
			else if (c == 'b')
				f |= MF_B64;
			else if (c == 'T' || c == 'N' || c == 'E' || c == 'R')
				f |= MF_WRITE;
			else if (c == 'C' || c == 'M' || c == 'I')
				f |= MF_COND;
		}
		pos = t + 1;
	}
	return pos >= eol ? f : -1;
}

/* One command at w->pos (a bpf_loop callback: the verifier checks it once). Invalidates every key
 * it may change and counts the answers the server will give. On a followed connection
 * (scratch.ws.tracked) a line not complete yet stops the walk, to be carried over; otherwise
 * (UDP, connections not followed) the segment is all there is, and a cut line is judged on what
 * it shows. */
static long walk_command(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct scratch *s = get_scratch();
	__u32 pos = w->pos, len = w->len, kpos, klen, e, answers, exact;
	int tend, eol, kend, cmd, t1, t2, t3, bytes = 0, mf = 0, write = 1;
	__u64 exp;

	if (!s)
		return walk_stop(w, -1);
	if (pos >= len)
		return walk_stop(w, len);
	exact = s->ws.exact;
	eol = scan_eol(pos, len);
	if (eol < 0 && s->ws.stream)
		return walk_stop(w, pos); /* the rest of the line comes in the next segment */
	tend = scan_token(pos, len);
	if (tend < 0 || (__u32)tend <= pos)
		goto unsure; /* leading space or empty line: memcached says ERROR; be safe */
	cmd = classify(s, pos, (__u32)tend - pos);
	if (cmd == CMD_UNKNOWN)
		goto unsure;
	if (eol < 0) {
		/* a cut line on a stream not followed: judge it on what it shows */
		if (cmd == CMD_HARMLESS || cmd == CMD_GET || cmd == CMD_QUIT)
			return walk_stop(w, len);
		if (cmd == CMD_FLUSH) {
			flush_command(tend, -1, 0);
			return walk_stop(w, len);
		}
		if (cmd == CMD_GAT || cmd == CMD_META_SET || cmd == CMD_META_GET ||
		    cmd == CMD_META_ARITH || cmd == CMD_META_DEL)
			goto unsure; /* flags (b, q) or keys may follow */
		if ((__u32)tend >= len || BUF(s, tend) != ' ')
			goto unsure;
		kpos = tend + 1;
		kend = scan_token(kpos, len);
		if (kend < 0 || (__u32)kend <= kpos || (__u32)kend >= len ||
		    (__u32)kend - kpos > KEY_MAX)
			goto unsure;
		exp = cmd == CMD_DELETE ? HINT_DELETE : cmd == CMD_ARITH ? HINT_KEEP : EXP_UNKNOWN;
		invalidate_key(kpos, (__u32)kend - kpos, exp);
		return walk_stop(w, len);
	}

	/* UDP: only a request that is one command is settled by its answer (the storage
	 * commands' data block is checked below, once its length is known) */
	if (s->ws.udp && (i > 0 || (cmd != CMD_STORE && cmd != CMD_META_SET &&
				    (__u32)eol + 1 != len)))
		exact = 0;
	/* a complete line [pos, eol]; its content ends before "\r\n" (or a bare "\n") */
	e = (__u32)eol;
	if (e > pos && BUF(s, e - 1) == '\r')
		e--;
	answers = 1;
	if (e - pos >= 8 && BUF(s, e - 8) == ' ' && buf_eq(s, e - 7, "noreply", 7))
		answers = 0;
	w->pos = eol + 1;

	switch (cmd) {
	case CMD_GET:
		break;
	case CMD_QUIT:
		answers = 0;
		break;
	case CMD_HARMLESS:
		if (buf_eq(s, pos, "m", 1)) { /* mn, me: flags may ask for quiet mode */
			mf = meta_scan(tend + 1, e);
			if (mf < 0 || (mf & MF_QUIET)) {
				s->ws.desync = 1;
				s->ws.exact = 0;
			}
		}
		break;
	case CMD_FLUSH:
		flush_command(tend, eol, exact && answers);
		break;
	case CMD_GAT: { /* gat <exptime> <key>*: one answer for all keys */
		int xend = scan_token(tend + 1, e);
		if (xend < 0 || (__u32)xend >= e)
			goto unsure;
		exp = exp_from_token(tend + 1, xend);
		kpos = xend + 1;
		for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
			kend = scan_token(kpos, e);
			if (kend < 0 || (__u32)kend <= kpos)
				break;
			if ((__u32)kend - kpos > KEY_MAX)
				goto unsure;
			invalidate_key_x(kpos, (__u32)kend - kpos, exp, exact);
			kpos = kend + 1;
			if (kpos >= e)
				break;
		}
		if (kpos < e)
			goto unsure; /* more keys than we walked */
		break;
	}
	default:
		/* <cmd> <key> ...: the key is the second token */
		if (BUF(s, tend) != ' ')
			goto unsure;
		kpos = tend + 1;
		kend = scan_token(kpos, e);
		if (kend < 0 || (__u32)kend <= kpos || (__u32)kend - kpos > KEY_MAX)
			goto unsure;
		klen = (__u32)kend - kpos;
		switch (cmd) {
		case CMD_STORE: /* <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply] */
			t1 = scan_token(kend + 1, e);
			t2 = t1 < 0 || (__u32)t1 >= e ? -1 : scan_token(t1 + 1, e);
			t3 = t2 < 0 || (__u32)t2 >= e ? -1 : scan_token(t2 + 1, e);
			if (t3 < 0)
				goto unsure;
			exp = exp_from_token(t1 + 1, t2);
			bytes = parse_uint(t2 + 1, t3);
			if (bytes < 0)
				goto unsure;
			/* add and cas may fail and leave the old item and its expiry */
			if (BUF(s, pos) == 'a' && BUF(s, pos + 1) == 'd')
				exp = exp_either(key_hash(kpos, klen), exp);
			else if (BUF(s, pos) == 'c')
				exp = exp_either(key_hash(kpos, klen), exp);
			break;
		case CMD_META_SET: /* ms <key> <datalen> <flag>* */
			t1 = scan_token(kend + 1, e);
			if (t1 < 0)
				goto unsure;
			bytes = parse_uint(kend + 1, t1);
			if (bytes < 0)
				goto unsure;
			mf = meta_scan(t1 + 1, e);
			exp = meta_exp(t1 + 1, e, EXP_NEVER);
			if (mf > 0 && (mf & MF_COND)) /* a mode or a CAS: may leave the old item */
				exp = exp_either(key_hash(kpos, klen), exp);
			break;
		case CMD_TOUCH: /* touch <key> <exptime> [noreply] */
			t1 = scan_token(kend + 1, e);
			exp = t1 < 0 ? EXP_UNKNOWN : exp_from_token(kend + 1, t1);
			break;
		case CMD_DELETE:
			exp = HINT_DELETE;
			break;
		case CMD_META_DEL:
			mf = meta_scan(kend + 1, e);
			exp = HINT_DELETE;
			break;
		case CMD_ARITH:
			exp = HINT_KEEP;
			break;
		case CMD_META_GET:
			mf = meta_scan(kend + 1, e);
			write = mf < 0 || (mf & MF_WRITE);
			exp = meta_exp(kend + 1, e, HINT_KEEP);
			break;
		default: /* ma */
			mf = meta_scan(kend + 1, e);
			exp = meta_exp(kend + 1, e, HINT_KEEP);
			break;
		}
		if (mf < 0)
			goto unsure;
		if (mf & MF_QUIET) {
			/* the answer may be left out: the count can no longer be trusted */
			s->ws.desync = 1;
			s->ws.exact = 0;
			exact = 0;
			answers = 0;
		}
		if (s->ws.udp && (cmd == CMD_STORE || cmd == CMD_META_SET) &&
		    (__u32)eol + 1 + (__u32)bytes + 2 != len)
			exact = 0;
		if (write) {
			if (mf & MF_B64)
				invalidate_all(ST_INVAL_UNPARSABLE); /* the real key is not what we see */
			else
				invalidate_key_x(kpos, klen, exp, exact && answers);
		}
		if (cmd == CMD_STORE || cmd == CMD_META_SET) {
			/* skip the data block: <bytes> and "\r\n" */
			__u32 next = eol + 1 + (__u32)bytes + 2;
			if (exact && answers)
				s->ws.cmds++;
			if (next > len) {
				s->ws.skip = next - len;
				return walk_stop(w, len);
			}
			w->pos = next;
			return 0;
		}
	}
	if (exact && answers)
		s->ws.cmds++;
	return 0;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
	return walk_stop(w, -1);
}

#define WALK_MAX 512 /* commands walked per chunk; more: not sure */

/* Walks the commands in scratch.buf[pos, len) (TCP or UDP) and invalidates every key they may
 * change. Returns where it stopped (see struct walk), or -1 when it could not be sure (everything
 * was invalidated). scratch.ws says whether the stream is followed and carries the counts. */
__noinline int invalidate_mutations(__u32 pos, __u32 len)
{
	struct scratch *s = get_scratch();
	struct walk w = { .pos = pos, .len = len, .ret = -2 };

	if (!s)
		return -1;
	s->ws.skip = 0;
	bpf_loop(WALK_MAX, walk_command, &w, 0);
	if (w.ret == -2) { /* more commands than we walk */
		invalidate_all(ST_INVAL_UNPARSABLE);
		return -1;
	}
	return w.ret;
}

/* The client's bytes of a followed connection, segment by segment: the segment with sequence
 * number `seq` carries plen bytes at payload_off. Returns 0 if walked, 1 if the connection is not
 * (or no longer) followed: the caller walks the segment on its own. */
__noinline int ingress_stream(struct xdp_md *ctx, __u32 payload_off, __u32 plen, __u32 seq)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;
	__u32 off = 0, part, done = 0;
	int d;

	if (!s || !g || !ctx)
		return 1;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return 1;
	if (c->gen != (__u32)g->gen || (c->flags & CONN_DESYNC))
		return 1;
	d = (int)(seq - c->in_seq);
	if (d > 0) { /* bytes before this segment were never seen here */
		conn_lost(CONN_DESYNC);
		return 1;
	}
	if (d < 0) { /* a retransmission: only what follows in_seq is new */
		if ((__u32)-d >= plen)
			return 0;
		off = (__u32)-d;
	}
	if (__sync_val_compare_and_swap(&c->in_busy, 0, 1)) { /* another CPU has this direction */
		conn_lost(CONN_DESYNC);
		return 1;
	}
	s->ws.stream = 1;
	s->ws.exact = !(c->flags & CONN_INEXACT);
	s->ws.desync = 0;
	s->ws.cmds = c->in_cmds;
	part = c->in_part_len;
	if (part > PART_MAX || part_io(DIR_IN, part, 0))
		goto unsure;
	s->ws.skip = c->in_skip;
	for (__u32 i = 0; i < CHUNKS_MAX; i++) {
		__u64 n;
		__u32 end;
		int r;
		if (off >= plen) {
			done = 1;
			break;
		}
		if (s->ws.skip) { /* the rest of a data block (a helper for this costs the verifier 1.6x) */
			n = plen - off;
			if (n > s->ws.skip)
				n = s->ws.skip;
			s->ws.skip -= n;
			off += n;
			continue;
		}
		n = plen - off;
		if (n > CHUNK)
			n = CHUNK;
		barrier_var(n);
		if (n == 0 || n > CHUNK)
			goto unsure;
		part &= 511;
		if (bpf_xdp_load_bytes(ctx, payload_off + off, &s->buf[part], n))
			goto unsure;
		end = part + n;
		if (part == 0 && BUF(s, 0) == BIN_REQ_MAGIC) {
			/* binary protocol: requests framed by their body length; quiet commands leave
			 * answers out, so writes fall back to the quarantine */
			__s64 rest = invalidate_binary(0, end);
			if (rest < 0)
				goto lost; /* everything was invalidated */
			s->ws.desync = 1;
			s->ws.skip = (__u32)rest;
			off += n;
			continue;
		}
		r = invalidate_mutations(0, end);
		if (r < 0)
			goto lost; /* not sure of the stream: everything was invalidated */
		r = stream_carry(r, end);
		if (r < 0)
			goto unsure; /* a line longer than we carry */
		part = r;
		off += n;
	}
	if (!done || part_io(DIR_IN, part, 1))
		goto unsure; /* a segment longer than we walk */
	if (s->ws.desync)
		conn_lost(CONN_INEXACT);
	c->in_part_len = part;
	c->in_cmds = s->ws.cmds;
	c->in_skip = s->ws.skip;
	c->in_seq = seq + plen;
	c->in_busy = 0;
	return 0;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
lost:
	c->in_busy = 0;
	conn_lost(CONN_DESYNC);
	return 0;
}

/* What XDP learned of each interface's frames (per CPU, slot ifindex % 64): the smallest growth
 * a frame could not take. A reply needing as much goes to TC ingress without being composed here
 * first. Forgotten after a second, so one odd frame cannot send replies the slow way for long. */
struct xdp_room {
	__u32 ifindex;
	__u32 fail_min;        /* smallest growth that failed */
	__u64 until_ns;        /* valid until */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xdp_room);
	__uint(max_entries, 64);
} xdp_room SEC(".maps");

#define ROOM_RELEARN_NS 1000000000ULL

/* The longest reply (UDP payload) the frame is known to take, or DGRAM_MAX if nothing is known. */
static __always_inline __u32 frame_room(struct xdp_md *ctx, struct pkt *p, __u64 now)
{
	__u32 slot = ctx->ingress_ifindex & 63, frame_len;
	struct xdp_room *r = bpf_map_lookup_elem(&xdp_room, &slot);

	if (!r || r->ifindex != ctx->ingress_ifindex || now >= r->until_ns || !r->fail_min)
		return DGRAM_MAX;
	frame_len = (void *)(long)ctx->data_end - (void *)(long)ctx->data;
	barrier_var(frame_len); /* else clang adds to pkt_end, which the verifier refuses */
	/* a reply of out_len bytes grows the frame by payload_off + out_len - frame_len */
	if (frame_len + r->fail_min - 1 < p->payload_off)
		return 0;
	return frame_len + r->fail_min - 1 - p->payload_off;
}

static __always_inline void learn_room(struct xdp_md *ctx, __u32 delta, __u64 now)
{
	__u32 slot = ctx->ingress_ifindex & 63;
	struct xdp_room *r = bpf_map_lookup_elem(&xdp_room, &slot);

	if (!r)
		return;
	if (r->ifindex == ctx->ingress_ifindex && now < r->until_ns) {
		if (delta < r->fail_min)
			r->fail_min = delta;
		return;
	}
	r->ifindex = ctx->ingress_ifindex;
	r->fail_min = delta;
	r->until_ns = now + ROOM_RELEARN_NS;
}

/* Turns the request frame into the reply held in scratch.out[0, out_len) (frame header included),
 * growing it at the tail or, where the driver leaves no tailroom (veth, generic XDP), at the head
 * with the headers moved forward. Returns 0; or, if the frame cannot take the reply (the packet is
 * then unchanged), the growth it needed (> 0), or -1 for other failures. */
static __always_inline int build_reply(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				       __u32 out_len)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 mc_off = p->payload_off;               /* memcached frame header */
	__u32 frame_len = data_end - data;
	__u32 new_len = mc_off + out_len;
	int delta = (int)new_len - (int)frame_len;
	__u32 pseudo, udp_sum;
	int ck_off;

	if (mc_off < 42 || mc_off > 120 || out_len > DGRAM_MAX || out_len < UDP_HDR_MC)
		return -1;
	if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta) != 0) {
		if (delta < 0)
			return -1;
		if (delta > 512)
			return delta;
		if (bpf_xdp_load_bytes(ctx, 0, s->hdr, mc_off))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -delta))
			return delta;
		if (bpf_xdp_store_bytes(ctx, 0, s->hdr, mc_off))
			return -1; /* cannot happen: the head just grew by delta */
	}
	/* out_len is 8..1400 (checked above); restate it so the verifier sees the bound */
	barrier_var(out_len);
	__u32 n = ((out_len - 1) & 2047) + 1;
	if (bpf_xdp_store_bytes(ctx, mc_off, s->out, n))
		return -1;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ck_off = reply_headers(data, data_end, p, out_len, &pseudo, &udp_sum);
	if (ck_off < 0)
		return -1;
	__u16 *ck = data + (ck_off & 127);
	if ((void *)(ck + 1) > data_end)
		return -1;
	__u16 c = csum_fold(csum_add(csum_add(pseudo, udp_sum), reply_payload_sum(s, out_len)));
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

static __always_inline int handle_get(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				      __u32 plen, __u16 req_id, __u32 want_cas)
{
	int n = parse_get_keys(want_cas ? 5 : 4, plen), out, r;
	__u64 now = bpf_ktime_get_ns(); /* one clock read for every key of the request */
	__u32 bound, limit;

	if (n <= 0 || p->ip_opts) {
		stat_inc(ST_PASSED); /* not in the form the kernel answers: the server decides */
		if (n > 0)
			remember_request(p, req_id);
		return XDP_PASS;
	}
	bound = reply_bound(p);
	if (bound == 0) {
		stat_inc(ST_REFUSED);
		remember_request(p, req_id);
		return XDP_PASS;
	}
	limit = frame_room(ctx, p, now);
	out = compose_reply(n, req_id, want_cas, limit < bound ? limit : bound, now);
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
	r = build_reply(ctx, s, p, out);
	if (r == 0) {
		stat_inc(ST_HITS);
		return XDP_TX;
	}
	if (r > 0)
		learn_room(ctx, r, now);
	return hand_to_tc(ctx, p, req_id, INK_META_MAGIC);
}

static __always_inline int xdp_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct pkt p = {};
	struct scratch *s;
	__u32 plen;
	__u16 port;

	if (parse_packet(data, data_end, &p) != PARSE_OK) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	port = bpf_ntohs(p.dport);
	if (!bpf_map_lookup_elem(&ports, &port)) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	s = get_scratch();
	if (!s) {
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}

	if (p.proto == IPPROTO_TCP) {
		struct tcphdr *tcp = data + (p.l4_off & 127);
		__u32 seq;

		if (coop_mode) { /* the server invalidates what it writes */
			stat_inc(ST_PASSED);
			return XDP_PASS;
		}

		if ((void *)(tcp + 1) > data_end) {
			stat_inc(ST_ERRORS);
			invalidate_all(ST_INVAL_UNPARSABLE);
			return XDP_PASS;
		}
		seq = bpf_ntohl(tcp->seq);
		conn_key(s, &p, 1);
		if (tcp->syn && !tcp->ack) {
			conn_open(seq + 1);
			return XDP_PASS;
		}
		if (tcp->rst) {
			/* the server may still apply what it read: its writes fall back to the quarantine */
			conn_close(SETTLE_LOST);
			return XDP_PASS;
		}
		plen = p.payload_len;
		if (plen == 0) {
			stat_inc(ST_PASSED);
			return XDP_PASS;
		}
		s->ws.udp = 0;
		if (!ingress_stream(ctx, p.payload_off, plen, seq))
			return XDP_PASS;
		/* a connection not followed (seen mid-stream, or no room to follow it): the segment is
		 * walked on its own, writes fall back to the quarantine */
		s->ws.stream = 0;
		s->ws.exact = 0;
		if (plen > SCRATCH_LEN)
			plen = SCRATCH_LEN; /* commands beyond are unseen: the parser then cannot be sure */
		if (bpf_xdp_load_bytes(ctx, p.payload_off, s->buf, plen)) {
			invalidate_all(ST_INVAL_UNPARSABLE);
			stat_inc(ST_ERRORS);
			return XDP_PASS;
		}
		if (plen < p.payload_len)
			invalidate_all(ST_INVAL_UNPARSABLE);
		else if (BUF(s, 0) == BIN_REQ_MAGIC)
			invalidate_binary(0, plen);
		else
			invalidate_mutations(0, plen);
		return XDP_PASS;
	}

	/* UDP: memcached frame header, then one request. */
	if (p.payload_len < UDP_HDR_MC) {
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}
	plen = p.payload_len - UDP_HDR_MC;
	__u16 *fh = data + (p.payload_off & 127);
	if ((void *)(fh + 4) > data_end) {
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}
	__u16 req_id = fh[0];
	if (fh[1] != 0 || fh[2] != bpf_htons(1) || plen == 0 || plen > PAYLOAD_MAX) {
		/* memcached refuses multi-datagram requests without executing them */
		stat_inc(ST_ERRORS);
		return XDP_PASS;
	}
	if (bpf_xdp_load_bytes(ctx, p.payload_off + UDP_HDR_MC, s->buf, plen)) {
		stat_inc(ST_ERRORS);
		invalidate_all(ST_INVAL_UNPARSABLE);
		return XDP_PASS;
	}
	if (plen >= 7 && buf_eq(s, 0, "get ", 4))
		return handle_get(ctx, s, &p, plen, req_id, 0);
	if (plen >= 8 && buf_eq(s, 0, "gets ", 5))
		return handle_get(ctx, s, &p, plen, req_id, 1);
	if (plen >= 6 && buf_eq(s, 0, "mg ", 3) && !p.ip_opts) {
		__u32 bound = reply_bound(&p);
		int r = bound ? compose_mg(plen, bound, bpf_ktime_get_ns()) : -1;
		if (r > 0) {
			__u16 fh2[3] = { 0, bpf_htons(1), 0 };
			__builtin_memcpy(&s->out[0], &req_id, 2);
			__builtin_memcpy(&s->out[2], fh2, 6);
			if (build_reply(ctx, s, &p, r) == 0) {
				stat_inc(ST_HITS);
				return XDP_TX;
			}
			stat_inc(ST_TOO_BIG); /* no room in this frame: the server answers */
		} else if (r == LK_MISS || r == LK_EXPIRED) {
			stat_inc(r == LK_EXPIRED ? ST_EXPIRED : ST_MISSES);
		} else if (!bound) {
			stat_inc(ST_REFUSED);
		}
		/* not answered here: mg with T, N, E or R writes, so it is walked as a command */
	}
	if (coop_mode) {
		stat_inc(ST_PASSED);
		return XDP_PASS;
	}
	/* a UDP request that is one write is settled by the answer echoing its request id; other
	 * writes over UDP fall back to the quarantine */
	s->ws.stream = 0;
	s->ws.exact = 1;
	s->ws.udp = 1;
	__builtin_memcpy(s->ws.rk.addr, p.saddr, 16);
	s->ws.rk.port = p.sport;
	s->ws.rk.req_id = req_id;
	s->ws.rk.pad = 0;
	if (BUF(s, 0) == BIN_REQ_MAGIC) {
		s->ws.exact = 0;
		invalidate_binary(0, plen);
	} else {
		invalidate_mutations(0, plen);
	}
	s->ws.udp = 0;
	stat_inc(ST_PASSED);
	return XDP_PASS;
}

SEC("xdp")
int inkcache_xdp(struct xdp_md *ctx)
{
	int act = xdp_main(ctx);

	/* what goes to the server: to inkcached's AF_XDP sockets if it has any (xsk.h) */
	return act == XDP_PASS ? xsk_redirect(ctx) : act;
}
