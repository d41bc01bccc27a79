# inkcache: `make demo` runs the main job end to end, `make test` runs every test.
# Both install what they need (Debian packages) on a fresh machine; they need root.

CARGO ?= cargo
DEB_PKGS := clang llvm libelf-dev zlib1g-dev pkg-config bpftool memcached libmemcached-tools \
            iproute2 ethtool python3 python3-pymemcache python3-pylibmc util-linux procps \
            iputils-ping

.PHONY: all deps build test lint demo bench check-consistency clean

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
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every test: unit, property and integration tests (real kernel, namespaces, memcached).
test: build
	$(CARGO) test --release --workspace --no-fail-fast -- --test-threads=2
	# the kernel cache's tests again, with inkcached as the server instead of stock memcached
	INKCACHE_TEST_SERVER=inkcached INKCACHED_BIN=$(CURDIR)/target/release/inkcached \
	    $(CARGO) test --release -p inkcache --no-fail-fast -- --test-threads=2

demo: build
	BIN=target/release scripts/demo.sh

bench: build
	target/release/inkbench scenario paper

# The consistency checker for 60 s against memcached + inkcache (CHECK_SECONDS=N to change).
check-consistency: build
	BIN=target/release scripts/check.sh $${CHECK_SECONDS:-60} --keys 2048 --writers 2 --flush-ratio 0.00002 --large-ratio 0

clean:
	$(CARGO) clean
