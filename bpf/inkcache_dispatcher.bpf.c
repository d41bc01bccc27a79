// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* An XDP dispatcher in the format of libxdp's multi-program protocol (version 2, the one Debian's
 * xdp-tools 1.3 speaks): it lets inkcache share an interface with programs that xdp-loader or any
 * libxdp user attaches, and lets them see inkcache in `xdp-loader status`.
 *
 * The entry point calls the slot functions slot by slot; each component program replaces one
 * slot (an freplace/EXT program), or the entry itself when it is alone. A slot's return value
 * goes on to the next slot when its bit is set in that slot's chain_call_actions, and is the
 * verdict otherwise. The configuration is read-only data, so the verifier drops the calls to
 * the slots past num_progs_enabled. What libxdp checks to recognise a dispatcher: the program
 * name xdp_dispatcher, one map (this configuration: one 4-byte key, read-only for programs), the
 * magic and the version in its first two bytes, and prog0..prog9 functions in the BTF; the
 * components' programs and links are pinned under /sys/fs/bpf/xdp/dispatch-IFINDEX-PROGID/ (see
 * crates/inkcache/src/xdp.rs). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define DISPATCHER_MAGIC   236 /* 'X' + 'D' + 'P' */
#define DISPATCHER_VERSION 2
#define DISPATCHER_SLOTS   10
#define SLOT_RETVAL        31  /* what an empty slot returns: always chained on */

struct xdp_dispatcher_config {
	__u8 magic;
	__u8 dispatcher_version;
	__u8 num_progs_enabled;
	__u8 is_xdp_frags;
	__u32 chain_call_actions[DISPATCHER_SLOTS];
	__u32 run_prios[DISPATCHER_SLOTS];
	__u32 program_flags[DISPATCHER_SLOTS];
};

/* Filled in by user space before loading (frozen then). */
volatile const struct xdp_dispatcher_config conf = {};

/* A slot. The volatile result keeps the compiler from folding it into the caller; the no-op
 * tail adjustment marks the slot as one that may change packet data, which kernels from 6.13
 * require of a function that a program doing so (inkcache does) replaces. */
#define SLOT(n)                                                                                    \
	__attribute__((noinline)) int prog##n(struct xdp_md *ctx)                                  \
	{                                                                                          \
		volatile int ret = SLOT_RETVAL;                                                    \
		if (!ctx)                                                                          \
			return XDP_ABORTED;                                                        \
		bpf_xdp_adjust_tail(ctx, 0);                                                       \
		return ret;                                                                        \
	}
SLOT(0)
SLOT(1)
SLOT(2)
SLOT(3)
SLOT(4)
SLOT(5)
SLOT(6)
SLOT(7)
SLOT(8)
SLOT(9)

#define RUN(n)                                                                                     \
	if (conf.num_progs_enabled < (n) + 1)                                                      \
		goto pass;                                                                         \
	ret = prog##n(ctx);                                                                        \
	if (ret < 0 || ret > SLOT_RETVAL || !((1U << ret) & conf.chain_call_actions[n]))           \
		return ret;

SEC("xdp")
int xdp_dispatcher(struct xdp_md *ctx)
{
	int ret;

	RUN(0)
	RUN(1)
	RUN(2)
	RUN(3)
	RUN(4)
	RUN(5)
	RUN(6)
	RUN(7)
	RUN(8)
	RUN(9)
pass:
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
/* The version again as BTF metadata, where libxdp 1.0 (dispatcher version 1) looked for it. */
int (*dispatcher_version)[DISPATCHER_VERSION] SEC("xdp_metadata");
