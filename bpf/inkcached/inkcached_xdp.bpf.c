// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* inkcached's own XDP program, attached when inkcache is not: hands inkcached's UDP requests to
 * its AF_XDP sockets (see ../xsk.h), or, in cpumap mode, sends each of them to the CPU whose
 * worker owns its first key (the packet then goes up the stack there, where the sk_reuseport
 * program picks that worker's socket). Everything else passes untouched. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xsk.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* cpumap mode: number of CPUs with an entry in `cpus` (0: off). Set before load. */
const volatile __u32 n_cpus = 0;

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
	__uint(max_entries, 256);
} cpus SEC(".maps");

/* So that the skeleton carries the layout inkcached writes into xsk_cfg. */
struct xsk_cfg xsk_cfg_layout;

static __always_inline int to_owner_cpu(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct xsk_cfg *cfg;
	struct xsk_keybuf *k;
	struct pkt p = {};
	__u32 zero = 0, h, len;

	cfg = bpf_map_lookup_elem(&xsk_cfg, &zero);
	if (!cfg || cfg->port == 0)
		return XDP_PASS;
	if (parse_packet(data, data_end, &p) != PARSE_OK || p.proto != IPPROTO_UDP ||
	    bpf_ntohs(p.dport) != cfg->port || !bpf_map_lookup_elem(&xsk_dsts, p.daddr))
		return XDP_PASS;
	k = xsk_keybuf_get();
	len = xsk_scan_len(p.payload_len > 8 ? p.payload_len - 8 : 0);
	if (!k)
		return XDP_PASS;
	h = XSK_LOAD_HASH(bpf_xdp_load_bytes, ctx, p.payload_off + 8, k, len);
	if (!h)
		return XDP_PASS;
	return bpf_redirect_map(&cpus, h % n_cpus, XDP_PASS);
}

SEC("xdp")
int inkcached_xdp(struct xdp_md *ctx)
{
	if (n_cpus)
		return to_owner_cpu(ctx);
	return xsk_redirect(ctx);
}
