// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Scatter-gather in the kernel.
 * Long file: the scatter, gather and timeout programs share one request-slot state machine and
 * its maps; one object keeps them consistent without map reuse between objects.
 *
 * sg_scatter (TC egress on the client's interfaces): a datagram from a registered client socket
 * that starts with struct sg_scatter_hdr is not sent as is. The first one of a request arms the
 * request's slot and its timer; every one is then cloned to each worker it lists: the worker's
 * section is written as the UDP payload (lengths and checksums fixed), the destination address
 * and port are rewritten (IP and UDP checksums fixed, as checksum offload or not leaves them),
 * MACs and output interface come from the FIB, and bpf_clone_redirect() sends it. The original
 * is dropped.
 *
 * sg_gather (XDP on the same interfaces): UDP datagrams to a registered client port are
 * consumed here, never passed up (no socket wakeups, no ICMP for late answers): matched to their
 * slot by request id, to a worker by source address and port, refused and counted when late,
 * duplicate, from a non-member or malformed, otherwise aggregated (vector reducers, an
 * application's program) or appended (concatenation, memcached replies). When the completion
 * policy is met the report goes to the client's ring buffer.
 *
 * sg_timeout (the slot's bpf_timer): ends a request that is still open at its deadline and
 * reports it with the workers that did not answer. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sg_gather.h"
#include "sg_csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Never used: gives user space the shared layouts (see sg_common.h). */
struct sg_layouts sg_layouts;

#define AF_INET 2
#define AF_INET6 10
#define CLOCK_MONOTONIC 1
#define MC_ITEMS_MAX 100  /* items parsed in one memcached reply datagram (>= 1392 / 15) */
#define MC_LINE_MAX 320   /* "VALUE <key:250> <flags> <bytes> <cas>\r\n" */

/* ---------------------------------------------------------------- timeouts */

static int sg_timeout(void *map, __u32 *key, struct sg_slot *s)
{
	__u64 now = bpf_ktime_get_ns();
	int fin = 0;

	/* A timer re-armed for a newer request while this expiry was being delivered. */
	if (now < s->deadline_ns)
		return 0;
	bpf_spin_lock(&s->lock);
	if (s->state == SG_ACTIVE) {
		s->state = SG_CLOSING;
		s->status = SG_TIMEOUT;
		if (s->done == s->got) {
			s->state = SG_FINAL;
			fin = 1;
		}
	}
	bpf_spin_unlock(&s->lock);
	if (fin)
		sg_finalize(*key, s, now);
	return 0;
}

/* ---------------------------------------------------------------- scatter (TC egress) */

struct tc_scratch {
	__u8 data[SG_DGRAM_MAX * 2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tc_scratch);
	__uint(max_entries, 1);
} tc_scratch SEC(".maps");

struct clone_ctx {
	struct __sk_buff *skb;
	__u32 l4;          /* offset of the UDP header */
	__u32 family;
	__u32 slot;
	__u32 group;
	__u32 first;
	__u32 flags;
	__u32 tbl;         /* section table offset in the payload */
	__u32 cur_off;     /* section now in the packet (~0: the scatter datagram) */
	__u32 cur_len;     /* UDP payload length now */
	__u32 cur_sum;     /* its sum */
	__u32 sent;
	__u32 fib_ok;      /* fib cache: last worker address resolved */
	__u32 fib_ifindex;
	__u8 fib_addr[16];
	__u8 fib_macs[12]; /* dest, source */
	__u8 saddr[16];
};

static __always_inline int eq16(const __u8 *a, const __u8 *b)
{
	__u64 x[2], y[2];

	__builtin_memcpy(x, a, 16);
	__builtin_memcpy(y, b, 16);
	return x[0] == y[0] && x[1] == y[1];
}

/* Offset of the UDP checksum field. */
static __always_inline __u32 ck(struct clone_ctx *c)
{
	return c->l4 + offsetof(struct udphdr, check);
}

/* Writes section [off, off + len) of the scatter datagram as the packet's UDP payload. */
static __always_inline int put_section(struct clone_ctx *c, struct tc_scratch *sc, __u32 off,
				       __u32 len)
{
	struct __sk_buff *skb = c->skb;
	__u16 old_ulen = bpf_htons(c->cur_len + 8), new_ulen = bpf_htons(len + 8);
	__u32 sum, diff;
	__s64 r;

	__u64 n = len;

	if (n < 1 || n > SG_DGRAM_MAX || off >= SG_DGRAM_MAX)
		return -1;
	if (bpf_skb_change_tail(skb, c->l4 + 8 + len, 0))
		return -1;
	sg_barrier_var(n);
	if (n < 1 || n > SG_DGRAM_MAX)
		return -1;
	if (bpf_skb_store_bytes(skb, c->l4 + 8, sc->data + (off & (SG_DGRAM_MAX - 1)), n, 0))
		return -1;
	sum = sg_sum_buf(sc->data, off, len);
	r = bpf_csum_diff(&c->cur_sum, 4, &sum, 4, 0);
	if (r < 0)
		return -1;
	diff = (__u32)r;
	/* Payload: a no-op when the checksum is offloaded (it covers the pseudo-header only). */
	bpf_l4_csum_replace(skb, ck(c), 0, diff, BPF_F_MARK_MANGLED_0);
	/* The UDP length, in the pseudo-header and in the header. */
	bpf_l4_csum_replace(skb, ck(c), old_ulen, new_ulen,
			    BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 2);
	bpf_l4_csum_replace(skb, ck(c), old_ulen, new_ulen, BPF_F_MARK_MANGLED_0 | 2);
	bpf_skb_store_bytes(skb, c->l4 + offsetof(struct udphdr, len), &new_ulen, 2, 0);
	if (c->family == 4) {
		__u16 old_tot = bpf_htons(c->cur_len + 8 + 20), new_tot = bpf_htons(len + 8 + 20);
		__u32 l3 = c->l4 - 20;

		bpf_l3_csum_replace(skb, l3 + offsetof(struct iphdr, check), old_tot, new_tot, 2);
		bpf_skb_store_bytes(skb, l3 + offsetof(struct iphdr, tot_len), &new_tot, 2, 0);
	} else {
		bpf_skb_store_bytes(skb, c->l4 - 40 + offsetof(struct ipv6hdr, payload_len),
				    &new_ulen, 2, 0);
	}
	c->cur_off = off;
	c->cur_len = len;
	c->cur_sum = sum;
	return 0;
}

/* Writes the worker's index into its struct sg_req_hdr. */
static __always_inline int patch_worker(struct clone_ctx *c, __u32 w)
{
	__u32 off = c->l4 + 8 + offsetof(struct sg_req_hdr, worker);
	__u32 oldw, neww;
	__u16 be = bpf_htons(w);
	__s64 r;

	if (c->cur_len < sizeof(struct sg_req_hdr))
		return -1;
	if (bpf_skb_load_bytes(c->skb, off, &oldw, 4))
		return -1;
	neww = oldw;
	__builtin_memcpy(&neww, &be, 2);
	r = bpf_csum_diff(&oldw, 4, &neww, 4, 0);
	if (r < 0)
		return -1;
	bpf_l4_csum_replace(c->skb, ck(c), 0, (__u32)r, BPF_F_MARK_MANGLED_0);
	c->cur_sum = sg_csum_add(c->cur_sum, (__u32)r);
	return bpf_skb_store_bytes(c->skb, off, &neww, 4, 0);
}

/* Output interface and MACs toward `wk` (cached while consecutive workers share an address). */
static __always_inline int resolve(struct clone_ctx *c, struct sg_worker *wk)
{
	struct bpf_fib_lookup fib = {};
	int rc;

	if (wk->ifindex) {
		c->fib_ifindex = wk->ifindex;
		__builtin_memcpy(c->fib_macs, wk->dmac, 6);
		__builtin_memcpy(c->fib_macs + 6, wk->smac, 6);
		c->fib_ok = 0;
		return 0;
	}
	if (c->fib_ok && eq16(c->fib_addr, wk->addr))
		return 0;
	c->fib_ok = 0;
	/* Needs forwarding enabled on the interface (the kernel's rule for FIB lookups). */
	fib.l4_protocol = IPPROTO_UDP;
	fib.dport = bpf_htons(wk->port);
	fib.ifindex = c->skb->ifindex;
	if (c->family == 4) {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_src, c->saddr, 4);
		__builtin_memcpy(&fib.ipv4_dst, wk->addr, 4);
	} else {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, c->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, wk->addr, 16);
	}
	rc = bpf_fib_lookup(c->skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		sg_count(ST_NO_NEIGH);
		return -1;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		sg_count(ST_CLONE_ERRORS);
		return -1;
	}
	c->fib_ifindex = fib.ifindex;
	__builtin_memcpy(c->fib_macs, fib.dmac, 6);
	__builtin_memcpy(c->fib_macs + 6, fib.smac, 6);
	__builtin_memcpy(c->fib_addr, wk->addr, 16);
	c->fib_ok = 1;
	return 0;
}

/* Points the packet at `wk`: destination address and port (checksums fixed), MACs. */
static __always_inline int readdress(struct clone_ctx *c, struct sg_worker *wk)
{
	struct __sk_buff *skb = c->skb;
	__u16 oldp, newp = bpf_htons(wk->port);

	if (c->family == 4) {
		__u32 l3 = c->l4 - 20, olda, newa;

		if (bpf_skb_load_bytes(skb, l3 + offsetof(struct iphdr, daddr), &olda, 4))
			return -1;
		__builtin_memcpy(&newa, wk->addr, 4);
		if (olda != newa) {
			bpf_l3_csum_replace(skb, l3 + offsetof(struct iphdr, check), olda, newa, 4);
			bpf_l4_csum_replace(skb, ck(c), olda, newa,
					    BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 4);
			bpf_skb_store_bytes(skb, l3 + offsetof(struct iphdr, daddr), &newa, 4, 0);
		}
	} else {
		__u32 l3 = c->l4 - 40;
		__u8 olda[16];
		__s64 r;

		if (bpf_skb_load_bytes(skb, l3 + offsetof(struct ipv6hdr, daddr), olda, 16))
			return -1;
		if (!eq16(olda, wk->addr)) {
			r = bpf_csum_diff((void *)olda, 16, (void *)wk->addr, 16, 0);
			if (r < 0)
				return -1;
			bpf_l4_csum_replace(skb, ck(c), 0, (__u32)r,
					    BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0);
			bpf_skb_store_bytes(skb, l3 + offsetof(struct ipv6hdr, daddr), wk->addr, 16,
					    0);
		}
	}
	if (bpf_skb_load_bytes(skb, c->l4 + offsetof(struct udphdr, dest), &oldp, 2))
		return -1;
	if (oldp != newp) {
		bpf_l4_csum_replace(skb, ck(c), oldp, newp, BPF_F_MARK_MANGLED_0 | 2);
		bpf_skb_store_bytes(skb, c->l4 + offsetof(struct udphdr, dest), &newp, 2, 0);
	}
	return bpf_skb_store_bytes(skb, 0, c->fib_macs, 12, 0);
}

static long clone_one(__u32 i, struct clone_ctx *c)
{
	__u32 zero = 0, w, off, len, key;
	struct tc_scratch *sc = bpf_map_lookup_elem(&tc_scratch, &zero);
	struct sg_section sec;
	struct sg_worker *wk;
	struct sg_slot *s;

	if (!sc)
		return 1;
	if (c->flags & SG_F_SECTIONS) {
		__u32 at = c->tbl + i * sizeof(struct sg_section);

		if (at > SG_DGRAM_MAX)
			return 1;
		__builtin_memcpy(&sec, sc->data + at, sizeof(sec));
		w = bpf_ntohs(sec.worker);
	} else {
		__u32 at = c->tbl;

		if (at > SG_DGRAM_MAX)
			return 1;
		__builtin_memcpy(&sec, sc->data + at, sizeof(sec));
		w = c->first + i;
	}
	off = bpf_ntohs(sec.off);
	len = bpf_ntohs(sec.len);
	if (w >= SG_MAX_WORKERS)
		return 0;
	key = c->group * SG_MAX_WORKERS + w;
	wk = bpf_map_lookup_elem(&workers, &key);
	s = bpf_map_lookup_elem(&slots, &c->slot);
	if (!wk || !s)
		return 1;
	/* Asked, whatever happens next: a worker we fail to reach is reported missing. */
	{
		__u32 word = w >> 6;

		sg_barrier_var(word);
		__sync_fetch_and_or(&s->asked[word & (SG_BITMAP_WORDS - 1)], 1ULL << (w & 63));
	}
	if (wk->family != c->family) {
		sg_count(ST_CLONE_ERRORS);
		return 0;
	}
	if (off != c->cur_off && put_section(c, sc, off, len)) {
		sg_count(ST_CLONE_ERRORS);
		return 1;
	}
	if ((c->flags & SG_F_PATCH_WORKER) && patch_worker(c, w)) {
		sg_count(ST_CLONE_ERRORS);
		return 1;
	}
	if (resolve(c, wk))
		return 0;
	if (readdress(c, wk)) {
		sg_count(ST_CLONE_ERRORS);
		return 1;
	}
	if (bpf_clone_redirect(c->skb, c->fib_ifindex, 0)) {
		sg_count(ST_CLONE_ERRORS);
		return 0;
	}
	c->sent++;
	return 0;
}

/* Arms slot `idx` for the request of `h` (the first datagram of a request). */
static __always_inline int arm(__u32 idx, struct sg_scatter_hdr *h, struct sg_client *cl)
{
	struct sg_slot *s = bpf_map_lookup_elem(&slots, &idx);
	__u64 now = bpf_ktime_get_ns(), timeout = (__u64)bpf_ntohl(h->timeout_us) * 1000;
	__u64 init = h->reducer == SG_RED_MIN ? ~0ULL : 0;
	__u32 elem = bpf_ntohs(h->elem);

	if (!s)
		return -1;
	bpf_spin_lock(&s->lock);
	if (s->state == SG_ACTIVE || s->state == SG_CLOSING) {
		bpf_spin_unlock(&s->lock);
		return -1;
	}
	s->state = SG_ACTIVE;
	s->req_id = bpf_ntohl(h->req_id);
	s->group = bpf_ntohs(h->group);
	s->need = bpf_ntohs(h->need);
	s->got = 0;
	s->done = 0;
	s->complete = 0;
	s->asked_n = bpf_ntohs(h->asked);
	s->reducer = h->reducer;
	s->proto = cl->proto;
	s->status = 0;
	s->flags = h->flags & 0x0f;
	s->vec_len = bpf_ntohs(h->vec_len);
	s->elem = elem;
	s->client = cl->index;
	s->len = 0;
	s->start_ns = now;
	s->deadline_ns = now + timeout;
	for (int i = 0; i < SG_BITMAP_WORDS; i++) {
		s->asked[i] = 0;
		s->seen[i] = 0;
	}
	if (elem == 4 && init)
		init = 0xffffffffULL;
	for (int i = 0; i < SG_VEC_BYTES / 8; i++)
		((__u64 *)s->agg)[i] = elem == 4 ? (init | init << 32) : init;
	bpf_spin_unlock(&s->lock);
	bpf_timer_init(&s->timer, &slots, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&s->timer, sg_timeout);
	bpf_timer_start(&s->timer, timeout, 0);
	sg_count(ST_SCATTERS);
	return 0;
}

SEC("tc")
int sg_scatter(struct __sk_buff *skb)
{
	struct clone_ctx c = { .skb = skb, .cur_off = ~0U };
	__u32 zero = 0, plen, idx, count, *gsize;
	struct sg_scatter_hdr h;
	struct sg_client *cl;
	struct tc_scratch *sc;
	struct udphdr udp;
	struct sg_slot *s;
	__u16 sport;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
			return TC_ACT_OK;
		if (ip.ihl != 5 || ip.protocol != IPPROTO_UDP || (ip.frag_off & bpf_htons(0x3fff)))
			return TC_ACT_OK;
		c.family = 4;
		c.l4 = ETH_HLEN + 20;
		__builtin_memcpy(c.saddr, &ip.saddr, 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)))
			return TC_ACT_OK;
		if (ip6.nexthdr != IPPROTO_UDP)
			return TC_ACT_OK;
		c.family = 6;
		c.l4 = ETH_HLEN + 40;
		__builtin_memcpy(c.saddr, &ip6.saddr, 16);
	} else {
		return TC_ACT_OK;
	}
	if (bpf_skb_load_bytes(skb, c.l4, &udp, sizeof(udp)))
		return TC_ACT_OK;
	sport = bpf_ntohs(udp.source);
	cl = bpf_map_lookup_elem(&clients, &sport);
	if (!cl)
		return TC_ACT_OK;
	plen = bpf_ntohs(udp.len) - 8;
	if (plen < sizeof(h) + sizeof(struct sg_section) || plen > 0xffff)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, c.l4 + 8, &h, sizeof(h)))
		return TC_ACT_OK;
	/* Clones (and anything else the client sends) pass. */
	if (h.magic != bpf_htonl(SG_MAGIC_SCATTER))
		return TC_ACT_OK;
	sc = bpf_map_lookup_elem(&tc_scratch, &zero);
	if (!sc || plen > SG_DGRAM_MAX || skb->len < c.l4 + 8 + plen)
		goto refuse;
	if (bpf_skb_load_bytes(skb, c.l4 + 8, sc->data, plen))
		goto refuse;
	idx = cl->slot_base + (bpf_ntohl(h.req_id) & cl->slot_mask);
	c.slot = idx;
	c.group = bpf_ntohs(h.group);
	c.first = bpf_ntohs(h.first);
	c.flags = h.flags;
	c.tbl = sizeof(h);
	count = bpf_ntohs(h.count);
	gsize = bpf_map_lookup_elem(&groups, &c.group);
	if (!gsize || count > SG_MAX_WORKERS)
		goto refuse;
	if (!(h.flags & SG_F_SECTIONS) && c.first + count > *gsize)
		goto refuse;
	if ((h.flags & SG_F_SECTIONS) && sizeof(h) + count * sizeof(struct sg_section) > plen)
		goto refuse;
	if (h.flags & SG_F_INIT) {
		if (arm(idx, &h, cl))
			goto refuse;
	} else {
		s = bpf_map_lookup_elem(&slots, &idx);
		if (!s || s->state != SG_ACTIVE || s->req_id != bpf_ntohl(h.req_id))
			goto refuse;
	}
	c.cur_len = plen;
	c.cur_sum = sg_sum_buf(sc->data, 0, plen);
	bpf_loop(count, clone_one, &c, 0);
	{
		__u32 k = ST_CLONES;
		__u64 *v = bpf_map_lookup_elem(&stats, &k);

		if (v)
			*v += c.sent;
	}
	return TC_ACT_SHOT;
