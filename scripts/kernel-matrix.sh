#!/usr/bin/env bash
# `make kernel-matrix`: runs inkcache's kernel tests (every test binary of crates/inkcache: the
# eBPF unit tests and the integration tests against stock memcached) under other kernels, each in
# a throw-away VM (qemu, with KVM where it can run a stock kernel, emulated otherwise). Kernels come from Debian's packages: by default the oldest and
# the newest kernel image the configured apt sources offer, plus those of the suites named in
# KMATRIX_SUITES (default: bullseye, Debian 11's 5.10, below inkcache's minimum, to check that
# attach refuses it cleanly; and sid, Debian's newest). Or name kernel packages as arguments:
#   scripts/kernel-matrix.sh linux-image-6.1.0-56-amd64-unsigned [sid:linux-image-6.17.8+deb14-amd64-unsigned]
#
# The VM sees this machine's root filesystem read-only over 9p (the test binaries, memcached,
# python, the inkcache binaries) with tmpfs over /tmp, /run and /root, and the kernel package's
# own modules; results go to $KMATRIX_OUT (default target/kernel-matrix/) as one directory per
# kernel (a log per test binary, its exit code, the console) and a summary table, summary.md.
#
# Environment: KMATRIX_CACHE (downloaded and unpacked kernels, /var/cache/inkcache-kmatrix),
# KMATRIX_MEM (VM memory, 3G), KMATRIX_TIMEOUT (seconds per kernel, 1800), KMATRIX_SUITES,
# KMATRIX_FILTER (passed to every test binary, e.g. a test name; "NONE" runs none),
# KMATRIX_PRE (a shell command run in the VM before the tests, output in pre.log), KMATRIX_ACCEL
# (auto, kvm, tcg), KMATRIX_OLDEST=1 (without arguments: only the oldest kernel apt offers).
# Needs root and the
# Debian packages qemu-system-x86, busybox-static, kmod, cpio and xz-utils (`make kernel-matrix` installs them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KMATRIX_CACHE:-/var/cache/inkcache-kmatrix}
OUT=${KMATRIX_OUT:-$ROOT/target/kernel-matrix}
MEM=${KMATRIX_MEM:-3G}
TIMEOUT=${KMATRIX_TIMEOUT:-1800}
SUITES=${KMATRIX_SUITES-bullseye sid}
CARGO=${CARGO:-cargo}

die() { echo "kernel-matrix: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root"
# KVM when it can run a stock kernel; these VMs' /dev/kvm is PVM (kvm_pvm), which runs only
# kernels built as PVM guests, so there the VM is emulated (TCG: slower, same kernel code).
ACCEL=${KMATRIX_ACCEL:-auto}
if [ "$ACCEL" = auto ]; then
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case $ACCEL in
    kvm) QEMU_ACCEL=(-accel kvm -cpu host) ;;
    tcg) QEMU_ACCEL=(-accel tcg,thread=multi -cpu max) ;;
    *) die "KMATRIX_ACCEL must be auto, kvm or tcg" ;;
esac
for t in qemu-system-x86_64 busybox depmod modprobe dpkg-deb apt-get python3 cpio xz; do
    command -v "$t" >/dev/null || die "$t is missing (make kernel-matrix installs it)"
done
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q dynamic && die "/bin/busybox must be static (busybox-static)"

mkdir -p "$CACHE/debs" "$CACHE/k" "$OUT"

# apt for one more Debian suite, kept apart from the system's sources and state.
suite_apt() {
    local suite=$1 d=$CACHE/apt/$1
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
    echo "deb http://deb.debian.org/debian $suite main" > "$d/sources.list"
    echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o Dir::State::Status=/dev/null -o APT::Get::List-Cleanup=0"
}

# Kernel image packages (name only, amd64 flavour, not signed-template/dbg/rt/cloud) offered by
# apt with the options given.
kernel_pkgs() {
    # shellcheck disable=SC2086
    apt-cache $1 pkgnames linux-image- 2>/dev/null |
        grep -E '^linux-image-[0-9][0-9.]*(-[0-9]+|\+deb[0-9]+)-amd64(-unsigned)?$' |
        sed 's/-unsigned$//' | sort -uV
}

