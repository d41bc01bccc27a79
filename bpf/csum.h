/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Internet checksum helpers. Sums are kept in "memory order": 16-bit words loaded as they lie in
 * the packet, which is what bpf_csum_diff() returns too, so partial sums combine by addition. */
#ifndef INKCACHE_CSUM_H
#define INKCACHE_CSUM_H

static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	__u32 r = a + b;
	return r + (r < a);
}

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Sum of `n` 16-bit words at p (n a compile-time constant, p checked by the caller). */
static __always_inline __u32 csum_words(const __u16 *p, int n)
{
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < n; i++)
		s += p[i];
	return s;
}

/* The two 32-bit halves of w summed: what a 64-bit sum of halves (below) adds for one word. */
static __always_inline __u64 csum_halves(__u64 w)
{
	return (w & 0xffffffff) + (w >> 32);
}

/* A 64-bit sum of 32-bit halves of words laid from byte `off` of a message, as the 16-bit sum
 * (memory order) it adds to the message's: folded, and its bytes swapped if off is odd (the
 * message pairs those bytes the other way; a ones' complement sum commutes with the swap). */
static __always_inline __u32 csum_at(__u64 acc, __u32 off)
{
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	if (off & 1)
		acc = ((acc & 0xff) << 8) | (acc >> 8);
	return (__u32)acc;
}

/* Sum of the 16-bit words of an address as it lies in memory (IPv4: its last 4 bytes, as
 * struct pkt keeps it). */
static __always_inline __u32 addr_sum(const __u8 *a, int v6)
{
	const __u16 *w = (const __u16 *)a;
	__u32 sum = w[6] + w[7];

	if (v6)
		sum += w[0] + w[1] + w[2] + w[3] + w[4] + w[5];
	return sum;
}

#endif
