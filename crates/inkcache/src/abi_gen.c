/* Prints, as Rust, what bpf/inkcache_common.h defines for user space: the constants and the
 * counters (names, order, help texts). Built and run on the host by build.rs, so Rust follows the
 * C header and cannot drift from it. Struct layouts come from the skeletons (the programs' BTF). */
#include <stdio.h>
#include <linux/types.h>
#include <linux/bpf.h>

#include "inkcache_common.h"

static void quoted(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('"');
}

#define CONST(name, doc) \
	printf("/// %s\npub const %s: usize = %llu;\n", doc, #name, (unsigned long long)(name))
#define CONST64(name, doc) \
	printf("/// %s\npub const %s: u64 = %llu;\n", doc, #name, (unsigned long long)(name))

int main(void)
{
	printf("// Generated from bpf/inkcache_common.h by crates/inkcache/src/abi_gen.c. Do not edit.\n");
	CONST(KEY_MAX, "Longest key (memcached's KEY_MAX_LENGTH).");
	CONST(UDP_HDR_MC, "Bytes of memcached's UDP frame header.");
	CONST(DGRAM_MAX, "Largest datagram memcached sends, frame header included.");
	CONST(PAYLOAD_MAX, "Largest UDP payload after the frame header.");
	CONST(ITEM_MAX, "Largest item (`VALUE <key> <flags> <bytes>\\r\\n<data>\\r\\n`) the kernel stores.");
	CONST(ITEM_CAP, "ITEM_MAX rounded up to the log's 16-byte units.");
	CONST(MAX_GET_KEYS, "Keys of one get the kernel answers.");
	CONST(SCRATCH_LEN, "Bytes of the per-CPU scratch buffers.");
	CONST(WAYS, "Ways per index set.");
	CONST(ITEM_HDR, "Bytes of an item's header in the log (struct ink_item), before its text.");
	CONST(ITEM_LEN_OFF, "Offset of an item header's text length (u16, struct ink_item.len).");
	CONST(SEG_BYTES, "Item bytes per arena segment.");
	CONST(SEG_UNITS, "16-byte units per arena segment.");
	CONST(SLOT_BYTES, "Bytes of a hot slot.");
	CONST(SETS_PER_SLOT, "Index sets per hot slot.");
	CONST(CONN_FIFO, "Writes per followed connection awaiting their answers.");
	CONST(PART_MAX, "Bytes of a line cut by a segment end that are carried over.");
	CONST(IFACE_SLOTS, "Slots of the `ifaces` map (by ifindex modulo this).");
	CONST(IFACE_ADDRS, "Addresses listed per interface and family.");
	CONST(VLAN_DEVS, "Entries of the `vlans` map (VLAN devices on attached interfaces).");
	CONST(IFACE_CSUM_PARTIAL, "struct ink_iface flags: UDP checksums may be left partial.");
	CONST(IFACE_LOOPBACK, "struct ink_iface flags: the loopback interface.");
	CONST(CONN_OUT_OK, "struct ink_conn flags: the server's byte numbering is known.");
	CONST64(EXP_NEVER, "Expiry of an item that never expires.");
	CONST64(EXP_UNKNOWN, "Expiry of an item that must not be served.");
	CONST(ST_MAX, "Number of counters.");
	printf("counters! {\n");
#define COUNTER(e, name, help)                                                                  \
	printf("    #[doc = ");                                                                 \
	quoted(help);                                                                           \
	printf("]\n    %s = %d,\n", #name, ST_##e);
	INK_STATS(COUNTER)
	printf("}\n");
	return 0;
}
