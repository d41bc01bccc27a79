"""Exercises every text-protocol command of inkcached through pymemcache (TCP)."""
import sys
import time

from pymemcache.client.base import Client

port = int(sys.argv[1])
c = Client(("127.0.0.1", port), connect_timeout=5, timeout=5)


def raw(req, end=b"\r\n"):
    """Commands pymemcache 3.5 lacks (gat, gats, meta) over a plain socket."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(req)
        out = b""
        while not out.endswith(end) or (out.startswith(b"VALUE") and not out.endswith(b"END\r\n")):
            d = s.recv(65536)
            if not d:
                break
            out += d
        return out


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


check(c.version().startswith(b"1.6"), "version")
check(c.flush_all(noreply=False), "flush_all")

# set / get / get_many / flags
check(c.set("a", b"1", noreply=False), "set")
check(c.get("a") == b"1", "get")
check(c.set("b", b"two", expire=0, noreply=True) is True, "set noreply")
check(c.get_many(["a", "b", "missing"]) == {"a": b"1", "b": b"two"}, "get_many")
check(c.get("missing") is None, "get miss")
check(c.set("f", b"x", noreply=False, flags=4294967295), "set flags")
check(raw(b"get f\r\n") == b"VALUE f 4294967295 1\r\nx\r\nEND\r\n", "32-bit flags")

# add / replace
check(c.add("a", b"x", noreply=False) is False, "add existing")
check(c.add("new", b"n", noreply=False) is True, "add new")
check(c.replace("nope", b"x", noreply=False) is False, "replace missing")
check(c.replace("new", b"n2", noreply=False) is True, "replace")
check(c.get("new") == b"n2", "replace value")

# append / prepend
check(c.append("new", b"-tail", noreply=False) is True, "append")
check(c.prepend("new", b"head-", noreply=False) is True, "prepend")
check(c.get("new") == b"head-n2-tail", "append/prepend value")
check(c.append("nope", b"x", noreply=False) is False, "append missing")

# gets / cas
v, cas = c.gets("new")
check(v == b"head-n2-tail" and cas is not None, "gets")
check(c.cas("new", b"casd", cas, noreply=False) is True, "cas ok")
check(c.cas("new", b"again", cas, noreply=False) is False, "cas stale -> EXISTS")
check(c.cas("nope", b"x", 1, noreply=False) is None, "cas missing -> NOT_FOUND")
many = c.gets_many(["a", "new"])
check(set(many) == {"a", "new"} and many["new"][0] == b"casd", "gets_many")

# incr / decr
check(c.set("n", b"10", noreply=False), "set n")
check(c.incr("n", 5) == 15, "incr")
check(c.decr("n", 20) == 0, "decr floors at 0")
check(c.incr("missing", 1) is None, "incr missing")
check(c.decr("missing", 1) is None, "decr missing")
check(c.set("n", b"18446744073709551615", noreply=False), "set max")
check(c.incr("n", 1) == 0, "incr wraps")

# delete
check(c.delete("a", noreply=False) is True, "delete")
check(c.delete("a", noreply=False) is False, "delete missing")
check(c.get("a") is None, "deleted")

# touch / gat / gats / expiry
check(c.set("t", b"tv", expire=100, noreply=False), "set t")
check(c.touch("t", 1, noreply=False) is True, "touch")
check(c.touch("nope", 1, noreply=False) is False, "touch missing")
check(raw(b"gat 100 t\r\n") == b"VALUE t 0 2\r\ntv\r\nEND\r\n", "gat")
check(raw(b"gats 100 t nope\r\n").startswith(b"VALUE t 0 2 "), "gats")
check(raw(b"gat 100 nope\r\n") == b"END\r\n", "gat miss")
# meta commands
check(raw(b"ms mk 2 T0 F7\r\nhi\r\n") == b"HD\r\n", "ms")
check(raw(b"mg mk v f k Oxx\r\n") == b"VA 2 f7 kmk Oxx\r\nhi\r\n", "mg")
check(raw(b"mg nokey v\r\n") == b"EN\r\n", "mg miss")
check(raw(b"ma mcnt N0 J5 v\r\n") == b"VA 1\r\n5\r\n", "ma autoviv")
check(raw(b"ma mcnt D10 v\r\n") == b"VA 2\r\n15\r\n", "ma incr")
check(raw(b"md mk\r\n") == b"HD\r\n", "md")
check(raw(b"md mk q\r\nmn\r\n") == b"NF\r\nMN\r\n", "md q + mn")
check(c.set("neg", b"x", expire=-1, noreply=False), "set negative exptime")
check(c.get("neg") is None, "negative exptime expires at once")
check(c.set("short", b"x", expire=1, noreply=False), "set 1s")
abs_t = int(time.time()) + 1
check(c.set("abs", b"x", expire=abs_t, noreply=False), "set absolute")
check(c.set("past", b"x", expire=int(time.time()) - 100, noreply=False), "set past absolute")
check(c.get("past") is None, "absolute past exptime")
time.sleep(2.2)
check(c.get("short") is None, "relative expiry")
check(c.get("abs") is None, "absolute expiry")

# stats
s = c.stats()
for k in [b"pid", b"uptime", b"curr_items", b"total_items", b"cmd_get", b"cmd_set",
          b"get_hits", b"get_misses", b"curr_connections", b"evictions", b"bytes",
          b"limit_maxbytes", b"threads", b"cas_hits", b"incr_hits", b"touch_hits"]:
    check(k in s, "stats has %r" % k)
check(s[b"cmd_set"] > 0 and s[b"get_hits"] > 0, "stats counts")
check(b"maxbytes" in c.stats("settings"), "stats settings")
c.stats("items")
c.stats("slabs")

# verbosity, flush_all with delay
check(raw(b"verbosity 1\r\n") == b"OK\r\n", "verbosity")
check(c.set("d", b"x", noreply=False), "set d")
check(c.flush_all(delay=2, noreply=False), "flush_all delay")
check(c.get("d") == b"x", "flush delay not yet")
time.sleep(3.2)
check(c.get("d") is None, "flush delay happened")
check(c.set("d", b"y", noreply=False), "set after flush")
check(c.get("d") == b"y", "set after delayed flush")

# big value and too-large value
big = b"v" * (1024 * 1024 - 512)
check(c.set("big", big, noreply=False), "set ~1MB")
check(c.get("big") == big, "get ~1MB")
try:
    c.set("big", b"v" * (1024 * 1024 + 10), noreply=False)
    check(False, "too large should fail")
except Exception as e:  # MemcacheServerError
    check("too large" in str(e), "too large error: %s" % e)
check(c.get("big") is None, "failed set unlinks old value")
check(c.set("after", b"ok", noreply=False) and c.get("after") == b"ok", "connection usable after too-large")

c.quit()
print("ALL OK")
