// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* An example of an application's own aggregation program (see sg_plugin.h): every answer starts
 * with a big-endian u64 score; the aggregate is the best score, the worker that had it and how
 * many answers were folded (struct argmax, host order). Used by inksg's tests. */
#include "sg_plugin.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct argmax {
	__u64 best;
	__u32 worker;
	__u32 answers;
};

static __always_inline int argmax(__u8 *agg, const __u8 *data, __u32 len, __u32 worker)
{
	struct argmax *a = (struct argmax *)agg;
	__u64 v;

	if (len < 8)
		return -1;
	v = __builtin_bswap64(*(const __u64 *)data);
	if (a->answers == 0 || v > a->best) {
		a->best = v;
		a->worker = worker;
	}
	a->answers++;
	return 0;
}

SG_AGGREGATOR(sg_argmax, argmax)
