/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The maps of scatter-gather. Every object that includes this (sg.bpf.c and the custom
 * aggregation programs) gets the same definitions; the library hands them one set of maps by
 * name. Sizes marked "set by the library" are placeholders replaced before loading. */
#ifndef SG_MAPS_H
#define SG_MAPS_H

#include "sg_common.h"

/* Bytes of concatenated answers one request may gather (set by the library, >= SG_VEC_BYTES).
 * `results` values are SG_EVENT_HDR + result_cap + SG_DGRAM_MAX bytes. */
const volatile __u32 result_cap = SG_VEC_BYTES;

/* Requests in flight: clients * slots per client (set by the library). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sg_slot);
	__uint(max_entries, 1024);
} slots SEC(".maps");

/* Each slot's result as reported: struct sg_event, then the aggregate or the records. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, SG_EVENT_HDR + SG_VEC_BYTES + SG_DGRAM_MAX);
	__uint(max_entries, 1024);
} results SEC(".maps");

struct sg_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SG_RING_BYTES);
};

/* One ring buffer per client: its results, and its epoll fd. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, SG_MAX_CLIENTS);
	__type(key, __u32);
	__array(values, struct sg_ring);
} rings SEC(".maps");

/* Registered client sockets by UDP port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, struct sg_client);
	__uint(max_entries, SG_MAX_CLIENTS);
} clients SEC(".maps");

/* Workers of every group (set by the library: groups * SG_MAX_WORKERS). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sg_worker);
	__uint(max_entries, 16 * SG_MAX_WORKERS);
} workers SEC(".maps");

/* Group sizes (set by the library: groups). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 16);
} groups SEC(".maps");

/* Who may answer for a group: (address, port, group) -> worker index. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct sg_member_key);
	__type(value, __u32);
	__uint(max_entries, 16 * SG_MAX_WORKERS);
} members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, ST_MAX);
} stats SEC(".maps");

/* An answer being gathered, per CPU: its data, and what a custom aggregation program needs. */
struct sg_scratch {
	__u8 data[SG_DGRAM_MAX + 64];
	__u32 slot;
	__u32 worker;
	__u32 len;
	__u32 req_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct sg_scratch);
	__uint(max_entries, 1);
} xdp_scratch SEC(".maps");

/* Applications' aggregation programs (SG_RED_CUSTOM + index). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, SG_CUSTOM_MAX);
} aggregators SEC(".maps");

static __always_inline void sg_count(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &what);

	if (c)
		*c += 1;
}

#endif
