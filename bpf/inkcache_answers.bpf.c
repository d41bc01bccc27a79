// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The server's answers, seen as its own sockets send them (cgroup_skb egress on the root cgroup,
 * kept to the server's namespace and ports: only what the local server sends, on any interface,
 * loopback included). UDP replies to the gets XDP passed fill the cache when they provably cannot
 * predate a write (table.h); answers to writes settle them (coherence.h): on TCP by counting the
 * answers of each followed connection, on UDP by the request id they echo. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "maps.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"
#include "stream.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Parses the item "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n" at scratch.buf[off, end)
 * and installs it if allowed (with its CAS, so that both get and gets can be answered). Returns
 * the item's length (to step to the next one), or -1 if it is malformed. */
__noinline int fill_item(__u32 off, __u32 end, __u64 req_ts)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	int kend, fend, bend, cend, eol, bytes;
	__u32 kpos, klen, item_len, hdr, cas = 0, skip = 0;
	__u64 h, now, exp;

	if (!s || !g || off >= end || end > SCRATCH_LEN)
		return -1;
	if (!buf_eq(s, off, "VALUE ", 6))
		return -1;
	kpos = off + 6;
	kend = scan_token(kpos, end);
	if (kend < 0 || (__u32)kend <= kpos || (__u32)kend >= end)
		return -1;
	klen = (__u32)kend - kpos;
	if (klen > KEY_MAX || BUF(s, kend) != ' ')
		return -1;
	if (s->dirty)
		skip = 1; /* a key the XDP side never answers: don't store it */
	fend = scan_token(kend + 1, end);
	if (fend < 0 || (__u32)fend >= end || BUF(s, fend) != ' ')
		return -1;
	bend = scan_token(fend + 1, end);
	if (bend < 0 || (__u32)bend >= end)
		return -1;
	bytes = parse_uint(fend + 1, bend);
	if (bytes < 0)
		return -1;
	eol = bend;
	if (BUF(s, bend) == ' ') { /* "gets" reply: " <cas>" */
		cend = scan_token(bend + 1, end);
		if (cend < 0 || (__u32)cend >= end || (__u32)cend - bend > 21 ||
		    !all_digits(bend + 1, cend))
			return -1;
		cas = (__u32)cend - bend;
		eol = cend;
	}
	if (BUF(s, eol) != '\r' || BUF(s, eol + 1) != '\n')
		return -1;
	hdr = (__u32)eol + 2 - off;
	item_len = hdr + (__u32)bytes + 2;
	if (off + item_len > end || item_len < 8)
		return -1;
	if (BUF(s, off + item_len - 2) != '\r' ||
	    BUF(s, off + item_len - 1) != '\n')
		return -1;
	if (skip || item_len > ITEM_CAP || item_len - cas > ITEM_MAX) {
		stat_inc(ST_FILL_SKIPPED);
		return item_len;
	}
	h = key_hash(kpos, klen);
	now = bpf_ktime_get_ns();
	/* expiry: learned from the last mutation of this key, else bounded by max_age */
	exp = fill_expiry(kpos, klen, h, now, g);
	if (exp <= now) {
		stat_inc(ST_FILL_SKIPPED);
		return item_len;
	}
	s->fa.h = h;
	s->fa.req_ts = req_ts;
	s->fa.exp = exp;
	s->fa.klen = klen;
	s->fa.off = off;
	s->fa.len = item_len;
	s->fa.hdr = hdr;
	s->fa.cas = cas;
	s->fa.flags = s->hint.meta_ok ? ITEM_META_OK : 0;
	stat_inc(table_fill() ? ST_FILLS : ST_FILL_SKIPPED);
	return item_len;
}

/* One answer line at w->pos (a bpf_loop callback). A VALUE line is part of a retrieval answer
 * (its data skipped by length; END closes the answer), STAT, ITEM and PREFIX lines part of a stats
 * answer; any other line closes an answer (VA with its data). An error may answer a line that
 * was not a command (a bad data block): the count can no longer be trusted. */
