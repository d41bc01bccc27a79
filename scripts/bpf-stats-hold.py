#!/usr/bin/env python3
"""Holds the kernel's BPF run-time statistics on (each program's run_cnt and run_time_ns) until
this process ends: BPF_ENABLE_STATS returns an fd, and the statistics stay on while any such fd
is open. Unlike kernel.bpf_stats_enabled, which a run must save and restore (and two overlapping
runs can leave on for every program on the host), the kernel turns them off when the last holder
exits, however it exits. Prints "ready" once they are on, then waits; it also ends when its parent
does (PR_SET_PDEATHSIG). Used by scripts/lib.sh's bpf_stats_hold. Root."""
import ctypes
import os
import signal
import sys

BPF_ENABLE_STATS = 32  # enum bpf_cmd
BPF_STATS_RUN_TIME = 0  # enum bpf_stats_type
NR_BPF = {"x86_64": 321, "aarch64": 280}
PR_SET_PDEATHSIG = 1


def main() -> int:
    machine = os.uname().machine
    if machine not in NR_BPF:
        print(f"bpf-stats-hold: no bpf syscall number known for {machine}", file=sys.stderr)
        return 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent is already gone
        return 1
    attr = (ctypes.c_uint8 * 16)()  # union bpf_attr's enable_stats: { __u32 type; }
    ctypes.c_uint32.from_buffer(attr).value = BPF_STATS_RUN_TIME
    fd = libc.syscall(NR_BPF[machine], BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        err = ctypes.get_errno()
        print(f"bpf-stats-hold: BPF_ENABLE_STATS: {os.strerror(err)}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
