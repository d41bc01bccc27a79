"""Exercises inkcached through pylibmc (libmemcached) with the binary protocol."""
import sys

import pylibmc

port = int(sys.argv[1])
mc = pylibmc.Client(["127.0.0.1:%d" % port], binary=True,
                    behaviors={"tcp_nodelay": True, "cas": True})


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def refused(f, *args):
    """False or a NotFound/NotStored-type error: the server said no."""
    try:
        return not f(*args)
    except (pylibmc.NotFound, pylibmc.DataExists):
        return True


check(mc.set("a", "1"), "set")
check(mc.get("a") == "1", "get")
check(mc.get("missing") is None, "miss")
check(refused(mc.add, "a", "2"), "add existing")
check(mc.add("b", "2"), "add new")
check(mc.replace("a", "3"), "replace")
check(refused(mc.replace, "nx", "3"), "replace missing")
check(mc.append("a", "4") and mc.get("a") == "34", "append")
check(mc.prepend("a", "2") and mc.get("a") == "234", "prepend")
check(mc.incr("a") == 235 and mc.decr("a", 5) == 230, "incr decr")
check(refused(mc.incr, "nx"), "incr missing")
check(mc.set("obj", {"x": [1, 2]}) and mc.get("obj") == {"x": [1, 2]}, "pickled object")
check(mc.set("bytes", b"\x00\xffbin") and mc.get("bytes") == b"\x00\xffbin", "binary value")
check(mc.set("big", "v" * 500000) and mc.get("big") == "v" * 500000, "large value")
check(mc.set_multi({"m1": "1", "m2": "2", "m3": "3"}) == [], "set_multi")
got = mc.get_multi(["m1", "m2", "m3", "nope"])
check(got == {"m1": "1", "m2": "2", "m3": "3"}, "get_multi %r" % got)
check(mc.delete("m1") and refused(mc.delete, "m1"), "delete")
check(mc.delete_multi(["m2", "m3"]), "delete_multi")
check(mc.get_multi(["m1", "m2", "m3"]) == {}, "deleted")
val, cas = mc.gets("b")
check(val == "2" and cas, "gets")
check(mc.cas("b", "9", cas), "cas ok")
check(refused(mc.cas, "b", "10", cas), "cas stale")
check(mc.get("b") == "9", "cas result")
check(mc.touch("b", 100), "touch")
check(refused(mc.touch, "nx", 100), "touch missing")
stats = mc.get_stats()
check(len(stats) == 1 and int(stats[0][1]["curr_items"]) >= 4, "stats")
check(b"version" in stats[0][1] or "version" in stats[0][1], "stats version")
mc.flush_all()
check(mc.get("b") is None, "flush_all")
print("ALL OK")
