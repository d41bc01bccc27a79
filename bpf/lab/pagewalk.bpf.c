// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* What a cache miss costs an XDP program by the pages its map lives in (`inklab pagewalk`,
 * docs/results/hitcost.md, nineteenth run). Each program follows a chain of WALK_LOADS dependent
 * reads, one 64-byte line each, through one of two maps holding the same kind of chain:
 * - `flat`: one large array map, as the kernel cache's sets and log are: the kernel allocates it
 *   with vmalloc, in 4 KiB pages;
 * - `outer`: an array of small array maps (INNER_LINES lines each, under 32 KiB with the map's
 *   header): the kernel allocates each with kmalloc, in its direct map, which x86-64 maps with
 *   1 GiB or 2 MiB pages. A read there costs one more load: the inner map's pointer (the verifier
 *   inlines both lookups).
 * Each run goes on from where the last one stopped (its position is kept in .bss). Run with
 * BPF_PROG_TEST_RUN after the CPU has slept or not, they tell what a halt costs a read through
 * each kind of page. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define WALK_LOADS  16
#define FLAT_LINES  (1 << 20)   /* 64 MiB */
#define INNER_LINES 480         /* 30 KiB a map */
#define INNER_MAPS  2048        /* 60 MiB in all */

struct line {
	__u32 next;            /* the chain's next line: an index into the same map */
	__u32 pad[15];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct line);
	__uint(max_entries, FLAT_LINES);
} flat SEC(".maps");

struct inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct line);
	__uint(max_entries, INNER_LINES);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, INNER_MAPS);
	__array(values, struct inner);
} outer SEC(".maps");

/* for user space (`inklab pagewalk` builds the chains and the inner maps) */
const volatile __u32 walk_loads = WALK_LOADS;
const volatile __u32 inner_lines = INNER_LINES;

/* where each chain goes on from (the line index; outer's: map * INNER_LINES + line) */
volatile __u32 at_flat, at_outer;

SEC("xdp")
int walk_flat(struct xdp_md *ctx)
{
	__u32 i = at_flat;

	for (int k = 0; k < WALK_LOADS; k++) {
		struct line *l = bpf_map_lookup_elem(&flat, &i);
		if (!l)
			return XDP_ABORTED;
		i = l->next;
	}
	at_flat = i;
	return XDP_PASS;
}

SEC("xdp")
int walk_outer(struct xdp_md *ctx)
{
	__u32 i = at_outer;

	for (int k = 0; k < WALK_LOADS; k++) {
		__u32 m = i / INNER_LINES, e = i % INNER_LINES;
		void *in = bpf_map_lookup_elem(&outer, &m);
		struct line *l;
		if (!in)
			return XDP_ABORTED;
		l = bpf_map_lookup_elem(in, &e);
		if (!l)
			return XDP_ABORTED;
		i = l->next;
	}
	at_outer = i;
	return XDP_PASS;
}
