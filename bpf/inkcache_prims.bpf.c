// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Measurement only, never attached: what the hit path's primitives cost under BPF_PROG_TEST_RUN
 * (tests/unit/cost.rs's primitives_cost; docs/results/hitcost.md, twenty-seventh run). Each
 * program does one thing, then returns XDP_PASS (XDP_DROP if its helper or tail call failed);
 * the test times each against inkcache_pass.bpf.c's program, which only returns. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* a BPF-to-BPF call the compiler cannot inline or fold */
__noinline int plus_one(int x)
{
	return x + 1;
}

SEC("xdp")
int call1(struct xdp_md *ctx)
{
	return plus_one(ctx->ingress_ifindex) == -1 ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int call3(struct xdp_md *ctx)
{
	return plus_one(plus_one(plus_one(ctx->ingress_ifindex))) == -1 ? XDP_DROP : XDP_PASS;
}

/* the frame grown by 56 bytes, as a hit's reply grows it: at the tail (the helper clears the new
 * bytes with memset), or at the head */
SEC("xdp")
int grow_tail(struct xdp_md *ctx)
{
	return bpf_xdp_adjust_tail(ctx, 56) ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int grow_head(struct xdp_md *ctx)
{
	return bpf_xdp_adjust_head(ctx, -56) ? XDP_DROP : XDP_PASS;
}

/* The same, with a reply's memory traffic around it: the request's 64 bytes read before, 120
 * bytes of the grown frame written after (the headers and the reply, in 8-byte stores). */
static __always_inline __u64 read_request(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *e = (void *)(long)ctx->data_end;
	__u64 sum = 0;

	if (d + 64 > e)
		return 0;
#pragma unroll
	for (int i = 0; i < 8; i++)
		sum += *(__u64 *)(d + i * 8);
	return sum;
}

static __always_inline int write_reply(struct xdp_md *ctx, __u64 v)
{
	void *d = (void *)(long)ctx->data, *e = (void *)(long)ctx->data_end;

	if (d + 120 > e)
		return XDP_DROP;
#pragma unroll
	for (int i = 0; i < 15; i++)
		*(__u64 *)(d + i * 8) = v + i;
	return XDP_PASS;
}

SEC("xdp")
int tail_rw(struct xdp_md *ctx)
{
	__u64 v = read_request(ctx);

	return bpf_xdp_adjust_tail(ctx, 56) ? XDP_DROP : write_reply(ctx, v);
}

SEC("xdp")
int head_rw(struct xdp_md *ctx)
{
	__u64 v = read_request(ctx);

	return bpf_xdp_adjust_head(ctx, -56) ? XDP_DROP : write_reply(ctx, v);
}

/* the tail call's target: returns at once */
SEC("xdp")
int tail_target(struct xdp_md *ctx)
{
	return XDP_PASS;
}

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__array(values, int(void *));
} next SEC(".maps") = {
	.values = { [0] = (void *)&tail_target },
};

SEC("xdp")
int tail_call(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &next, 0);
	return XDP_DROP; /* the call failed */
}