refuse:
	sg_count(ST_BUSY);
	return TC_ACT_SHOT;
}

/* ---------------------------------------------------------------- gather (XDP) */

struct pkt {
	__u8 saddr[16];
	__u16 sport;
	__u16 dport;
	__u32 off;   /* UDP payload */
	__u32 len;
};

static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u32 ulen;

	if ((void *)(eth + 1) > end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl != 5)
			return -1;
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		udp = (void *)(ip + 1);
		__builtin_memcpy(p->saddr, &ip->saddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return -1;
		udp = (void *)(ip6 + 1);
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
	} else {
		return -1;
	}
	if ((void *)(udp + 1) > end)
		return -1;
	p->sport = bpf_ntohs(udp->source);
	p->dport = bpf_ntohs(udp->dest);
	ulen = bpf_ntohs(udp->len);
	p->off = (void *)(udp + 1) - data;
	if (ulen < 8 || data + p->off + (ulen - 8) > end)
		return -1;
	p->len = ulen - 8;
	return 0;
}

struct mc_parse {
	__u32 pos;
	__u32 len;
	int result;   /* 1: the reply ends the server's answer, 0: more follows, -1: malformed */
};

static __always_inline int is(const __u8 *b, const char *lit, int n)
{
	for (int i = 0; i < n; i++)
		if (b[i] != (__u8)lit[i])
			return 0;
	return 1;
}