# Which packages to run on: the arguments, or the defaults described at the top.
declare -a JOBS=()
if [ $# -gt 0 ]; then
    JOBS=("$@")
else
    mapfile -t local_pkgs < <(kernel_pkgs "")
    [ ${#local_pkgs[@]} -gt 0 ] || die "apt offers no kernel image (run apt-get update)"
    JOBS+=("${local_pkgs[0]}")
    if [ "${KMATRIX_OLDEST:-0}" = 1 ]; then
        SUITES="" # the oldest only
    elif [ ${#local_pkgs[@]} -gt 1 ]; then
        JOBS+=("${local_pkgs[-1]}")
    fi
    for s in $SUITES; do
        opts=$(suite_apt "$s")
        # shellcheck disable=SC2086
        apt-get -q $opts update >/dev/null || die "apt-get update for $s failed"
        mapfile -t spkgs < <(kernel_pkgs "$opts")
        [ ${#spkgs[@]} -gt 0 ] && JOBS+=("$s:${spkgs[-1]}")
    done
fi
echo "kernel-matrix: kernels: ${JOBS[*]} ($ACCEL)"

# The test binaries, built here (the VM only runs them).
echo "kernel-matrix: building the tests"
(cd "$ROOT" && $CARGO build --release --workspace --bins -q)
(cd "$ROOT" && $CARGO test --release -p inkcache --no-run --message-format=json -q) |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        src = m["target"]["src_path"]
        kind = m["target"]["kind"][0]
        name = m["target"]["name"] if kind == "test" else m["target"]["name"] + "-" + kind
        print(name, m["executable"], src.split("/src/")[0].split("/tests/")[0])
' > "$OUT/tests.txt"
[ -s "$OUT/tests.txt" ] || die "no test binaries found"

# Downloads and unpacks one kernel package; prints the directory it is unpacked in.
fetch_kernel() {
    local job=$1 suite="" pkg=$1 opts="" deb dir
    case $job in *:*) suite=${job%%:*}; pkg=${job#*:}; opts=$(suite_apt "$suite");; esac
    dir=$CACHE/k/$pkg
    if [ ! -e "$dir/.unpacked" ]; then
        rm -rf "$dir"
        # the -unsigned package holds the same image; take it when it exists (it has no deps on
        # the signing templates), else the plain one
        local p
        for p in "$pkg-unsigned" "$pkg"; do
            # shellcheck disable=SC2086
            (cd "$CACHE/debs" && apt-get -q $opts download "$p" >/dev/null 2>&1) && break
        done
        deb=$(ls -t "$CACHE"/debs/"${pkg}"*_amd64.deb 2>/dev/null | head -1)
        [ -n "$deb" ] || die "could not download $pkg"
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
        dpkg-deb -x "$deb" "$dir.tmp"
        # newer Debian kernels split the image package: the kernel in linux-binary-*, the
        # modules in linux-modules-*
        if [ -z "$(find "$dir.tmp" -name 'vmlinuz*' | head -1)" ]; then
            local v=${pkg#linux-image-}
            for p in "linux-binary-$v" "linux-modules-$v"; do
                # shellcheck disable=SC2086
                (cd "$CACHE/debs" && apt-get -q $opts download "$p" >/dev/null 2>&1) ||
                    die "could not download $p"
                dpkg-deb -x "$(ls -t "$CACHE"/debs/"$p"_*_amd64.deb | head -1)" "$dir.tmp"
            done
        fi
        mv "$dir.tmp" "$dir"
        touch "$dir/.unpacked"
    fi
    echo "$dir"
}

# Builds the initramfs: static busybox, the modules needed to mount the host's root over 9p
# (decompressed: busybox insmod reads plain .ko), and an init that mounts it and switches to
# scripts/kernel-matrix-guest.sh.
make_initrd() {
    local kdir=$1 kver=$2 run=$3 ir=$3/initrd m f n=0
    rm -rf "$ir" && mkdir -p "$ir/bin" "$ir/mods" "$ir/proc" "$ir/sys" "$ir/dev" "$ir/newroot"
    cp /bin/busybox "$ir/bin/busybox"
    : > "$ir/mods/order"
    for m in virtio_pci 9pnet_virtio 9p; do
        # (built in when it is not found)
        { modprobe -d "$kdir" -S "$kver" --show-depends "$m" 2>/dev/null || true; } |
            awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++' | while read -r f; do
        n=$((n + 1))
        case $f in
            *.xz) xz -dc "$f" > "$ir/mods/$n.ko" ;;
            *.zst) zstd -qdc "$f" > "$ir/mods/$n.ko" ;;
            *.gz) gzip -dc "$f" > "$ir/mods/$n.ko" ;;
            *) cp "$f" "$ir/mods/$n.ko" ;;
        esac
        echo "$n.ko" >> "$ir/mods/order"
    done
    cat > "$ir/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in \$(cat /mods/order); do insmod /mods/\$m 2>/dev/null; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot || { echo "kernel-matrix: cannot mount the host root"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /newroot$run || { echo "kernel-matrix: cannot mount the output"; poweroff -f; }
umount /proc /sys /dev
exec switch_root /newroot /bin/bash $ROOT/scripts/kernel-matrix-guest.sh $run $kdir
EOF
    chmod +x "$ir/init"
    (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$run/initrd.gz"
    rm -rf "$ir"
}

printf '| kernel | Debian package | test binaries passed | tests passed | failed | ignored |\n| --- | --- | --- | --- | --- | --- |\n' > "$OUT/summary.md"
status=0
for job in "${JOBS[@]}"; do
    kdir=$(fetch_kernel "$job")
    # modules in lib/modules or (merged /usr) usr/lib/modules: MODBASE is depmod's base directory
    if [ -d "$kdir/lib/modules" ]; then modbase=$kdir; else modbase=$kdir/usr; fi
    kver=$(ls "$modbase/lib/modules" | head -1)
    vmlinuz=""
    for f in "$kdir/boot/vmlinuz-$kver" "$modbase/lib/modules/$kver/vmlinuz"; do
        [ -f "$f" ] && vmlinuz=$f && break
    done
    [ -n "$vmlinuz" ] || die "$job: no kernel image (vmlinuz) in $kdir"
    depmod -b "$modbase" "$kver" 2>/dev/null
    run=$OUT/$kver
    rm -rf "$run" && mkdir -p "$run"
    cp "$OUT/tests.txt" "$run/tests.txt"
    printf '%s\n' "${KMATRIX_FILTER:-}" > "$run/filter"
    printf '%s\n' "${KMATRIX_PRE:-}" > "$run/pre"
    make_initrd "$modbase" "$kver" "$run"
    # an emulated boot now and then dies early (e.g. an int3 while the kernel patches its own
    # text under multi-threaded TCG): boot again when no test has run yet
    for attempt in 1 2 3; do
        echo "kernel-matrix: $kver ($job): booting (attempt $attempt)"
        start=$(date +%s)
        rm -f "$run"/*.log "$run"/*.rc
        timeout "$TIMEOUT" qemu-system-x86_64 "${QEMU_ACCEL[@]}" -smp 2 -m "$MEM" \
            -display none -monitor none -no-reboot -serial "file:$run/console.log" \
            -kernel "$vmlinuz" -initrd "$run/initrd.gz" \
            -append "console=ttyS0 panic=-1 quiet loglevel=4 net.ifnames=0" \
            -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
            -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
            -fsdev "local,id=out,path=$run,security_model=none" \
            -device virtio-9p-pci,fsdev=out,mount_tag=out || echo "kernel-matrix: $kver: qemu exited with $?"
        [ -f "$run/done" ] || [ -n "$(ls "$run"/*.rc 2>/dev/null)" ] && break
        cp "$run/console.log" "$run/console-attempt$attempt.log"
    done
    rm -f "$run/initrd.gz"
    secs=$(( $(date +%s) - start ))
    # one row: binaries whose exit code is 0, and the sums of cargo's "test result" lines
    bins=0 ok=0
    passed=0 failed=0 ignored=0
    while read -r name _ _; do
        bins=$((bins + 1))
        [ "$(cat "$run/$name.rc" 2>/dev/null)" = 0 ] && ok=$((ok + 1))
        read -r p f i < <(awk '/^test result:/ {p+=$4; f+=$6; i+=$8} END {print p+0, f+0, i+0}' "$run/$name.log" 2>/dev/null || echo "0 0 0")
        passed=$((passed + p)) failed=$((failed + f)) ignored=$((ignored + i))
    done < "$run/tests.txt"
    [ -f "$run/done" ] || { echo "kernel-matrix: $kver: the VM did not finish (see $run/console.log)"; status=1; }
    [ "$ok" = "$bins" ] || status=1
    printf '| %s | %s | %s/%s | %s | %s | %s |\n' "$kver" "${job#*:}" "$ok" "$bins" "$passed" "$failed" "$ignored" >> "$OUT/summary.md"
    echo "kernel-matrix: $kver: $ok/$bins test binaries passed ($passed tests passed, $failed failed) in ${secs}s; logs in $run"
done
cat "$OUT/summary.md"
exit $status
