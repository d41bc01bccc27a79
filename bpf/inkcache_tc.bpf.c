// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* TC egress on the server's interface: learns items from the server's UDP replies to get requests
 * that the XDP program passed, when the reply provably cannot predate a write (see cache.h). */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "inkcache_common.h"
#include "parsing.h"
#include "maps.h"
#include "proto.h"
#include "cache.h"

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
	__u64 h, now, exp, *hint;

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
	hint = bpf_map_lookup_elem(&ttl_hints, &h);
	if (hint)
		exp = *hint;
	else if (g->hint_overflow)
		exp = EXP_UNKNOWN;
	else
		exp = now + max_age_ns;
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
	stat_inc(table_fill() ? ST_FILLS : ST_FILL_SKIPPED);
	return item_len;
}

SEC("tc")
int inkcache_tc_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ink_req_key rk = {};
	struct ink_req_val *rv;
	struct scratch *s;
	struct pkt p = {};
	__u32 plen, off;
	__u64 req_ts;
	__u16 port;

	if (parse_packet(data, data_end, &p) == PARSE_BAD) {
		/* headers may sit outside the linear area */
		if (bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128))
			return TC_ACT_OK;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (parse_packet(data, data_end, &p) != PARSE_OK)
			return TC_ACT_OK;
	}
	if (p.proto != IPPROTO_UDP)
		return TC_ACT_OK;
	port = bpf_ntohs(p.sport);
	if (!bpf_map_lookup_elem(&ports, &port))
		return TC_ACT_OK;
	plen = p.payload_len;
	if (plen < UDP_HDR_MC + 5 || plen > DGRAM_MAX)
		return TC_ACT_OK;
	s = get_scratch();
	if (!s)
		return TC_ACT_OK;
	/* the frame header and the first word first: most replies stop here */
	if (bpf_skb_load_bytes(skb, p.payload_off, s->buf, UDP_HDR_MC + 6))
		return TC_ACT_OK;
	/* one-datagram replies only: seq 0, total 1 */
	if (s->buf[2] || s->buf[3] || s->buf[4] || s->buf[5] != 1)
		return TC_ACT_OK;
	if (!buf_eq(s, UDP_HDR_MC, "VALUE ", 6))
		return TC_ACT_OK;

	__builtin_memcpy(rk.addr, p.daddr, 16);
	rk.port = p.dport;
	__builtin_memcpy(&rk.req_id, s->buf, 2);
	rv = bpf_map_lookup_elem(&pending, &rk);
	if (!rv)
		return TC_ACT_OK; /* not a get the XDP side passed and remembered */
	req_ts = rv->ts_ns;
	bpf_map_delete_elem(&pending, &rk);
	if (bpf_skb_load_bytes(skb, p.payload_off, s->buf, plen))
		return TC_ACT_OK;

	off = UDP_HDR_MC;
	for (__u32 i = 0; i < MAX_GET_KEYS; i++) {
		int r;
		if (off + 5 >= plen)
			break;
		r = fill_item(off, plen, req_ts);
		if (r <= 0)
			break;
		off += r;
	}
	return TC_ACT_OK;
}
