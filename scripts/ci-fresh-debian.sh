#!/usr/bin/env bash
# Runs .ci/run on a clone of HEAD inside a fresh, minimal Debian 12 (debootstrap, then
# chroot): no Python, git, Chromium or certificates of ours, only what .ci/run installs.
# It shows that .ci/run sets up everything itself.
#
#   sudo bash scripts/ci-fresh-debian.sh            # about 10 minutes
#
# Needs root, debootstrap and the network (deb.debian.org, PyPI). This machine's own
# trust settings go in, as a fresh machine of the same kind has them: the extra CA
# certificates in /usr/local/share/ca-certificates (a TLS-inspecting proxy needs them),
# /etc/pip.conf, and the certificate variables of the environment (SSL_CERT_FILE, ...).
# The Debian tree is removed at the end; KEEP_ROOT=1 keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "$(id -u)" != "0" ]]; then
    echo "run it as root (debootstrap and chroot need it)" >&2
    exit 2
fi
command -v debootstrap >/dev/null || { echo "install debootstrap first (apt-get install debootstrap)" >&2; exit 2; }

root="$(mktemp -d /var/tmp/refiner-fresh-debian.XXXXXX)"
mounts=(proc sys dev dev/pts dev/shm)
cleanup() {
    local m
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        m="$root/${mounts[i]}"
        if mountpoint -q "$m"; then umount "$m" || umount -l "$m"; fi
    done
    for m in "${mounts[@]}"; do
        if mountpoint -q "$root/$m"; then
            echo "$root/$m is still mounted: $root left in place" >&2
            return
        fi
    done
    [[ "${KEEP_ROOT:-0}" == 1 ]] || rm -rf "$root"
}
trap cleanup EXIT

echo "==> debootstrap --variant=minbase bookworm into $root"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 \
    || { tail -n 20 "$root.log"; exit 1; }
rm -f "$root.log"
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$root/etc/pip.conf"
for m in "${mounts[@]}"; do
    mount --bind "/$m" "$root/$m"
done
mkdir -p "$root/ci"
git clone -q . "$root/ci/refiner"
echo "==> .ci/run in the fresh Debian (commit $(git rev-parse --short HEAD))"

passed=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
for name in SSL_CERT_FILE SSL_CERT_DIR PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE AWS_CA_BUNDLE GIT_SSL_CAINFO; do
    [[ -n "${!name:-}" ]] && passed+=("$name=${!name}")
done
started=$SECONDS
chroot "$root" /usr/bin/env -i "${passed[@]}" /bin/bash -c 'cd /ci/refiner && bash .ci/run'
echo "==> .ci/run passed in the fresh Debian in $((SECONDS - started)) s"
