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
static __always_inline void flush_command(__u32 tend, int eol)
{
	struct ink_global *g = global_state();
	__u64 now = bpf_ktime_get_ns(), until = 0;

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

/* Walks the commands of a request segment (TCP or UDP) and invalidates every key a command may
 * change, recording the expiry it sets. Anything it cannot parse with certainty invalidates the
 * whole cache. */
__noinline int invalidate_mutations(__u32 len)
{
	struct scratch *s = get_scratch();
	__u32 pos = 0;

	if (!s)
		return -1;
	for (__u32 c = 0; c < MAX_CMDS; c++) {
		int tend, eol, kend, cmd, t1, t2, t3, bytes = 0;
		__u32 kpos, klen;
		__u64 exp;

		if (pos >= len)
			return 0;
		eol = scan_eol(pos, len);
		tend = scan_token(pos, len);
		if (tend < 0 || (__u32)tend <= pos)
			goto unsure; /* leading space or empty line: memcached would say ERROR, but be safe */
		cmd = classify(s, pos, (__u32)tend - pos);
		if (cmd == CMD_UNKNOWN)
			goto unsure;
		if (cmd == CMD_HARMLESS || cmd == CMD_GET) {
			if (eol < 0)
				return 0; /* rest of a read-only line comes in the next segment */
			pos = eol + 1;
			continue;
		}
		if (cmd == CMD_FLUSH) {
			flush_command(tend, eol);
			if (eol < 0)
				return 0;
			pos = eol + 1;
			continue;
		}
		kpos = tend + 1;
		if (cmd == CMD_GAT) { /* gat <exptime> <key>* */
			int xend = scan_token(kpos, len);
			if (xend < 0 || eol < 0 || (__u32)xend >= (__u32)eol)
				goto unsure;
			exp = exp_from_token(kpos, xend);
			kpos = xend + 1;
			for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
				kend = scan_token(kpos, eol);
				if (kend < 0 || (__u32)kend <= kpos)
					break;
				if ((__u32)kend - kpos > KEY_MAX)
					goto unsure;
				invalidate_key(kpos, (__u32)kend - kpos, exp);
				kpos = kend + 1;
				if (kpos >= (__u32)eol)
					break;
			}
			if (kpos < (__u32)eol - 1)
				goto unsure; /* more keys than we walked */
			pos = eol + 1;
			continue;
		}
		/* One key as the second token. If the line is cut before the key ends we cannot know
		 * the key. */
		if ((__u32)tend >= len || BUF(s, tend) != ' ')
			goto unsure;
		kend = scan_token(kpos, len);
		if (kend < 0 || (__u32)kend <= kpos || (__u32)kend >= len || (__u32)kend - kpos > KEY_MAX)
			goto unsure;
		klen = (__u32)kend - kpos;
		if (eol < 0) {
			/* the key is known, the rest of the command comes in the next segment */
			exp = cmd == CMD_DELETE || cmd == CMD_META_DEL ? HINT_DELETE :
			      cmd == CMD_ARITH ? HINT_KEEP : EXP_UNKNOWN;
			invalidate_key(kpos, klen, exp);
			return 0;
		}
		switch (cmd) {
		case CMD_STORE: /* <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply] */
			t1 = scan_token(kend + 1, eol);
			t2 = t1 < 0 ? -1 : scan_token(t1 + 1, eol);
			t3 = t2 < 0 ? -1 : scan_token(t2 + 1, eol);
			if (t3 < 0)
				goto unsure;
			exp = exp_from_token(t1 + 1, t2);
			bytes = parse_uint(t2 + 1, t3);
			break;
		case CMD_META_SET: /* ms <key> <datalen> <flag>* */
			t1 = scan_token(kend + 1, eol);
			if (t1 < 0)
				goto unsure;
			bytes = parse_uint(kend + 1, t1);
			exp = meta_exp(t1 + 1, eol, EXP_NEVER);
			break;
		case CMD_TOUCH: /* touch <key> <exptime> [noreply] */
			t1 = scan_token(kend + 1, eol);
			exp = t1 < 0 ? EXP_UNKNOWN : exp_from_token(kend + 1, t1);
			break;
		case CMD_DELETE:
		case CMD_META_DEL:
			exp = HINT_DELETE;
			break;
		case CMD_ARITH:
			exp = HINT_KEEP;
			break;
		default: /* mg, ma */
			exp = meta_exp(kend + 1, eol, HINT_KEEP);
			break;
		}
		invalidate_key(kpos, klen, exp);
		if (cmd == CMD_STORE || cmd == CMD_META_SET) {
			if (bytes < 0)
				goto unsure;
			pos = eol + 1 + bytes + 2; /* skip the data block */
			if (pos > len)
				return 0; /* the data block continues in the next segment */
			continue;
		}
		pos = eol + 1;
	}
	if (pos >= len)
		return 0;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
	return 1;
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
static __always_inline int hand_to_tc(struct xdp_md *ctx, struct pkt *p, __u16 req_id)
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
	*mark = INK_META_MAGIC;
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
			remember_request(p, req_id);
			return XDP_PASS;
		}
		return hand_to_tc(ctx, p, req_id); /* known not to fit: not even composed */
	}
	r = build_reply(ctx, s, p, out);
	if (r == 0) {
		stat_inc(ST_HITS);
		return XDP_TX;
	}
	if (r > 0)
		learn_room(ctx, r, now);
	return hand_to_tc(ctx, p, req_id);
}

SEC("xdp")
int inkcache_xdp(struct xdp_md *ctx)
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
		plen = p.payload_len;
		if (plen == 0) {
			stat_inc(ST_PASSED);
			return XDP_PASS;
		}
		if (plen > SCRATCH_LEN)
			plen = SCRATCH_LEN; /* commands beyond are unseen: the parser then cannot be sure */
		if (bpf_xdp_load_bytes(ctx, p.payload_off, s->buf, plen)) {
			invalidate_all(ST_INVAL_UNPARSABLE);
			stat_inc(ST_ERRORS);
			return XDP_PASS;
		}
		if (plen < p.payload_len) {
			invalidate_all(ST_INVAL_UNPARSABLE);
		} else {
			invalidate_mutations(plen);
		}
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
	invalidate_mutations(plen);
	stat_inc(ST_PASSED);
	return XDP_PASS;
}
