/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Internet checksum helpers for scatter-gather. Sums are 32-bit, unfolded, in memory order (as
 * bpf_csum_diff() returns them), so partial sums chain through its seed. */
#ifndef SG_CSUM_H
#define SG_CSUM_H

static __always_inline __u32 sg_csum_add(__u32 a, __u32 b)
{
	__u32 r = a + b;

	return r + (r < a);
}

static __always_inline __u16 sg_csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Sum of `len` bytes at buf + off (buf: SG_DGRAM_MAX * 2 bytes or more), as if the bytes
 * started at an even offset of the packet and were padded with zeros to a multiple of 4. */
static __always_inline __u32 sg_sum_buf(const __u8 *buf, __u32 off, __u32 len)
{
	__u32 sum = 0;

	for (int i = 0; i < SG_DGRAM_MAX / SG_CHUNK; i++) {
		__u32 at = i * SG_CHUNK;
		__u32 n;
		__s64 r;

		if (at >= len)
			break;
		n = len - at;
		if (n > SG_CHUNK)
			n = SG_CHUNK;
		if (n & ~3U) {
			r = bpf_csum_diff(NULL, 0, (void *)(buf + ((off + at) & (SG_DGRAM_MAX - 1))),
					  n & ~3U, sum);
			if (r < 0)
				return sum;
			sum = (__u32)r;
		}
		if (n & 3) {
			__u8 tail[4] = {};
			__u32 t = (off + at + (n & ~3U)) & (SG_DGRAM_MAX - 1);

			tail[0] = buf[t];
			if ((n & 3) > 1)
				tail[1] = buf[t + 1];
			if ((n & 3) > 2)
				tail[2] = buf[t + 2];
			r = bpf_csum_diff(NULL, 0, (void *)tail, 4, sum);
			if (r >= 0)
				sum = (__u32)r;
		}
	}
	return sum;
}

#endif