struct mc_line {
	__u32 at;    /* first byte to scan */
	__u32 len;
	__u32 tok;   /* token being read (1: key, 2: flags, 3: bytes, 4: cas) */
	__u32 num;   /* <bytes> */
	__u32 eol;   /* offset of '\r' (0: not found, or malformed) */
};

/* One byte of a VALUE line. */
static long mc_char(__u32 j, struct mc_line *l)
{
	__u32 zero = 0, at = l->at + j;
	struct sg_scratch *sc = bpf_map_lookup_elem(&xdp_scratch, &zero);
	__u8 ch;

	if (!sc || at >= l->len)
		return 1;
	ch = sc->data[at & (SG_DGRAM_MAX - 1)];
	if (ch == '\r') {
		l->eol = at;
		return 1;
	}
	if (ch == ' ') {
		l->tok++;
		return 0;
	}
	if (l->tok == 3) {
		if (ch < '0' || ch > '9' || l->num > (1U << 24))
			return 1;
		l->num = l->num * 10 + (ch - '0');
	}
	return 0;
}

/* One item of a memcached reply message held whole in the scratch. */
static long mc_item(__u32 i, struct mc_parse *mp)
{
	__u32 zero = 0, pos = mp->pos, len = mp->len, rem, next;
	struct sg_scratch *sc = bpf_map_lookup_elem(&xdp_scratch, &zero);
	struct mc_line l = {};
	const __u8 *b;

	mp->result = -1;
	if (!sc || len > SG_DGRAM_MAX || pos > len)
		return 1;
	if (pos == len) {
		mp->result = 0;
		return 1;
	}
	rem = len - pos;
	b = sc->data + (pos & (SG_DGRAM_MAX - 1));
	if (rem == 5 && is(b, "END\r\n", 5)) {
		mp->result = 1;
		return 1;
	}
	if ((rem >= 5 && is(b, "ERROR", 5)) ||
	    (rem >= 12 && (is(b, "SERVER_ERROR", 12) || is(b, "CLIENT_ERROR", 12)))) {
		mp->result = 1;
		return 1;
	}
	if (rem < 6 || !is(b, "VALUE ", 6))
		return 1;
	l.at = pos + 6;
	l.len = len;
	l.tok = 1;
	bpf_loop(MC_LINE_MAX, mc_char, &l, 0);
	if (!l.eol || l.tok < 3 || l.tok > 4)
		return 1;
	next = l.eol + 2 + l.num + 2;
	if (next > len)
		return 1;
	mp->pos = next;
	mp->result = 0;
	return 0;
}

