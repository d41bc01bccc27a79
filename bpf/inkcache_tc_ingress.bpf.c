// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* TC ingress on the server's interface: answers the UDP gets XDP handed over because every key
 * hit but the driver's frame had no room for the reply (veth leaves 16 bytes of tailroom and ~200
 * of headroom). The reply is composed by the same code as XDP's (reply.h), written into the skb
 * grown with bpf_skb_change_tail, and sent back out of the interface it came in on. Whatever
 * cannot be answered here passes to the server untouched and is remembered, so its reply fills.
 * Packets XDP did not mark cost one metadata compare. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "csum.h"
#include "maps.h"
#include "config.h"
#include "scratch.h"
#include "proto.h"
#include "table.h"
#include "coherence.h"
#include "reply.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The request goes to the server after all; its reply may fill the cache. */
static __always_inline int pass_on(struct pkt *p, __u16 req_id)
{
	stat_inc(ST_TC_PASSED);
	remember_request(p, req_id);
	return TC_ACT_OK;
}

/* Makes the skb a UDP datagram of the opposite direction (MACs, IPs and ports swapped) whose
 * payload is scratch.out[0, len): the reply for the client, or, applied to a reply, a request for
 * the server again. Returns 0, 1 if nothing was changed (the skb is still what it was), or -1 if it
 * was left half done (cannot happen: the growth leaves every header in the linear area). */
__noinline int skb_to_datagram(struct __sk_buff *skb, __u32 len)
{
	struct scratch *s = get_scratch();
	void *data, *data_end;
	__u32 pseudo, body, new_len;
	struct pkt p;
	int ck_off;

	if (!s || !skb || len < UDP_HDR_MC || len > DGRAM_MAX)
		return 1;
	p = s->pk; /* on the stack: header offsets the verifier can follow */
	new_len = p.payload_off + len;
	/* (the IP header still has the old length, so if anything fails before the payload is
	 * written, the stack trims the skb back to it) */
	if (new_len != skb->len && bpf_skb_change_tail(skb, new_len, 0))
		return 1;
	barrier_var(len);
	if (bpf_skb_store_bytes(skb, p.payload_off & 127, s->out, ((len - 1) & 2047) + 1, 0))
		return 1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ck_off = reply_headers(data, data_end, &p, len, 0, &pseudo, &body);
	if (ck_off < 0)
		return -1;
	body = csum_add(body, reply_payload_sum(s, len));
	/* The UDP checksum (0 now) is completed for whatever checksum state the skb is in, which
	 * only bpf_l4_csum_replace knows: a full checksum, or with CHECKSUM_PARTIAL (a request from a
	 * local socket over veth) the pseudo header's sum, which the device or the peer completes.
	 * So: add the pseudo header as a pseudo-header change, then the rest as a payload change.
	 * (A CHECKSUM_COMPLETE skb became CHECKSUM_NONE when its length changed.) */
	if (bpf_l4_csum_replace(skb, ck_off, 0, pseudo, BPF_F_PSEUDO_HDR) ||
	    bpf_l4_csum_replace(skb, ck_off, 0, body, BPF_F_MARK_MANGLED_0 | BPF_F_MARK_ENFORCE))
		return -1;
	return 0;
}

/* A multi-key get some of whose keys missed: the keys that hit are answered by a clone of the
 * skb sent back out (a message without END), and the skb itself goes on to the server as a get
 * for the others (whose answer brings the END). If nothing hit, or anything fails before the
 * clone is out, the request goes to the server whole. */
