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
#include "binproto.h"
#include "stream.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Splits "get <key>[ <key>...]\r\n" or "gets ..." (the keys starting at `pos`) into keys. Returns
 * the number of keys, or -1 if the request is not in the canonical form the kernel answers (such
 * requests pass to the server, which has the last word on them). */
__noinline int parse_get_keys(__u32 pos, __u32 len)
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

/* Drops key k's item from the cache (always safe: the server still has it). */
static __always_inline void evict_key(struct scratch *s, __u32 k)
{
	__u32 klen = s->klen[k & 31];

	if (klen && klen <= KEY_MAX)
		table_evict(key_hash(s->koff[k & 31], klen), klen);
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

/* A walk over scratch.buf[pos, len): where it stopped (the start of a line not complete yet, or
 * len), or -1 when it could not be sure (then everything was invalidated). */
struct walk {
	__u32 pos;
	__u32 len;
	int ret;
	__u32 pad;
};

static __always_inline long walk_stop(struct walk *w, int ret)
{
	w->ret = ret;
	return 1;
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
		if (s->ws.skip) { /* the rest of a data block */
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
		if (end - (__u32)r > PART_MAX)
			goto unsure; /* a line longer than we carry */
		buf_shift(r, end - r);
		part = end - r;
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

static __always_inline void remember_request(struct pkt *p, __u16 req_id)
{
	struct ink_req_key k = {};
	struct ink_req_val v = { .ts_ns = bpf_ktime_get_ns() };

	__builtin_memcpy(k.addr, p->saddr, 16);
	k.port = p->sport;
	k.req_id = req_id;
	bpf_map_update_elem(&pending, &k, &v, BPF_ANY);
}

static __always_inline int allowed(struct pkt *p)
{
	struct ink_lpm_key k = { .prefixlen = 128 };

	__builtin_memcpy(k.addr, p->saddr, 16);
	return bpf_map_lookup_elem(&allow, &k) != NULL;
}

/* Remembers the smallest growth the frame could not take, so that fills stop caching items whose
 * replies XDP cannot send (their hits would only cost a copy and pass to the server anyway). */
static __always_inline void note_grow_failure(int delta)
{
	struct ink_global *g = global_state();

	if (g && delta > 0 && (g->grow_fail_min == 0 || (__u32)delta < g->grow_fail_min))
		g->grow_fail_min = delta;
}

/* Turns the request frame into the reply held in scratch.out[0, out_len) (frame header included)
 * and swaps the addresses. Returns 0, or -1 if the frame cannot take the reply (the packet is then
 * unchanged). */
static __always_inline int build_reply(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				       __u32 out_len)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 mc_off = p->payload_off;               /* memcached frame header */
	__u32 frame_len = data_end - data;
	__u32 new_len = mc_off + out_len;
	int delta = (int)new_len - (int)frame_len;
	__u32 ulen = 8 + out_len, sum = 0;

	if (mc_off < 42 || mc_off > 120 || out_len > DGRAM_MAX || out_len < UDP_HDR_MC)
		return -1;
	if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta) != 0) {
		/* No tailroom (veth, generic XDP): grow at the head and move the headers forward. */
		if (delta < 0 || delta > 512) {
			note_grow_failure(delta);
			return -1;
		}
		if (bpf_xdp_load_bytes(ctx, 0, s->hdr, mc_off))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -delta)) {
			note_grow_failure(delta);
			return -1;
		}
		if (bpf_xdp_store_bytes(ctx, 0, s->hdr, mc_off))
			return -1; /* cannot happen: the head just grew by delta */
	}
	/* out_len is 8..1400 (checked above); restate it so the verifier sees the bound */
	barrier_var(out_len);
	__u32 n = ((out_len - 1) & 2047) + 1;
	if (bpf_xdp_store_bytes(ctx, mc_off, s->out, n))
		return -1;

	/* UDP checksum over frame header + items; zero-pad to a multiple of 4 for bpf_csum_diff. */
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

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);

	struct udphdr *udp;
	if (!p->ipv6) {
		struct iphdr *ip = data + (p->l3_off & 63);
		if ((void *)(ip + 1) > data_end)
			return -1;
		__be32 a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tot_len = bpf_htons(sizeof(*ip) + ulen);
		ip->ttl = 64;
		ip->check = 0;
		ip->check = csum_fold(csum_words((__u16 *)ip, sizeof(*ip) / 2));
		sum = csum_add(sum, csum_words((__u16 *)&ip->saddr, 4));
		udp = (void *)(ip + 1);
	} else {
		struct ipv6hdr *ip6 = data + (p->l3_off & 63);
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		struct in6_addr a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->payload_len = bpf_htons(ulen);
		ip6->hop_limit = 64;
		sum = csum_add(sum, csum_words((__u16 *)&ip6->saddr, 16));
		udp = (void *)(ip6 + 1);
	}
	if ((void *)(udp + 1) > data_end)
		return -1;
	__be16 port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	udp->len = bpf_htons(ulen);
	udp->check = 0;
	/* pseudo header protocol + length, then the UDP header itself */
	sum = csum_add(sum, bpf_htons(IPPROTO_UDP) + udp->len);
	sum = csum_add(sum, csum_words((__u16 *)udp, 4));
	__u16 ck = csum_fold(sum);
	udp->check = ck ? ck : 0xffff;
	return 0;
}

