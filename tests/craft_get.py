#!/usr/bin/env python3
"""Sends one crafted memcached UDP get on a raw socket and prints what answered it.

usage: craft_get.py IFACE DST_MAC SRC_IP DST_IP KEY [--bad-udp-csum] [--bad-ip-csum]
                    [--no-udp-csum]
Prints one JSON object: {"payload": <the memcached message (after the frame header) of the first reply from port 11211 to our
port, as latin-1, or null>}. Replies are looked for on the interface itself (any destination:
a reply to a spoofed source still leaves through it), for 0.6 s.
"""
import json, socket, struct, sys, time

iface, dst_mac, src_ip, dst_ip, key = sys.argv[1:6]
flags = set(sys.argv[6:])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
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

sport = 40000 + (int(time.time() * 1000) % 20000)
payload = struct.pack("!HHHH", 0x4242, 0, 1, 0) + f"get {key}\r\n".encode()
udp = struct.pack("!HHHH", sport, 11211, 8 + len(payload), 0) + payload
if "--no-udp-csum" not in flags:
    pseudo = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!HH", 17, len(udp))
    c = csum(pseudo + udp) or 0xFFFF
    if "--bad-udp-csum" in flags:
        c ^= 0x0101
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                 socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
c = csum(ip)
if "--bad-ip-csum" in flags:
    c ^= 0x0110
ip = ip[:10] + struct.pack("!H", c) + ip[12:]
s.send(dst + src_mac + struct.pack("!H", 0x0800) + ip + udp)

deadline = time.time() + 0.6
out = {"payload": None}
while time.time() < deadline:
    s.settimeout(max(0.01, deadline - time.time()))
    try:
        data, addr = s.recvfrom(65536)
    except socket.timeout:
        break
    if addr[2] == socket.PACKET_OUTGOING or struct.unpack("!H", data[12:14])[0] != 0x0800:
        continue
    iph = data[14:]
    ihl = (iph[0] & 15) * 4
    if iph[9] != 17:
        continue
    u = iph[ihl:struct.unpack("!H", iph[2:4])[0]]
    sp, dp = struct.unpack("!HH", u[:4])
    if sp == 11211 and dp == sport:
        out["payload"] = u[16:].decode("latin-1")  # past the UDP and memcached frame headers
        break
print(json.dumps(out))
