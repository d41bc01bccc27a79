#!/usr/bin/python3
"""Clients of a memcached pool sharded by consistent hashing, writing over TCP and reading with
UDP gets (for scripts/pool-demo.sh and crates/inkcache/tests/pool.rs).

Two real clients, each with its own consistent hashing:
  ketama  pylibmc (libmemcached, behaviour "ketama") writes over TCP; its UDP gets go to the server
          libmemcached itself picks for the key (memcached_server_by_key, same library and
          behaviours as pylibmc: libmemcached does not send gets over UDP).
  hrw     pymemcache's HashClient (rendezvous hashing) writes over TCP; its UDP gets go to the
          node pymemcache's own RendezvousHash picks.

usage: pool_client.py SERVERS COMMAND [--keys N] [--prefix P]
  SERVERS   HOST:PORT,HOST:PORT,...
  write     store N keys per client (values derived from the key)
  place     check each client's placement against where the keys really are (TCP get on every
            server): prints per-server counts and mismatches
  udp       UDP gets of every key from the server its client picks: prints answered/correct/wrong
            and missing keys per server
  tcp       TCP gets through each client: prints found/correct/wrong per server
Output: one JSON object, or lines for people with --text.
"""
import ctypes
import json
import socket
import struct
import sys
import time

import pylibmc
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient
from pymemcache.client.rendezvous import RendezvousHash

MEMCACHED_BEHAVIOR_KETAMA = 3


class Ketama:
    """libmemcached's own choice of server for a key, configured as pylibmc configures it."""

    def __init__(self, servers):
        lib = ctypes.CDLL("libmemcached.so.11")
        lib.memcached_create.restype = ctypes.c_void_p
        lib.memcached_create.argtypes = [ctypes.c_void_p]
        lib.memcached_server_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16]
        lib.memcached_behavior_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        lib.memcached_server_by_key.restype = ctypes.c_void_p
        lib.memcached_server_by_key.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
        lib.memcached_server_name.restype = ctypes.c_char_p
        lib.memcached_server_name.argtypes = [ctypes.c_void_p]
        lib.memcached_server_port.restype = ctypes.c_uint16
        lib.memcached_server_port.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.mc = lib.memcached_create(None)
        for host, port in servers:
            if lib.memcached_server_add(self.mc, host.encode(), port) != 0:
                raise SystemExit(f"libmemcached refused server {host}:{port}")
        # pylibmc adds the servers, then applies the behaviours
        lib.memcached_behavior_set(self.mc, MEMCACHED_BEHAVIOR_KETAMA, 1)

    def server(self, key):
        rc = ctypes.c_int(0)
        k = key.encode()
        inst = self.lib.memcached_server_by_key(self.mc, k, len(k), ctypes.byref(rc))
        if not inst:
            raise SystemExit(f"libmemcached has no server for {key} (rc {rc.value})")
        name = self.lib.memcached_server_name(inst).decode()
        return f"{name}:{self.lib.memcached_server_port(inst)}"


def value_of(key):
    return (key + "=") * 3


