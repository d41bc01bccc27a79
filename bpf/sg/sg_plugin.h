/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Writing an aggregation program of your own.
 *
 *     #include "sg_plugin.h"
 *
 *     static __always_inline int my_agg(__u8 *agg, const __u8 *data, __u32 len, __u32 worker)
 *     {
 *             ...   // fold `data` (the answer, len bytes) into `agg` (SG_VEC_BYTES bytes)
 *             return 0;   // < 0: the answer is malformed (refused and counted; do not write agg)
 *     }
 *     SG_AGGREGATOR(my_program, my_agg)
 *
 * inksg's gather program does the rest: it parses the answer, checks that its request is in
 * flight and that the sender was asked and has not answered yet, copies the data to `data`,
 * locks the request's slot and tail-calls `my_program`, which runs `my_agg` under that lock (so
 * `my_agg` may not call helpers; loops must be bounded) and then counts the answer, applies the
 * completion policy and reports. `agg` starts zeroed; the request's `vec_len` (bytes) is how much
 * of it the client receives. Load it with `Sg::add_aggregator` (Rust), which shares the maps.
 *
 * Build: clang -O2 -g -target bpf -I<inksg>/bpf/sg -c my.bpf.c -o my.bpf.o */
#ifndef SG_PLUGIN_H
#define SG_PLUGIN_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "sg_gather.h"

#define SG_AGGREGATOR(name, fn)                                                 \
	SEC("xdp")                                                              \
	int name(struct xdp_md *ctx)                                            \
	{                                                                       \
		struct sg_agg a;                                                \
		struct sg_slot *s = sg_agg_begin(&a);                          \
		if (!s)                                                         \
			return XDP_DROP;                                        \
		a.rc = fn(s->agg, a.sc->data, a.sc->len & (SG_DGRAM_MAX - 1),  \
			  a.sc->worker);                                        \
		return sg_agg_end(&a);                                          \
	}

#endif