/* Does this reply datagram end the server's answer? (Loads it into the scratch.) A reply of one
 * datagram is parsed item by item; for one cut into several datagrams, its last datagram ending
 * in END counts (a value over 1392 bytes that itself ends with "END" in a multi-key reply can end
 * that server's answer early: its later keys are then reported missing, never wrong). */
static __always_inline int mc_ends(struct xdp_md *ctx, struct sg_scratch *sc, __u32 off,
				   __u32 len, __u32 seq, __u32 total)
{
	struct mc_parse mp = { .pos = 0, .len = len, .result = -1 };

	__u64 n = len;

	sg_barrier_var(n);
	if (n < 1 || n > SG_DGRAM_MAX - 64)
		return -1;
	if (bpf_xdp_load_bytes(ctx, off, sc->data, n))
		return -1;
	if (total > 1) {
		if (seq != total - 1)
			return 0;
		return len >= 5 && is(sc->data + ((len - 5) & (SG_DGRAM_MAX - 1)), "END\r\n", 5);
	}
	bpf_loop(MC_ITEMS_MAX, mc_item, &mp, 0);
	return mp.result;
}

/* Answers kept whole (concatenation; memcached replies): reserve, copy, count. */
static __always_inline int gather_records(struct xdp_md *ctx, struct sg_slot *s,
					  struct sg_scratch *sc, __u32 off, __u32 mask,
					  __u32 seq, __u32 total, int memcached)
{
	__u32 idx = sc->slot, w = sc->worker, dlen = sc->len, rec, at = 0, why;
	int ends = 1, keep = 0, fin;
	__u8 *res;

	if (memcached) {
		ends = mc_ends(ctx, sc, off, dlen, seq, total);
		if (ends < 0) {
			sg_count(ST_MALFORMED);
			return XDP_DROP;
		}
	}
	rec = sizeof(struct sg_rec) + dlen;
	bpf_spin_lock(&s->lock);
	why = sg_refuse(s, sc->req_id, mask, w);
	if (why) {
		bpf_spin_unlock(&s->lock);
		sg_count(why);
		return XDP_DROP;
	}
	if (s->len + rec <= result_cap) {
		at = s->len;
		s->len += rec;
		keep = 1;
	} else {
		s->flags |= SG_R_TRUNCATED << 4;
	}
	s->got++;
	if (ends)
		sg_complete(s, w);
	bpf_spin_unlock(&s->lock);
	sg_count(ST_ANSWERS);
	if (!keep)
		sg_count(ST_TRUNCATED);
	res = bpf_map_lookup_elem(&results, &idx);
	sg_barrier_var(at);
	if (keep && res && at <= result_cap && dlen <= SG_DGRAM_MAX - 64) {
		struct sg_rec *r;
		__u64 o = at;

		sg_barrier_var(o);
		if (o > result_cap)
			goto written;
		r = (void *)(res + SG_EVENT_HDR + o);

		r->worker = w;
		r->len = dlen;
		r->seq = seq;
		r->total = total;
		__u64 n = dlen;

		sg_barrier_var(n);
		if (n >= 1 && n <= SG_DGRAM_MAX - 64)
			bpf_xdp_load_bytes(ctx, off, res + SG_EVENT_HDR + o + sizeof(*r), n);
	}
written:
	bpf_spin_lock(&s->lock);
	fin = sg_written(s);
	bpf_spin_unlock(&s->lock);
	if (fin)
		sg_finalize(idx, s, bpf_ktime_get_ns());
	return XDP_DROP;
}

