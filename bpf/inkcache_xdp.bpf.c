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

/* Drops key k's item from the cache (always safe: the server still has it). */
static __always_inline void evict_key(struct scratch *s, __u32 k)
{
	__u32 klen = s->klen[k & 31];

	if (klen && klen <= KEY_MAX)
		table_evict(key_hash(s->koff[k & 31], klen), klen);
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
		} else if (BUF(s, 0) == BIN_REQ_MAGIC) {
			invalidate_binary(0, plen);
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
	if (BUF(s, 0) == BIN_REQ_MAGIC)
		invalidate_binary(0, plen);
	else
		invalidate_mutations(plen);
	stat_inc(ST_PASSED);
	return XDP_PASS;
}
