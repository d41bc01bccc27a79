#!/usr/bin/env python3
"""raw_gets.py IFACE DST_MAC KEY N PAD [SPORT]: sends N memcached UDP gets of KEY as raw IPv4 frames
from 198.18.0.2:SPORT (default 40000) to 198.18.0.1:11211 (request ids cycling 0-255), each
followed by PAD bytes of padding after the IP packet: the frame is longer than the packet, so a
reply up to PAD bytes larger than the request fits the frame XDP gets. A UDP socket on SPORT takes
the replies (no ICMP port unreachable); prints how many were sent and received."""
import socket
import struct
import sys
import time

iface, mac, key, n, pad = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sport = int(sys.argv[6]) if len(sys.argv) > 6 else 40000
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind(("198.18.0.2", sport))
sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
sink.setblocking(False)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
src, dst = s.getsockname()[4], bytes.fromhex(mac.replace(":", ""))


def csum(b):
    t = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return (~t) & 0xFFFF


frames = []
for i in range(256):
    payload = struct.pack("!HHHH", i, 0, 1, 0) + f"get {key}\r\n".encode()
    udp = struct.pack("!HHHH", sport, 11211, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                     socket.inet_aton("198.18.0.2"), socket.inet_aton("198.18.0.1"))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    frames.append(dst + src + b"\x08\x00" + ip + udp + b"\0" * pad)


def drain():
    got = 0
    try:
        while True:
            sink.recv(4096)
            got += 1
    except BlockingIOError:
        return got


got = 0
for i in range(n):
    s.send(frames[i & 255])
    if i % 64 == 63:  # stay well below what the server side drops
        time.sleep(0.0005)
        got += drain()
time.sleep(0.2)
got += drain()
print(f"sent {n} received {got}")
