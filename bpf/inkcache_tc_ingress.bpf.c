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
#include "proto.h"
#include "cache.h"
#include "reply.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The request goes to the server after all; its reply may fill the cache. */
static __always_inline int pass_on(struct pkt *p, __u16 req_id)
{
	stat_inc(ST_TC_PASSED);
	remember_request(p, req_id);
	return TC_ACT_OK;
}

static __always_inline int answer(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__u32 plen, bound, pseudo, body, new_len, want_cas;
	struct scratch *s;
	struct pkt p = {};
	__u16 fh[4], port;
	int n, out, ck_off;

	if (parse_packet(data, data_end, &p) == PARSE_BAD) {
		/* headers may sit outside the linear area */
		if (bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128))
			goto not_get;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	if (parse_packet(data, data_end, &p) != PARSE_OK || p.proto != IPPROTO_UDP)
		goto not_get;
	port = bpf_ntohs(p.dport);
	if (!bpf_map_lookup_elem(&ports, &port) || skb->gso_segs > 1)
		goto not_get; /* GRO merged datagrams: the server splits them */
	s = get_scratch();
	if (!s || p.payload_len < UDP_HDR_MC + 7 || p.payload_len > DGRAM_MAX)
		goto not_get;
	if (bpf_skb_load_bytes(skb, p.payload_off, fh, sizeof(fh)))
		goto not_get;
	if (fh[1] != 0 || fh[2] != bpf_htons(1))
		goto not_get;
	plen = p.payload_len - UDP_HDR_MC;
	if (bpf_skb_load_bytes(skb, p.payload_off + UDP_HDR_MC, s->buf, plen))
		return pass_on(&p, fh[0]);
	if (buf_eq(s, 0, "get ", 4))
		want_cas = 0;
	else if (buf_eq(s, 0, "gets ", 5))
		want_cas = 1;
	else
		return pass_on(&p, fh[0]);
	n = parse_get_keys(want_cas ? 5 : 4, plen);
	if (n <= 0 || p.ip_opts)
		return pass_on(&p, fh[0]);
	bound = reply_bound(&p);
	if (bound == 0) {
		stat_inc(ST_REFUSED);
		return pass_on(&p, fh[0]);
	}
	out = compose_reply(n, fh[0], want_cas, bound, bpf_ktime_get_ns());
	if (out < 0) {
		count_unanswerable(s, out, bound); /* a key went since XDP looked, or over the bound */
		return pass_on(&p, fh[0]);
	}

	/* Grow the skb to the reply (the IP header still has the request's length, so if anything
	 * fails before the payload is written the stack trims it back and the server gets the
	 * request as it came). */
	new_len = p.payload_off + out;
	if (new_len <= skb->len || bpf_skb_change_tail(skb, new_len, 0))
		return pass_on(&p, fh[0]);
	barrier_var(out);
	if (bpf_skb_store_bytes(skb, p.payload_off, s->out, ((out - 1) & 2047) + 1, 0))
		return pass_on(&p, fh[0]);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ck_off = reply_headers(data, data_end, &p, out, &pseudo, &body);
	if (ck_off < 0)
		goto broken;
	body = csum_add(body, reply_payload_sum(s, out));
	/* The UDP checksum (0 now) is completed for whatever checksum state the skb is in, which
	 * only bpf_l4_csum_replace knows: a full checksum, or with CHECKSUM_PARTIAL (a request from a
	 * local socket over veth) the pseudo header's sum, which the device or the peer completes.
	 * So: add the pseudo header as a pseudo-header change, then the rest as a payload change. */
	if (bpf_l4_csum_replace(skb, ck_off, 0, pseudo, BPF_F_PSEUDO_HDR) ||
	    bpf_l4_csum_replace(skb, ck_off, 0, body, BPF_F_MARK_MANGLED_0 | BPF_F_MARK_ENFORCE))
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

	if ((void *)(mark + 1) > data || *mark != INK_META_MAGIC)
		return TC_ACT_OK; /* not handed over by XDP */
	return answer(skb);
}
