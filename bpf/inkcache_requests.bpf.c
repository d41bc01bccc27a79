// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The requests the server receives, walked where its own stack delivers them, so that what is
 * walked is exactly what the server will read:
 *  - TCP: the stream verdict of the conn_socks sockhash, where the socket-ops program puts every
 *    connection accepted on a cached port. It sees each connection's bytes in order, once, after
 *    the stack has checked checksums and windows and dealt with retransmissions, reordering and
 *    fragments; segments the stack drops, spoofed SYNs and RSTs never reach it.
 *  - UDP: cgroup_skb ingress, on datagrams delivered to a socket bound to a cached port in the
 *    server's namespace, on any interface (loopback included), reassembled and past any IPv6
 *    extension headers.
 * Every key a request may change is invalidated before the server can read it (mutations.h,
 * binproto.h); nothing is changed in the packet. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "config.h"
#include "maps.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"
#include "stream.h"
#include "mutations.h"
#include "binproto.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Walks scratch.buf[0, end) with the protocol given (`binary`): returns where the walk stopped (a
 * line or request the bytes cut, or end), -1 if everything was voided. */
static __always_inline int walk_chunk(__u32 end, __u32 binary)
{
	return binary ? invalidate_binary(0, end) : invalidate_mutations(0, end);
}

/* A line at scratch.buf[r, end) without its end yet that memcached reads whole however long it
 * is (proto_text.c: a line over 2 KB must be a multi-get, "get " or "gets ", else the connection
 * is closed). */
static __always_inline int long_get(__u32 r, __u32 end)
{
	struct scratch *s = get_scratch();

	if (!s || r >= SCRATCH_LEN - 8 || end - r < 5)
		return 0;
	if (BUF(s, r) != 'g' || BUF(s, r + 1) != 'e' || BUF(s, r + 2) != 't')
		return 0;
	return BUF(s, r + 3) == ' ' || (BUF(s, r + 3) == 's' && BUF(s, r + 4) == ' ');
}

/* Walks the skb's bytes [off, plen), CHUNK bytes at a time, scratch.ws.part bytes of a line
 * carried over before them (and carried on after them), data blocks skipped by scratch.ws.skip.
 * Returns 0, or -1 if the walk could not be sure of the bytes (everything was invalidated). */
