# inkcache: `make demo` runs the main job end to end, `make test` runs every test.
# Both install what they need (Debian packages) on a fresh machine; they need root.

CARGO ?= cargo
DEB_PKGS := clang llvm libelf-dev zlib1g-dev pkg-config bpftool memcached libmemcached-tools \
            iproute2 ethtool python3 python3-pymemcache python3-pylibmc util-linux procps \
            python3-prometheus-client systemd man-db binutils xdp-tools iputils-ping

.PHONY: all deps build test lint demo bench check-consistency fuzz kernel-matrix kernel-matrix-deps clean deb pool-demo

all: build

# Installs the Debian packages that are missing (apt-get update first), and rustfmt/clippy.
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi
	@command -v rustup >/dev/null && rustup component add rustfmt clippy >/dev/null 2>&1 || true
	@mount | grep -q ' /sys/fs/bpf ' || mount -t bpf bpf /sys/fs/bpf

build: deps
	$(CARGO) build --release --workspace --bins

lint: deps
	$(CARGO) fmt --all -- --check
	python3 scripts/check-tree.py
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every test: unit, property and integration tests (real kernel, namespaces, memcached).
test: build kernel-matrix-deps
	$(CARGO) test --release --workspace --no-fail-fast -- --test-threads=2
	# the kernel cache's tests again, with inkcached as the server instead of stock memcached
	INKCACHE_TEST_SERVER=inkcached INKCACHED_BIN=$(CURDIR)/target/release/inkcached \
	    $(CARGO) test --release -p inkcache --no-fail-fast -- --test-threads=2
	# and once more with inkcached's flash tier answering (every value but the newest on flash)
	INKCACHE_TEST_SERVER=inkcached INKCACHED_BIN=$(CURDIR)/scripts/inkcached-flash \
	    $(CARGO) test --release -p inkcache --no-fail-fast -- --test-threads=2
	# a short fuzz run of the request parser (stable toolchain, protocol dictionary)
	scripts/fuzz.sh $${FUZZ_SECONDS:-30}
	# every eBPF object through the verifier of the oldest kernel supported (6.1), in a VM
	scripts/verifier-oldest.sh

# The request parser under libFuzzer for FUZZ_SECONDS (default 30), see scripts/fuzz.sh.
fuzz: deps
	scripts/fuzz.sh $${FUZZ_SECONDS:-30}

demo: build
	BIN=target/release scripts/demo.sh

bench: build
	target/release/inklab paper --rounds 6

# The consistency checker for 60 s against memcached + inkcache (CHECK_SECONDS=N to change).
check-consistency: build
	BIN=target/release scripts/check.sh $${CHECK_SECONDS:-60} --keys 2048 --writers 2 --flush-ratio 0.00002 --large-ratio 0

# Three memcached servers in their own namespaces with inkcache, clients sharding by consistent
# hashing (pylibmc ketama, pymemcache rendezvous), then one server killed.
pool-demo: build
	BIN=target/release scripts/pool-demo.sh

# The Debian package (binaries, systemd units, environment files, man pages): target/deb/*.deb.
deb: build
	packaging/deb.sh target/deb target/release

# inkcache's tests under other kernels (Debian's oldest and newest, bullseye's 5.10, sid's) in a
# qemu VM; slow (emulated where /dev/kvm cannot run a stock kernel), so not part of `make test`.
# Results: target/kernel-matrix/summary.md (see scripts/kernel-matrix.sh for the options).
KMATRIX_PKGS := qemu-system-x86 busybox-static kmod cpio xz-utils zstd
kernel-matrix: kernel-matrix-deps
	CARGO=$(CARGO) scripts/kernel-matrix.sh

# The kernel matrix's packages (its VMs: qemu, a static busybox), also `make test`'s (verifier-oldest).
kernel-matrix-deps: deps
	@missing=""; for p in $(KMATRIX_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

clean:
	$(CARGO) clean