SEC("xdp")
int sg_gather(struct xdp_md *ctx)
{
	__u32 zero = 0, req, mask, hdr, seq = 0, total = 1, idx, reducer, *w;
	struct sg_member_key mk = {};
	struct sg_scratch *sc;
	struct sg_client *cl;
	struct sg_slot *s;
	struct pkt p = {};
	struct sg_agg a;
	__u32 dlen;

	if (parse(ctx, &p))
		return XDP_PASS;
	cl = bpf_map_lookup_elem(&clients, &p.dport);
	if (!cl)
		return XDP_PASS;
	/* From here on the datagram is ours: it is consumed, whatever it is. */
	sc = bpf_map_lookup_elem(&xdp_scratch, &zero);
	if (!sc)
		return XDP_DROP;
	if (cl->proto == SG_PROTO_MEMCACHED) {
		__u16 f[4];

		if (p.len < 8 || bpf_xdp_load_bytes(ctx, p.off, f, 8))
			goto malformed;
		req = bpf_ntohs(f[0]);
		seq = bpf_ntohs(f[1]);
		total = bpf_ntohs(f[2]);
		/* stock memcached sends an empty frame (no data, total 0) with some replies */
		if (total == 0 && seq == 0 && p.len == 8)
			return XDP_DROP;
		if (total == 0 || seq >= total || f[3])
			goto malformed;
		mask = 0xffff;
		hdr = 8;
	} else {
		struct sg_ans_hdr ah;

		if (p.len < sizeof(ah) || bpf_xdp_load_bytes(ctx, p.off, &ah, sizeof(ah)))
			goto malformed;
		if (ah.magic != bpf_htonl(SG_MAGIC_ANS))
			goto malformed;
		req = bpf_ntohl(ah.req_id);
		mask = 0xffffffff;
		hdr = sizeof(ah);
	}
	idx = cl->slot_base + (req & cl->slot_mask);
	s = bpf_map_lookup_elem(&slots, &idx);
	if (!s) {
		sg_count(ST_LATE);
		return XDP_DROP;
	}
	__builtin_memcpy(mk.addr, p.saddr, 16);
	mk.port = p.sport;
	mk.group = s->group;
	w = bpf_map_lookup_elem(&members, &mk);
	if (!w) {
		sg_count(ST_NON_MEMBERS);
		return XDP_DROP;
	}
	dlen = p.len - hdr;
	if (dlen > SG_DGRAM_MAX - 64)
		goto malformed;
	sc->slot = idx;
	sc->worker = *w;
	sc->len = dlen;
	sc->req_id = req;
	reducer = s->reducer;
	if (cl->proto == SG_PROTO_MEMCACHED || reducer == SG_RED_CONCAT)
		return gather_records(ctx, s, sc, p.off + hdr, mask, seq, total,
				      cl->proto == SG_PROTO_MEMCACHED);
	{
		__u64 n = dlen;

		sg_barrier_var(n);
		if (n >= 1 && n <= SG_DGRAM_MAX - 64 &&
		    bpf_xdp_load_bytes(ctx, p.off + hdr, sc->data, n))
			goto malformed;
	}
	if (reducer >= SG_RED_CUSTOM) {
		bpf_tail_call(ctx, &aggregators, reducer - SG_RED_CUSTOM);
		goto malformed; /* no such program */
	}
	s = sg_agg_begin(&a);
	if (!s)
		return XDP_DROP;
	if (dlen != s->vec_len || (s->elem != 4 && s->elem != 8) || (dlen & (s->elem - 1)))
		a.rc = -1;
	else
		sg_reduce_vec(s->agg, a.sc->data, dlen, s->reducer, s->elem);
	return sg_agg_end(&a);
malformed:
	sg_count(ST_MALFORMED);
	return XDP_DROP;
}