static __always_inline int handle_get(struct xdp_md *ctx, struct scratch *s, struct pkt *p,
				      __u32 plen, __u16 req_id, __u32 want_cas)
{
	int n = parse_get_keys(want_cas ? 5 : 4, plen);
	__u32 out = UDP_HDR_MC;

	if (n <= 0) {
		stat_inc(ST_PASSED); /* not in the form the kernel answers: the server decides */
		return XDP_PASS;
	}
	if (!allowed(p)) {
		stat_inc(ST_REFUSED);
		remember_request(p, req_id);
		return XDP_PASS;
	}
	__u64 now = bpf_ktime_get_ns(); /* one clock read for every key of the request */

	for (__u32 k = 0; k < MAX_GET_KEYS; k++) {
		int r;
		if (k >= (__u32)n)
			break;
		r = table_lookup(k, out, now, want_cas);
		if (r == LK_TOO_BIG) {
			stat_inc(ST_TOO_BIG);
			if (n == 1)
				return XDP_PASS; /* its reply would not be stored: don't remember it */
			remember_request(p, req_id); /* the other keys may still fill */
			return XDP_PASS;
		}
		if (r < 0) {
			if (r == LK_EXPIRED)
				stat_inc(ST_EXPIRED);
			stat_inc(r == LK_FULL ? ST_TOO_BIG : ST_MISSES);
			remember_request(p, req_id);
			return XDP_PASS;
		}
		out += r;
	}
	if (out + 5 > UDP_HDR_MC + PAYLOAD_MAX) {
		stat_inc(ST_TOO_BIG);
		remember_request(p, req_id);
		return XDP_PASS;
	}
	__builtin_memcpy(&s->out[out & 2047], "END\r\n", 5);
	out += 5;
	/* frame header: request id echoed, sequence 0, one datagram, reserved 0 */
	__builtin_memcpy(&s->out[0], &req_id, 2);
	__u16 hdr[3] = { 0, bpf_htons(1), 0 };
	__builtin_memcpy(&s->out[2], hdr, 6);

	if (p->ip_opts || build_reply(ctx, s, p, out) != 0) {
		stat_inc(ST_TOO_BIG);
		if (n == 1)
			evict_key(s, 0); /* its reply never fits this frame: free the way */
		remember_request(p, req_id);
		return XDP_PASS;
	}
	stat_inc(ST_HITS);
	return XDP_TX;
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
		struct tcphdr *tcp = data + (p.l4_off & 127);
		__u32 seq;

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
	/* UDP writes are not answered in order: they fall back to the quarantine */
	s->ws.stream = 0;
	s->ws.exact = 0;
	if (BUF(s, 0) == BIN_REQ_MAGIC)
		invalidate_binary(0, plen);
	else
		invalidate_mutations(0, plen);
	stat_inc(ST_PASSED);
	return XDP_PASS;
}
