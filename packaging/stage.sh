#!/bin/sh
# Lays out what the Debian package installs under DESTDIR: packaging/stage.sh DESTDIR [BINDIR]
# (BINDIR: where inkcache, inkcached and inkbench were built; default target/release). Run from
# the repository's root.
set -eu
dest=$1
bin=${2:-target/release}
install -d "$dest/usr/bin" "$dest/lib/systemd/system" "$dest/etc/default" \
    "$dest/usr/share/man/man1" "$dest/usr/share/doc/inkcache"
install -s -m 755 "$bin/inkcache" "$bin/inkcached" "$bin/inkbench" "$dest/usr/bin/"
install -m 644 packaging/systemd/*.service "$dest/lib/systemd/system/"
install -m 644 packaging/default/inkcache packaging/default/inkcached "$dest/etc/default/"
# manual pages from the CLI's own definitions (clap_mangen)
"$bin/inkcache" man --out "$dest/usr/share/man/man1"
gzip -9nf "$dest"/usr/share/man/man1/*.1
install -m 644 README.md docs/operations.md docs/architecture.md "$dest/usr/share/doc/inkcache/"
cat >"$dest/usr/share/doc/inkcache/copyright" <<'EOT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: inkcache

Files: *
License: GPL-2.0-only OR BSD-2-Clause
EOT
