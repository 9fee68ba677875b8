#!/usr/bin/env bash
# Builds shared-device-broker_VERSION_ARCH.deb from what `make release` built (`make deb` runs both):
# the binaries (stripped), the interface XML, the activation file, the systemd user unit, the manual
# pages and completions (`make install DESTDIR=...`), the docs, and a sample administrator's
# configuration as a conffile. Depends: from the binaries' libraries (dpkg -S), plus libcurl4,
# which brokerd opens with dlopen where no tool can see it.
#
#   packaging/build-deb.sh INSTALL_BIN OUTPUT_DIR [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: build-deb.sh INSTALL_BIN OUTPUT_DIR [VERSION]}
OUT=${2:?usage: build-deb.sh INSTALL_BIN OUTPUT_DIR [VERSION]}
VERSION=${3:-$(cat VERSION)}
ARCH=$(dpkg --print-architecture)
PACKAGE=shared-device-broker
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
ROOT=$STAGE/root

make --no-print-directory install DESTDIR="$ROOT" PREFIX=/usr INSTALL_BIN="$BIN" >/dev/null
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/brokerd" "$ROOT/usr/bin/brokerctl"
gzip -9n "$ROOT"/usr/share/man/man*/*

DOC=$ROOT/usr/share/doc/$PACKAGE
install -d "$DOC" "$ROOT/etc/shared-device-broker"
install -m 0644 packaging/debian/copyright "$DOC/copyright"
# The README and every page it leads to, in the tree's layout, so that a link such as
# docs/kiosk.md finds docs/kiosk.md.gz beside it (the package test follows each link).
install -d "$DOC/docs"
install -m 0644 README.md BENCHMARKS.md CONTRIBUTING.md "$DOC/"
install -m 0644 docs/*.md docs/*.png "$DOC/docs/"
install -D -m 0644 benchmarks/results/subscribers.png "$DOC/benchmarks/results/subscribers.png"
gzip -9n "$DOC"/*.md "$DOC"/docs/*.md
# A native package's changelog, in Debian's format, pointing at the project's own.
{
    echo "$PACKAGE ($VERSION) unstable; urgency=medium"
    echo
    echo "  * Release $VERSION; see /usr/share/doc/$PACKAGE/CHANGELOG.md.gz."
    echo
    echo " -- shared-device-broker maintainers <maintainers@shared-device-broker.invalid>  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")"
} > "$DOC/changelog"
gzip -9n "$DOC/changelog"
gzip -9nc CHANGELOG.md > "$DOC/CHANGELOG.md.gz"
install -m 0644 packaging/debian/broker.conf "$ROOT/etc/shared-device-broker/broker.conf"

# The libraries the binaries link directly (their NEEDED entries), as the packages that hold them.
depends=$(for binary in "$ROOT/usr/bin/brokerd" "$ROOT/usr/bin/brokerctl"; do
        for needed in $(objdump -p "$binary" | awk '/NEEDED/{print $2}'); do
            ldd "$binary" | awk -v name="$needed" '$1 == name && $3 ~ /^\// {print $3}'
        done
    done | sort -u | while read -r library; do
        dpkg -S "$(readlink -f "$library")" 2>/dev/null || dpkg -S "$library" 2>/dev/null || true
    done | cut -d: -f1 | sort -u | while read -r owner; do
        version=$(dpkg-query -W -f='${Version}' "$owner" | sed 's/-[^-]*$//')
        echo "$owner (>= $version)"
    done | paste -sd, - | sed 's/,/, /g')

install -d "$ROOT/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
    packaging/debian/control.in > "$ROOT/DEBIAN/control"
echo /etc/shared-device-broker/broker.conf > "$ROOT/DEBIAN/conffiles"
(cd "$ROOT" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum) \
    > "$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles" "$ROOT/DEBIAN/md5sums"
find "$ROOT" -type d -exec chmod 0755 {} +

mkdir -p "$OUT"
DEB=$OUT/${PACKAGE}_${VERSION}_${ARCH}.deb
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)} \
    dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
