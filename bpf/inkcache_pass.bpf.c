// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* XDP_PASS for the peer end of a veth pair. A veth only delivers frames that XDP_TX sends back
 * when the peer has an XDP program of its own; this one lets everything through unchanged. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int inkcache_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