__noinline int walk_skb(struct __sk_buff *skb, __u32 off, __u32 plen, __u32 binary)
{
	struct scratch *s = get_scratch();
	__u32 part;

	if (!s || !skb)
		return -1;
	part = s->ws.part;
	if (part > PART_MAX)
		goto unsure;
	for (__u32 i = 0; i < CHUNKS_MAX; i++) {
		__u64 n;
		__u32 end;
		int r;
		if (off >= plen || s->ws.stopped) {
			s->ws.part = s->ws.stopped ? 0 : part;
			return 0;
		}
		if (s->ws.long_get) { /* the rest of a get line too long to carry: to its '\n' */
			int e;
			n = plen - off;
			if (n > CHUNK)
				n = CHUNK;
			if (n == 0)
				goto unsure;
			n = chunk_len(n);
			if (bpf_skb_load_bytes(skb, off, s->buf, n))
				goto unsure;
			e = scan_eol(0, n);
			if (e >= 0) {
				s->ws.long_get = 0;
				off += e + 1;
			} else {
				off += n;
			}
			continue;
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
		if (n == 0)
			goto unsure;
		n = chunk_len(n);
		part &= 511;
		if (bpf_skb_load_bytes(skb, off, &s->buf[part], n))
			goto unsure;
		end = part + n;
		r = walk_chunk(end, binary);
		if (r < 0)
			return -1; /* everything was invalidated */
		if (end - r > PART_MAX && !binary && s->ws.stream && long_get(r, end)) {
			/* memcached reads a get line of any length whole, then answers it once; it
			 * changes nothing: skip to its end (any other line this long is not walked) */
			count_answers(s, 1);
			s->ws.long_get = 1;
			part = 0;
			off += n;
			continue;
		}
		r = stream_carry(r, end);
		if (r < 0)
			goto unsure; /* a line longer than we carry */
		part = r;
		off += n;
	}
unsure:
	/* more than we walk, or bytes we could not load */
	invalidate_all(ST_INVAL_UNPARSABLE);
	return -1;
}

/* The walk state for bytes on their own (UDP, or a connection whose position is not known). */
static __always_inline void walk_alone(struct scratch *s, __u32 udp)
{
	s->ws.stream = 0;
	s->ws.exact = udp; /* a UDP write is settled by the answer echoing its request id */
	s->ws.udp = udp;
	s->ws.desync = 0;
	s->ws.stopped = 0;
	s->ws.skip = 0;
	s->ws.part = 0;
	s->ws.long_get = 0;
	s->ws.cmds = 0;
}

/* The connection of a stream verdict's skb (scratch.ws.ck). */
static __always_inline void skb_conn_key(struct __sk_buff *skb, struct scratch *s)
{
	CONN_KEY_OF(skb, &s->ws.ck);
}

/* A connection whose stream position is not known (accepted before attach, or beyond
 * --max-conns): its bytes are walked on their own, as if a command started them; a line they
 * cut cannot be followed, and voids the cache. */
static __always_inline void stream_alone(struct __sk_buff *skb, struct scratch *s)
{
	__u8 b0 = 0;

	walk_alone(s, 0);
	bpf_skb_load_bytes(skb, 0, &b0, 1);
	if (walk_skb(skb, 0, skb->len, b0 == BIN_REQ_MAGIC) == 0 && s->ws.part)
		invalidate_all(ST_INVAL_UNPARSABLE);
}

/* Every byte a followed connection hands the server, in order. */
SEC("sk_skb/stream_verdict")
int inkcache_stream(struct __sk_buff *skb)
{
	struct scratch *s = get_scratch();
	struct ink_global *g = global_state();
	struct ink_conn *c;
	__u32 part, binary;

	if (coop_mode || !s || !g || skb->len == 0) /* cooperative: the server invalidates */
		return SK_PASS;
	skb_conn_key(skb, s);
	c = bpf_map_lookup_elem(&conns, &s->ws.ck);
	if (!c || c->gen != (__u32)g->gen || (c->flags & CONN_DESYNC)) {
		stream_alone(skb, s);
		return SK_PASS;
	}
	if (c->flags & CONN_STOPPED)
		return SK_PASS; /* memcached closes it: it executes nothing more from it */
	if (__sync_val_compare_and_swap(&c->in_busy, 0, 1)) { /* another CPU has this stream */
		conn_lost(CONN_DESYNC);
		stream_alone(skb, s);
		return SK_PASS;
	}
	s->ws.stream = 1;
	s->ws.udp = 0;
	s->ws.exact = !(c->flags & CONN_INEXACT);
	s->ws.desync = 0;
	s->ws.stopped = 0;
	s->ws.cmds = c->in_cmds;
	s->ws.skip = c->in_skip;
	s->ws.long_get = c->in_long;
	part = c->in_part_len;
	if (part > PART_MAX || part_io(DIR_IN, part, 0))
		goto unsure;
	s->ws.part = part;
	/* memcached picks the protocol from the connection's first byte, for good */
	if (!(c->flags & (CONN_BINARY | CONN_TEXT)) && !s->ws.skip && !part) {
		__u8 b0;
		if (bpf_skb_load_bytes(skb, 0, &b0, 1))
			goto unsure;
		__sync_fetch_and_or(&c->flags, b0 == BIN_REQ_MAGIC ? CONN_BINARY : CONN_TEXT);
	}
	binary = !!(c->flags & CONN_BINARY);
	if (binary)
		s->ws.exact = 0; /* quiet requests leave answers out: the quarantine settles */
	if (walk_skb(skb, 0, skb->len, binary))
		goto lost;
	if (part_io(DIR_IN, s->ws.part, 1))
		goto unsure;
	if (binary || s->ws.desync)
		conn_lost(CONN_INEXACT);
	if (s->ws.stopped)
		__sync_fetch_and_or(&c->flags, CONN_STOPPED);
	c->in_part_len = s->ws.part;
	c->in_cmds = s->ws.cmds;
	c->in_skip = s->ws.skip;
	c->in_long = s->ws.long_get;
	c->in_seq += skb->len;
	c->in_busy = 0;
	return SK_PASS;
unsure:
	invalidate_all(ST_INVAL_UNPARSABLE);
lost:
	c->in_busy = 0;
	conn_lost(CONN_DESYNC);
	return SK_PASS;
}

/* A UDP datagram delivered to the server: the frame header, then its commands. */
SEC("cgroup_skb/ingress")
int inkcache_udp_requests(struct __sk_buff *skb)
{
	struct scratch *s = get_scratch();
	struct mc_udp_hdr fh;
	struct pkt *p;
	__u16 port;

	if (coop_mode || !s || !server_netns_skb(skb))
		return 1; /* cooperative: the server invalidates what it writes */
	p = &s->pk;
	if (skb_l3(skb, p) != PARSE_OK || p->proto != IPPROTO_UDP)
		return 1;
	port = bpf_ntohs(p->dport);
	if (!server_port(port))
		return 1;
	if (p->payload_len < UDP_HDR_MC ||
	    bpf_skb_load_bytes(skb, p->payload_off, &fh, sizeof(fh)))
		return 1;
	/* memcached drops datagrams announcing several, and executes the rest whatever their
	 * sequence number */
	if (fh.total != bpf_htons(1))
		return 1;
	walk_alone(s, 1);
	__builtin_memcpy(s->ws.rk.addr, p->saddr, 16);
	s->ws.rk.port = p->sport;
	s->ws.rk.req_id = fh.req_id;
	s->ws.rk.pad = 0;
	{
		__u8 b0 = 0;
		bpf_skb_load_bytes(skb, p->payload_off + UDP_HDR_MC, &b0, 1);
		if (b0 == BIN_REQ_MAGIC)
			s->ws.exact = 0;
		/* a line the datagram cuts is dropped by memcached, as the rest of a binary request;
		 * a data block it cuts is read from the next datagrams (the write is settled by its
		 * answer, whenever memcached completes it) */
		walk_skb(skb, p->payload_off + UDP_HDR_MC, p->payload_off + p->payload_len,
			 b0 == BIN_REQ_MAGIC);
	}
	return 1;
}