static long walk_answer(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct scratch *s = get_scratch();
	__u32 pos = w->pos, len = w->len, n;
	int eol, tend, t1, t2, t3, bytes = -1;

	if (!s)
		return walk_stop(w, -1);
	if (pos >= len)
		return walk_stop(w, len);
	eol = scan_eol(pos, len);
	if (eol < 0)
		return walk_stop(w, pos); /* the rest of the line comes in the next segment */
	tend = scan_token(pos, eol);
	if (tend < 0)
		return walk_stop(w, -1);
	n = (__u32)tend - pos;
	w->pos = eol + 1;
	if (n == 5 && buf_eq(s, pos, "VALUE", 5)) { /* VALUE <key> <flags> <bytes>[ <cas>] */
		t1 = scan_token(tend + 1, eol);
		t2 = t1 < 0 ? -1 : scan_token(t1 + 1, eol);
		t3 = t2 < 0 ? -1 : scan_token(t2 + 1, eol);
		if (t3 >= 0)
			bytes = parse_uint(t2 + 1, t3);
	} else if (n == 2 && buf_eq(s, pos, "VA", 2)) { /* VA <size> <flag>* */
		t1 = scan_token(tend + 1, eol);
		if (t1 >= 0)
			bytes = parse_uint(tend + 1, t1);
		s->ws.answers++;
	} else if ((n == 4 && (buf_eq(s, pos, "STAT", 4) || buf_eq(s, pos, "ITEM", 4))) ||
		   (n == 6 && buf_eq(s, pos, "PREFIX", 6))) {
		return 0;
	} else if ((n == 5 && buf_eq(s, pos, "ERROR", 5)) ||
		   (n == 12 && (buf_eq(s, pos, "CLIENT_ERROR", 12) ||
				buf_eq(s, pos, "SERVER_ERROR", 12)))) {
		s->ws.desync = 1;
		return walk_stop(w, len);
	} else {
		s->ws.answers++;
		return 0;
	}
	if (bytes < 0) {
		s->ws.desync = 1;
		return walk_stop(w, len);
	}
	{
		__u32 next = eol + 1 + (__u32)bytes + 2;
		if (next > len) {
			s->ws.skip = next - len;
			return walk_stop(w, len);
		}
		w->pos = next;
	}
	return 0;
}

#define WALK_MAX 512

/* Counts the answers in scratch.buf[0, len) into scratch.ws.answers; returns where it stopped. */
__noinline int count_answers(__u32 len)
{
	struct scratch *s = get_scratch();
	struct walk w = { .pos = 0, .len = len, .ret = -2 };

	if (!s)
		return -1;
	s->ws.skip = 0;
	bpf_loop(WALK_MAX, walk_answer, &w, 0);
	if (w.ret == -2) {
		s->ws.desync = 1;
		return len;
	}
	return w.ret;
}

/* The server's bytes on a followed connection (the segment with sequence number `seq`, plen bytes
 * at payload_off): counts its answers and settles the writes they answer. */
__noinline int egress_stream(struct __sk_buff *skb, __u32 payload_off, __u32 plen, __u32 seq)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;
	__u32 off = 0, part, done = 0;
	int d;

	if (!s || !g || !skb)
		return 0;
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c || c->gen != (__u32)g->gen || (c->flags & (CONN_DESYNC | CONN_INEXACT)))
		return 0;
	if (!(c->flags & CONN_OUT_OK))
		goto lost; /* the server's first bytes were not seen */
	d = (int)(seq - c->out_seq);
	if (d > 0)
		goto lost;
	if (d < 0) {
		if ((__u32)-d >= plen)
			return 0;
		off = (__u32)-d;
	}
	if (__sync_val_compare_and_swap(&c->out_busy, 0, 1))
		goto lost;
	s->ws.desync = 0;
	s->ws.answers = c->out_answers;
	part = c->out_part_len;
	if (part > PART_MAX || part_io(DIR_OUT, part, 0))
		goto release_lost;
	s->ws.skip = c->out_skip;
	for (__u32 i = 0; i < CHUNKS_MAX; i++) {
		__u64 n;
		__u32 end;
		int r;
		if (off >= plen) {
			done = 1;
			break;
		}
		if (s->ws.skip) { /* the rest of a value (a helper for this costs the verifier 1.6x) */
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
		if (n == 0)
			goto release_lost;
		n = chunk_len(n);
		part &= 511;
		if (bpf_skb_load_bytes(skb, payload_off + off, &s->buf[part], n))
			goto release_lost;
		end = part + n;
		r = count_answers(end);
		if (r < 0 || s->ws.desync)
			goto release_lost;
		r = stream_carry(r, end);
		if (r < 0)
			goto release_lost; /* a line longer than we carry */
		part = r;
		off += n;
	}
	if (!done || part_io(DIR_OUT, part, 1))
		goto release_lost;
	c->out_part_len = part;
	c->out_answers = s->ws.answers;
	c->out_skip = s->ws.skip;
	c->out_seq = seq + plen;
	c->out_busy = 0;
	/* the server applied every write it has now answered */
	settle(s->ws.answers, SETTLE_ANSWERED);
	return 0;
release_lost:
	c->out_busy = 0;
lost:
	conn_lost(CONN_INEXACT);
	return 0;
}

