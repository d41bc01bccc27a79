// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Memory latency of the machine, for reading hit costs (docs/results/hitcost.md): CHAINS
 * independent chains of dependent loads, each load a random 64-byte line of a MB-megabyte buffer
 * on 4 KiB pages (HUGE 0) or transparent huge pages (HUGE 1). One chain is a cache miss waited for
 * whole (a lookup's set line, then the item it names); ten chains show how far misses overlap
 * when their addresses are known in advance. Prints ns per load.
 *   gcc -O2 -o /tmp/memlat scripts/memlat.c && taskset -c 1 /tmp/memlat MB HUGE CHAINS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LINE 64
#define HUGE_PAGE (2UL << 20)
#define LOADS 8000000L

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: memlat MB HUGE CHAINS (CHAINS 1..16)\n");
		return 2;
	}
	size_t bytes = (size_t)atoi(argv[1]) << 20, lines = bytes / LINE;
	int huge = atoi(argv[2]), chains = atoi(argv[3]);
	if (lines < 16 || chains < 1 || chains > 16) {
		fprintf(stderr, "memlat: MB must be at least 1, CHAINS 1..16\n");
		return 2;
	}
	char *raw = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		perror("memlat: mmap");
		return 1;
	}
	char *buf = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
	madvise(buf, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	memset(buf, 1, bytes);

	/* one random cycle through every line; the chains start at evenly spaced points of it */
	size_t *order = malloc(lines * sizeof(*order));
	if (!order) {
		perror("memlat: malloc");
		return 1;
	}
	for (size_t i = 0; i < lines; i++)
		order[i] = i;
	srand(1);
	for (size_t i = lines - 1; i > 0; i--) {
		size_t j = (((size_t)rand() << 31) ^ (size_t)rand()) % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		*(char **)(buf + order[i] * LINE) = buf + order[(i + 1) % lines] * LINE;

	char *at[16];
	for (int c = 0; c < chains; c++)
		at[c] = buf + order[c * (lines / chains)] * LINE;
	long rounds = LOADS / chains;
	double t0 = now_ns();
	for (long r = 0; r < rounds; r++)
		for (int c = 0; c < chains; c++)
			at[c] = *(char **)at[c];
	double t1 = now_ns();
	uintptr_t keep = 0;
	for (int c = 0; c < chains; c++)
		keep ^= (uintptr_t)at[c];
	printf("%zu MB, %s pages, %d chain(s): %.1f ns per load%s\n", bytes >> 20,
	       huge ? "huge" : "4 KiB", chains, (t1 - t0) / (rounds * chains), keep ? "" : " ");
	return 0;
}
