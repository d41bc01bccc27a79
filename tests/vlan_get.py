#!/usr/bin/env python3
"""Sends a memcached UDP get inside one or two VLAN tags on a raw socket and prints the reply.

usage: vlan_get.py IFACE DST_MAC SRC_IP DST_IP KEY TAG[,TAG]
Prints one JSON object: {"payload": <UDP payload as latin-1>, "vlan_tags": [outer.., inner],
"udp_csum_ok": <the reply's UDP checksum verifies>}. The request carries no UDP checksum, so the
reply must carry a complete one.
"payload" is null if nothing answered within a second (the host drops a frame tagged with a VLAN id
it has no device for).
"""
import json, socket, struct, sys, time

iface, dst_mac, src_ip, dst_ip, key, tags = sys.argv[1:7]
tags = [int(t) for t in tags.split(",")]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
s.bind((iface, 0))
src_mac = s.getsockname()[4]
dst = bytes.fromhex(dst_mac.replace(":", ""))

def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack(f"!{len(b)//2}H", b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return (~t) & 0xFFFF

payload = struct.pack("!HHHH", 0x7777, 0, 1, 0) + f"get {key}\r\n".encode()
sport = 40000
udp = struct.pack("!HHHH", sport, 11211, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                 socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
eth = dst + src_mac
tpids = [0x88A8] + [0x8100] * (len(tags) - 1) if len(tags) > 1 else [0x8100]
for tpid, tag in zip(tpids, tags):
    eth += struct.pack("!HH", tpid, tag)
eth += struct.pack("!H", 0x0800)
s.send(eth + ip + udp)

deadline = time.time() + 1.0
out = {"payload": None, "vlan_tags": []}
while time.time() < deadline:
    s.settimeout(max(0.01, deadline - time.time()))
    try:
        data, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(32))
    except socket.timeout:
        break
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    # find the IPv4 header after any tags left in the data
    off = 12
    while struct.unpack("!H", data[off:off + 2])[0] in (0x8100, 0x88A8):
        off += 4
    if struct.unpack("!H", data[off:off + 2])[0] != 0x0800:
        continue
    iph = data[off + 2:]
    ihl = (iph[0] & 15) * 4
    if iph[9] != 17:
        continue
    u = iph[ihl:struct.unpack("!H", iph[2:4])[0]]
    sp, dp = struct.unpack("!HH", u[:4])
    if sp != 11211 or dp != sport:
        continue
    # the receiving stack may move the outer tag into metadata (PACKET_AUXDATA)
    for level, typ, cdata in anc:
        if level == 263 and typ == 8:
            status, _, _, _, _, tci, _ = struct.unpack("=IIIHHHH", cdata[:20])
            if status & 0x10:  # TP_STATUS_VLAN_VALID
                out["vlan_tags"].append(tci & 0xFFF)
    for o in range(12, off, 4):
        out["vlan_tags"].append(struct.unpack("!H", data[o + 2:o + 4])[0] & 0xFFF)
    out["payload"] = u[8:].decode("latin-1")
    pseudo = iph[12:20] + struct.pack("!HH", 17, len(u))
    out["udp_csum_ok"] = csum(pseudo + u) == 0
    break
print(json.dumps(out))