/* A TCP segment from the server. */
static __always_inline void tcp_answers(struct __sk_buff *skb, struct scratch *s, struct pkt *p)
{
	struct tcphdr tcp;
	struct ink_conn *c;

	if (bpf_skb_load_bytes(skb, p->l4_off, &tcp, sizeof(tcp)))
		return;
	conn_key(s, p, 0);
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c)
		return;
	if (p->payload_len)
		egress_stream(skb, p->payload_off, p->payload_len, bpf_ntohl(tcp.seq));
	if (tcp.fin || tcp.rst)
		conn_close(SETTLE_CLOSED); /* the server applies nothing more from this connection */
}

/* One UDP datagram from the server, plen bytes of payload at `off` (the client is in
 * scratch.ws.rk): fills the cache from a reply to a get XDP passed, or settles the UDP write it
 * answers. */
__noinline int udp_reply(struct __sk_buff *skb, __u32 off, __u32 plen)
{
	struct scratch *s = get_scratch();
	struct ink_req_val *rv;
	__u32 at;
	__u64 req_ts;

	if (!s || !skb)
		return 0;
	if (plen < UDP_HDR_MC + 3 || plen > DGRAM_MAX) /* "0\r\n", incr's shortest answer */
		return 0;
	/* the frame header and the first word first: most replies stop here */
	__builtin_memset(&s->buf[UDP_HDR_MC], 0, 8);
	if (bpf_skb_load_bytes(skb, off, s->buf, plen < UDP_HDR_MC + 6 ? UDP_HDR_MC + 3 :
								      UDP_HDR_MC + 6))
		return 0;
	/* one-datagram replies only: seq 0, total 1 */
	if (s->buf[2] || s->buf[3] || s->buf[4] || s->buf[5] != 1)
		return 0;
	__builtin_memcpy(&s->ws.rk.req_id, s->buf, 2);
	if (!buf_eq(s, UDP_HDR_MC, "VALUE ", 6)) {
		/* memcached answers a UDP multi-get with one message per key and END in the last:
		 * the request is done (a plain miss too) */
		if (plen == UDP_HDR_MC + 5 && buf_eq(s, UDP_HDR_MC, "END\r\n", 5))
			bpf_map_delete_elem(&pending, &s->ws.rk);
		else /* STORED, DELETED, ...: the answer echoes the request id of a UDP write */
			settle_udp();
		return 0;
	}
	rv = bpf_map_lookup_elem(&pending, &s->ws.rk);
	if (!rv) {
		settle_udp(); /* not a get the XDP side passed: a gat's answer? */
		return 0;
	}
	req_ts = rv->ts_ns;
	barrier_var(plen);
	if (bpf_skb_load_bytes(skb, off, s->buf, ((plen - 1) & 2047) + 1))
		return 0;
	/* the request stays remembered until the message that ends its reply */
	if (buf_eq(s, plen - 5, "END\r\n", 5))
		bpf_map_delete_elem(&pending, &s->ws.rk);

	at = UDP_HDR_MC;
	for (__u32 i = 0; i < MAX_GET_KEYS; i++) {
		int r;
		if (at + 5 >= plen)
			break;
		r = fill_item(at, plen, req_ts);
		if (r <= 0)
			break;
		at += r;
	}
	return 0;
}

#define GSO_SEGS_MAX 64 /* datagrams of one UDP_SEGMENT send walked (the kernel allows 64) */

SEC("cgroup_skb/egress")
int inkcache_answers(struct __sk_buff *skb)
{
	struct scratch *s = get_scratch();
	struct pkt *p;
	__u32 plen, seg;
	__u16 port;

	if (coop_mode) /* the server installs entries itself */
		return 1;
	if (!s || !server_netns_skb(skb))
		return 1;
	p = &s->pk;
	if (skb_l3(skb, p) != PARSE_OK)
		return 1;
	port = bpf_ntohs(p->sport);
	if (!server_port(port))
		return 1;
	if (p->proto == IPPROTO_TCP) {
		tcp_answers(skb, s, p);
		return 1;
	}
	__builtin_memcpy(s->ws.rk.addr, p->daddr, 16);
	s->ws.rk.port = p->dport;
	s->ws.rk.pad = 0;
	plen = p->payload_len;
	seg = skb->gso_segs > 1 ? skb->gso_size : 0;
	if (!seg) {
		udp_reply(skb, p->payload_off, plen);
		return 1;
	}
	/* several datagrams sent at once (UDP_SEGMENT, as inkcached batches its replies): each
	 * gso_size bytes of the payload become a datagram of their own, the last one shorter */
	if (seg < UDP_HDR_MC + 3 || seg > DGRAM_MAX)
		return 1;
	for (__u32 i = 0; i < GSO_SEGS_MAX; i++) {
		__u32 at = i * seg;
		if (at >= plen)
			break;
		udp_reply(skb, p->payload_off + at, plen - at < seg ? plen - at : seg);
	}
	return 1;
}