def udp_gets(by_server, timeout=0.6):
    """UDP gets of keys grouped by server, all in flight at once; returns {key: value or None}."""
    out = {}
    for server, keys in by_server.items():
        host, port = server.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        ids = {}
        for i, k in enumerate(keys):
            rid = (i + 1) & 0xFFFF
            ids[rid] = k
            out[k] = None
            # memcached's UDP frame header: request id, sequence, datagrams, reserved
            s.sendto(struct.pack("!HHHH", rid, 0, 1, 0) + f"get {k}\r\n".encode(),
                     (host, int(port)))
        deadline = time.time() + timeout
        answered = set()
        while time.time() < deadline and len(answered) < len(keys):
            try:
                d, _ = s.recvfrom(65536)
            except BlockingIOError:
                time.sleep(0.002)
                continue
            except ConnectionRefusedError:
                continue  # the ICMP of a dead server
            rid, seq, total, _ = struct.unpack("!HHHH", d[:8])
            k = ids.get(rid)
            if k is None or seq != 0 or total != 1:
                continue
            body = d[8:]
            answered.add(rid)
            head = f"VALUE {k} ".encode()
            if body.startswith(head):
                line, rest = body.split(b"\r\n", 1)
                n = int(line.split()[3])
                out[k] = rest[:n].decode()
        s.close()
    return out


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    servers = [(h, int(p)) for h, p in (x.rsplit(":", 1) for x in args[0].split(","))]
    cmd = args[1]
    n = int(args[args.index("--keys") + 1]) if "--keys" in args else 300
    prefix = args[args.index("--prefix") + 1] if "--prefix" in args else "pool"
    names = [f"{h}:{p}" for h, p in servers]

    ketama = Ketama(servers)
    hrw = RendezvousHash(nodes=names)
    clients = {
        "ketama": {
            "keys": [f"{prefix}:k:{i}" for i in range(n)],
            "pick": ketama.server,
        },
        "hrw": {
            "keys": [f"{prefix}:h:{i}" for i in range(n)],
            "pick": hrw.get_node,
        },
    }

    def pylibmc_client():
        return pylibmc.Client(names, behaviors={"ketama": True, "connect_timeout": 500})

    def hash_client():
        return HashClient(servers, connect_timeout=0.5, timeout=0.5, ignore_exc=True,
                          retry_attempts=1, dead_timeout=60)

    result = {}
    if cmd == "write":
        mc = pylibmc_client()
        failed = mc.set_multi({k: value_of(k) for k in clients["ketama"]["keys"]})
        hc = hash_client()
        hfailed = hc.set_many({k: value_of(k) for k in clients["hrw"]["keys"]})
        result = {"ketama_failed": len(failed), "hrw_failed": len(hfailed)}
    elif cmd == "place":
        direct = {s: Client(tuple((s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1]))),
                            connect_timeout=1, timeout=1) for s in names}
        for name, c in clients.items():
            counts = {s: 0 for s in names}
            mismatch = 0
            for k in c["keys"]:
                holders = [s for s, d in direct.items() if d.get(k) is not None]
                want = c["pick"](k)
                counts[want] += 1
                if holders != [want]:
                    mismatch += 1
            result[name] = {"per_server": counts, "mismatches": mismatch}
    elif cmd == "udp":
        for name, c in clients.items():
            by_server = {}
            for k in c["keys"]:
                by_server.setdefault(c["pick"](k), []).append(k)
            got = udp_gets(by_server)
            per = {}
            for s, keys in by_server.items():
                ok = sum(1 for k in keys if got[k] == value_of(k))
                wrong = sum(1 for k in keys if got[k] is not None and got[k] != value_of(k))
                per[s] = {"keys": len(keys), "correct": ok, "wrong": wrong,
                          "missing": len(keys) - ok - wrong}
            result[name] = per
    elif cmd == "tcp":
        mc = pylibmc_client()
        hc = hash_client()
        for name, c in clients.items():
            per = {}
            for k in c["keys"]:
                s = c["pick"](k)
                try:
                    v = mc.get(k) if name == "ketama" else hc.get(k)
                except pylibmc.Error:
                    v = None
                if isinstance(v, bytes):
                    v = v.decode()
                p = per.setdefault(s, {"keys": 0, "correct": 0, "wrong": 0, "missing": 0})
                p["keys"] += 1
                if v is None:
                    p["missing"] += 1
                elif v == value_of(k):
                    p["correct"] += 1
                else:
                    p["wrong"] += 1
            result[name] = per
    else:
        raise SystemExit(__doc__)
    if "--text" not in args:
        print(json.dumps(result, sort_keys=True))
        return
    for name, r in sorted(result.items()):
        if cmd == "place":
            print(f"   {name:<7} keys per server {r['per_server']}, mismatches: {r['mismatches']}")
        elif cmd in ("udp", "tcp"):
            for s, c in sorted(r.items()):
                print(f"   {name:<7} {s:<18} {c['keys']:>4} keys: {c['correct']:>4} correct, "
                      f"{c['wrong']} wrong, {c['missing']:>4} missing")
        else:
            print(f"   {name}: {r}")


if __name__ == "__main__":
    main()
