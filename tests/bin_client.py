#!/usr/bin/env python3
"""Runs memcached binary-protocol operations with a real client: pylibmc (libmemcached, binary=True).

usage: bin_client.py SERVER OP [OP...]
SERVER is host:port or [v6addr]:port. Each OP is NAME:ARG[:ARG...]:
  set|add|replace|append|prepend:KEY:VALUE[:EXPTIME]    incr|decr:KEY:DELTA    delete:KEY
  touch:KEY:EXPTIME    cas:KEY:VALUE (gets, then cas)    flush:DELAY
A NAME ending in "q" (setq, addq, replaceq, appendq, prependq, incrq, decrq, deleteq) goes through a
second client with libmemcached's noreply behaviour, which sends the quiet opcodes; that client
ends with a get, so every quiet request has been executed when this script exits.
Prints one JSON object: {"results": [repr of each operation's result, in order]}.
"""
import json
import sys

import pylibmc

server, ops = sys.argv[1], sys.argv[2:]
loud = pylibmc.Client([server], binary=True, behaviors={"cas": True})
quiet = pylibmc.Client([server], binary=True, behaviors={"_noreply": True})
results = []
used_quiet = False
for op in ops:
    name, *args = op.split(":")
    c = loud
    if name.endswith("q"):
        name, c, used_quiet = name[:-1], quiet, True
    if name in ("set", "add", "replace"):
        exptime = int(args[2]) if len(args) > 2 else 0
        r = getattr(c, name)(args[0], args[1].encode(), time=exptime)
    elif name in ("append", "prepend"):
        r = getattr(c, name)(args[0], args[1].encode())
    elif name in ("incr", "decr"):
        r = getattr(c, name)(args[0], int(args[1]))
    elif name == "delete":
        r = c.delete(args[0])
    elif name == "touch":
        r = c.touch(args[0], int(args[1]))
    elif name == "cas":
        _, cas = c.gets(args[0])
        r = c.cas(args[0], args[1].encode(), cas)
    elif name == "flush":
        r = c.flush_all(int(args[0]))
    else:
        sys.exit(f"unknown operation {op}")
    results.append(repr(r))
if used_quiet:
    quiet.get("bin-client-sync")  # answered only after every quiet request before it
print(json.dumps({"results": results}))
