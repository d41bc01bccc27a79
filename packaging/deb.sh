#!/bin/sh
# Builds the Debian package: packaging/deb.sh OUTDIR [BINDIR] (run from the repository's root,
# after `cargo build --release --workspace --bins`); prints the .deb's path.
set -eu
out=$1
bin=${2:-target/release}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
root="$out/root"
rm -rf "$root"
packaging/stage.sh "$root" "$bin"
install -d "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    packaging/debian/control >"$root/DEBIAN/control"
install -m 644 packaging/debian/conffiles "$root/DEBIAN/"
install -m 755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm \
    "$root/DEBIAN/"
deb="$out/inkcache_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
