#!/usr/bin/env python3
"""Where a BPF program's CPU time goes, by source line: perf samples mapped through the JIT's
line info. Needs no disassembler (Debian's bpftool cannot dump JITed code: no libbfd).

  bpf_lines.py info PROG_ID > lines.txt
      the program's functions (`func ADDRESS BYTES`), its JIT line info (`jit ADDRESS
      INSN_OFFSET` per line) and its translated instructions with their source lines (`bpftool
      prog dump xlated id ID linum`), read while the program is loaded: the addresses are this
      load's.
  perf script -F ip,sym -i perf.data | bpf_lines.py map lines.txt [TOP]
      the TOP (default 40) source lines with the most samples, and the samples per file. A
      sample counts for the line whose JITed code holds its address. On a stall, the sample
      lands on the instruction waiting for the data (or the one after it): a load that misses
      shows as its first use.

scripts/bpf-profile.sh runs both around a perf record of one CPU.
"""
import bisect
import collections
import ctypes
import re
import struct
import subprocess
import sys

SYS_BPF = 321  # x86-64
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
INFO_LEN = 232  # struct bpf_prog_info up to attach_btf_id (linux/bpf.h)
# offsets in struct bpf_prog_info
NR_JITED_KSYMS, NR_JITED_FUNC_LENS, JITED_KSYMS, JITED_FUNC_LENS = 104, 108, 112, 120
NR_LINE_INFO, LINE_INFO, JITED_LINE_INFO = 148, 152, 160
NR_JITED_LINE_INFO, LINE_INFO_REC_SIZE, JITED_LINE_INFO_REC_SIZE = 168, 172, 176


def bpf(libc, cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(SYS_BPF, cmd, buf, 128)
    if r < 0:
        err = ctypes.get_errno()
        sys.exit(f"bpf_lines: bpf command {cmd} failed: errno {err}")
    return r


def info(prog_id):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = bpf(libc, BPF_PROG_GET_FD_BY_ID, struct.pack("I", prog_id))

    def get(req):
        b = ctypes.create_string_buffer(bytes(req), INFO_LEN)
        bpf(libc, BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, INFO_LEN, ctypes.addressof(b)))
        return b.raw

    first = get(bytearray(INFO_LEN))
    nks, nfl = struct.unpack_from("II", first, NR_JITED_KSYMS)
    (nli,) = struct.unpack_from("I", first, NR_LINE_INFO)
    (njli,) = struct.unpack_from("I", first, NR_JITED_LINE_INFO)
    lrs, jlrs = struct.unpack_from("II", first, LINE_INFO_REC_SIZE)
    if not nli or nli != njli:
        sys.exit(f"bpf_lines: program {prog_id} has no JIT line info (BTF missing? JIT off?)")
    ks = ctypes.create_string_buffer(nks * 8)
    fl = ctypes.create_string_buffer(nfl * 4)
    li = ctypes.create_string_buffer(nli * lrs)
    jli = ctypes.create_string_buffer(njli * jlrs)
    req = bytearray(INFO_LEN)
    struct.pack_into("II", req, NR_JITED_KSYMS, nks, nfl)
    struct.pack_into("QQ", req, JITED_KSYMS, ctypes.addressof(ks), ctypes.addressof(fl))
    struct.pack_into("I", req, NR_LINE_INFO, nli)
    struct.pack_into("Q", req, LINE_INFO, ctypes.addressof(li))
    struct.pack_into("Q", req, JITED_LINE_INFO, ctypes.addressof(jli))
    struct.pack_into("I", req, NR_JITED_LINE_INFO, njli)
    struct.pack_into("II", req, LINE_INFO_REC_SIZE, lrs, jlrs)
    get(req)
    for k in range(min(nks, nfl)):  # the program's functions: where its samples may fall
        (addr,) = struct.unpack_from("Q", ks.raw, k * 8)
        (size,) = struct.unpack_from("I", fl.raw, k * 4)
        print(f"func {addr:x} {size}")
    for k in range(nli):
        (insn,) = struct.unpack_from("I", li.raw, k * lrs)  # bpf_line_info.insn_off
        (addr,) = struct.unpack_from("Q", jli.raw, k * jlrs)
        print(f"jit {addr:x} {insn}")
    xl = subprocess.run(
        ["bpftool", "prog", "dump", "xlated", "id", str(prog_id), "linum"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sys.stdout.write(xl)


def load(path):
    jit, funcs, src, cur = [], [], {}, "?"
    for line in open(path):
        if line.startswith("func "):
            _, a, n = line.split()
            funcs.append((int(a, 16), int(a, 16) + int(n)))
            continue
        if line.startswith("jit "):
            _, a, o = line.split()
            jit.append((int(a, 16), int(o)))
            continue
        m = re.match(r"; (.*) \[file:\S*?([^/\s]+) line_num:(\d+)", line)
        if m:
            cur = f"{m.group(2)}:{m.group(3)} {m.group(1).strip()[:80]}"
            continue
        m = re.match(r"\s*(\d+):", line)
        if m:
            src[int(m.group(1))] = cur
    jit.sort()
    return jit, funcs, src


def map_samples(path, top):
    jit, funcs, src = load(path)
    addrs = [a for a, _ in jit]
    lines, files, total = collections.Counter(), collections.Counter(), 0
    for sample in sys.stdin:
        f = sample.split()
        if len(f) < 2 or not f[1].startswith("bpf_prog_"):
            continue
        ip = int(f[0], 16)
        if not any(a <= ip < e for a, e in funcs):
            continue  # another program's
        i = bisect.bisect_right(addrs, ip) - 1
        if i < 0:
            continue
        where = src.get(jit[i][1], "?")
        lines[where] += 1
        files[where.split(":")[0]] += 1
        total += 1
    if not total:
        sys.exit("bpf_lines: no sample fell in the program")
    print(f"{total} samples in the program\n\n| samples | share | source line |\n|---:|---:|---|")
    for k, v in lines.most_common(top):
        print(f"| {v} | {100 * v / total:.1f}% | `{k}` |")
    print("\n| samples | share | file |\n|---:|---:|---|")
    for k, v in files.most_common():
        print(f"| {v} | {100 * v / total:.1f}% | {k} |")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "info":
        info(int(sys.argv[2]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "map":
        map_samples(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
    else:
        sys.exit(__doc__)
