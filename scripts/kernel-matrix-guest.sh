#!/bin/bash
# PID 1 of a kernel-matrix VM (see kernel-matrix.sh): the host's root is mounted read-only at /,
# the run's output directory (RUN, argument 1) read-write, and the kernel package is unpacked in
# KDIR (argument 2). Sets up what the tests need, runs every test binary listed in RUN/tests.txt
# (a log and an exit code each), then powers the VM off.
set -u
RUN=$1 KDIR=$2

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
for d in /tmp /run /var/tmp /root /var/log; do mount -t tmpfs tmpfs "$d"; done
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# the kernel package's modules, for the kernel's own module requests (veth, clsact, cls_bpf...)
# and for user space: a modprobe that looks in KDIR
mkdir -p "$RUN/bin"
printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$KDIR" > "$RUN/bin/modprobe"
chmod +x "$RUN/bin/modprobe"
echo "$RUN/bin/modprobe" > /proc/sys/kernel/modprobe
echo 1 > /proc/sys/kernel/sysrq
hostname kmatrix
ip link set lo up

export PATH=$RUN/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root CI=true
FILTER=$(cat "$RUN/filter")
{
    echo "kernel $(uname -r): $(uname -v)"
    grep -c ^processor /proc/cpuinfo | sed 's/^/cpus /'
    grep MemTotal /proc/meminfo
} > "$RUN/env.txt"

# a diagnostic command first, if one was given (KMATRIX_PRE)
if [ -s "$RUN/pre" ]; then
    (cd "$RUN" && bash "$RUN/pre") > "$RUN/pre.log" 2>&1
fi

[ "$FILTER" = NONE ] && : > "$RUN/tests.txt"
while read -r name exe dir; do
    echo "kernel-matrix guest: $name" > /dev/console
    # shellcheck disable=SC2086
    (cd "$dir" && timeout 900 "$exe" --test-threads=2 $FILTER) > "$RUN/$name.log" 2>&1
    echo $? > "$RUN/$name.rc"
done < "$RUN/tests.txt"

touch "$RUN/done"
sync
echo o > /proc/sysrq-trigger
sleep 10