static __always_inline int split(struct __sk_buff *skb, struct scratch *s, __u32 n, __u16 req_id,
				 __u32 want_cas, __u32 bound)
{
	int out = compose_hits(n, req_id, want_cas, bound), r;

	if (out <= UDP_HDR_MC || s->nmiss == 0)
		return pass_on(&s->pk, req_id); /* nothing hit (or, meanwhile, everything) */
	r = skb_to_datagram(skb, out);
	if (r > 0)
		return pass_on(&s->pk, req_id);
	if (r < 0 || bpf_clone_redirect(skb, skb->ifindex, 0))
		goto broken;
	/* the skb is the hits' message now: turn it into the get for the others */
	out = compose_miss_request(want_cas);
	if (out < 0 || skb_to_datagram(skb, out))
		goto broken;
	stat_inc(ST_SPLITS);
	remember_request(&s->pk, req_id);
	return TC_ACT_OK;
broken: /* cannot happen; the client's get times out like a lost datagram */
	stat_inc(ST_ERRORS);
	return TC_ACT_SHOT;
}

static __always_inline int answer(struct __sk_buff *skb, __u32 magic)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__u32 plen, bound, want_cas;
	struct scratch *s;
	struct mc_udp_hdr fh;
	__u16 port;
	int n, out, r;

	s = get_scratch();
	if (!s)
		goto not_get;
	__builtin_memset(&s->pk, 0, sizeof(s->pk));
	if (parse_packet(data, data_end, &s->pk) == PARSE_BAD) {
		/* headers may sit outside the linear area */
		if (bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128))
			goto not_get;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	if (parse_packet(data, data_end, &s->pk) != PARSE_OK || s->pk.proto != IPPROTO_UDP)
		goto not_get;
	port = bpf_ntohs(s->pk.dport);
	if (!server_port(port) || skb->gso_segs > 1)
		goto not_get; /* GRO merged datagrams: the server splits them */
	plen = s->pk.payload_len;
	if (plen < UDP_HDR_MC + 7 || plen > DGRAM_MAX)
		goto not_get;
	if (bpf_skb_load_bytes(skb, s->pk.payload_off, &fh, sizeof(fh)))
		goto not_get;
	if (fh.seq != 0 || fh.total != bpf_htons(1))
		goto not_get;
	plen -= UDP_HDR_MC; /* 7..PAYLOAD_MAX */
	plen = ((plen - 1) & 2047) + 1; /* the same, as older verifiers (6.1) can follow it */
	if (bpf_skb_load_bytes(skb, s->pk.payload_off + UDP_HDR_MC, s->buf, plen))
		return pass_on(&s->pk, fh.req_id);
	if (buf_eq(s, 0, "get ", 4))
		want_cas = 0;
	else if (buf_eq(s, 0, "gets ", 5))
		want_cas = 1;
	else
		return pass_on(&s->pk, fh.req_id);
	n = parse_get_keys(want_cas ? 5 : 4, plen);
	if (n <= 0 || s->pk.ip_opts)
		return pass_on(&s->pk, fh.req_id);
	bound = reply_bound(&s->pk);
	if (bound == 0) {
		stat_inc(ST_REFUSED);
		return pass_on(&s->pk, fh.req_id);
	}
	if (magic == INK_META_SPLIT)
		return split(skb, s, n, fh.req_id, want_cas, bound);
	out = compose_reply(n, fh.req_id, want_cas, bound, 0);
	if (out < 0) {
		count_unanswerable(s, out, bound); /* a key went since XDP looked, or over the bound */
		return pass_on(&s->pk, fh.req_id);
	}
	r = skb_to_datagram(skb, out);
	if (r > 0)
		return pass_on(&s->pk, fh.req_id);
	if (r < 0)
		goto broken;
	stat_inc(ST_HITS);
	stat_inc(ST_TC_HITS);
	return bpf_redirect(skb->ifindex, 0);

not_get: /* not a request this program can take apart (XDP parsed it: cannot happen) */
	stat_inc(ST_TC_PASSED);
	return TC_ACT_OK;
broken: /* cannot happen: the growth left every header in the linear area */
	stat_inc(ST_ERRORS);
	return TC_ACT_SHOT;
}

SEC("tc")
int inkcache_tc_ingress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	__u32 *mark = (void *)(long)skb->data_meta;

	if ((void *)(mark + 1) > data ||
	    (*mark != INK_META_MAGIC && *mark != INK_META_SPLIT))
		return TC_ACT_OK; /* not handed over by XDP */
	return answer(skb, *mark);
}
