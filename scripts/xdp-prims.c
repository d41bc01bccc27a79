// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Times each program of xdp-prims.bpf.c under BPF_PROG_TEST_RUN as tests/unit/cost.rs times a
 * hit: one run per syscall on a fresh 64-byte frame, the mean of 20,000, best of ROUNDS; prints
 * ns per run and the difference from the `pass` program. Every run must return XDP_PASS (a
 * failed helper or tail call returns XDP_DROP: the tool then stops). Root; with libbpf-dev:
 *   clang -O2 -g -target bpf -I/usr/include/$(uname -m)-linux-gnu -c scripts/xdp-prims.bpf.c \
 *       -o /tmp/xdp-prims.bpf.o
 *   gcc -O2 -o /tmp/xdp-prims scripts/xdp-prims.c -lbpf
 *   taskset -c 1 /tmp/xdp-prims /tmp/xdp-prims.bpf.o [ROUNDS=5]
 * (with kernel.bpf_stats_enabled 0: the statistics add two clock reads to every run) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#define RUNS 20000

/* The best of `rounds` means of RUNS runs, in ns; 0 on failure. */
static unsigned long long time_prog(int fd, const unsigned char *frame, int rounds)
{
	unsigned long long best = ~0ULL;

	for (int r = 0; r < rounds; r++) {
		unsigned long long total = 0;
		for (int i = 0; i < RUNS; i++) {
			LIBBPF_OPTS(bpf_test_run_opts, t, .data_in = frame, .data_size_in = 64,
				    .repeat = 1);
			if (bpf_prog_test_run_opts(fd, &t)) {
				perror("xdp-prims: BPF_PROG_TEST_RUN");
				return 0;
			}
			if (t.retval != XDP_PASS) {
				fprintf(stderr, "xdp-prims: returned %u, not XDP_PASS\n", t.retval);
				return 0;
			}
			total += t.duration;
		}
		if (total / RUNS < best)
			best = total / RUNS;
	}
	return best;
}

int main(int argc, char **argv)
{
	unsigned char frame[64] = { 0 };
	struct bpf_object *obj;
	struct bpf_program *prog;
	unsigned long long base;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;

	if (argc < 2 || rounds < 1) {
		fprintf(stderr, "usage: %s XDP_PRIMS_BPF_O [ROUNDS]\n", argv[0]);
		return 2;
	}
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "xdp-prims: cannot load %s\n", argv[1]);
		return 1;
	}
	memset(frame, 0xff, 12); /* Ethernet, IPv4 EtherType: the contents do not matter */
	frame[12] = 0x08;
	prog = bpf_object__find_program_by_name(obj, "pass");
	base = prog ? time_prog(bpf_program__fd(prog), frame, rounds) : 0;
	if (!base)
		return 1;
	bpf_object__for_each_program(prog, obj) {
		unsigned long long ns = time_prog(bpf_program__fd(prog), frame, rounds);
		if (!ns)
			return 1;
		printf("%-10s %4llu ns per run, %+4lld over pass\n", bpf_program__name(prog), ns,
		       (long long)ns - (long long)base);
	}
	bpf_object__close(obj);
	return 0;
}
