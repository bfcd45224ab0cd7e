#!/usr/bin/env bash
# Builds localhost/kat-haproxy:2.6 offline from Debian's haproxy package, and
# tags it docker.io/library/haproxy:2.6, the name the ingress recipe
# (examples-repo/kat-core/ingress) uses, so the agent finds it without a
# pull. The rootfs holds the haproxy binary, the shared libraries ldd names
# (at their own paths), the static busybox with sh, test, cat, ls and sleep,
# the CA bundle and a passwd/group with root and nobody; it is imported
# with `podman import`. Idempotent: does nothing when both names exist,
# unless KAT_INGRESS_REBUILD=1.
#
# The binary comes from /usr/sbin/haproxy when the package is installed, or
# else from `apt-get download haproxy` unpacked with dpkg-deb (installing
# the package would start a haproxy service on the host); its libraries
# must be installed (scripts/install-prereqs.sh).
#
# KAT_PODMAN_ARGS holds podman global arguments (for example
# "--root /x/storage --runroot /x/run") for agents with their own storage.
set -euo pipefail

image=${KAT_INGRESS_IMAGE:-localhost/kat-haproxy:2.6}
alias_name=${KAT_INGRESS_ALIAS:-docker.io/library/haproxy:2.6}
busybox=${KAT_BUSYBOX:-/bin/busybox}
# shellcheck disable=SC2206 # word splitting of the global args is wanted
podman=(podman ${KAT_PODMAN_ARGS:-})

if [ "${KAT_INGRESS_REBUILD:-0}" != 1 ] && "${podman[@]}" image exists "$image" && "${podman[@]}" image exists "$alias_name"; then
  echo "ingress image: $image present"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=/usr/sbin/haproxy
if [ ! -x "$bin" ]; then
  (cd "$work" && apt-get download haproxy >/dev/null)
  dpkg-deb -x "$work"/haproxy_*.deb "$work/pkg"
  bin=$work/pkg/usr/sbin/haproxy
fi
if ldd "$bin" | grep -q 'not found'; then
  echo "ingress image: libraries of $bin are missing (scripts/install-prereqs.sh):" >&2
  ldd "$bin" | grep 'not found' >&2
  exit 1
fi

root=$work/rootfs
mkdir -p "$root"/{bin,usr/sbin,etc/ssl/certs,tmp,run/kat-ingress,var/lib/haproxy}
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/sbin/haproxy"
# Every library ldd names, and the loader, at the same path.
for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3; next} $1 ~ /^\// {print $1}'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp "$busybox" "$root/bin/busybox"
for applet in sh test [ cat ls sleep; do
  ln -sf busybox "$root/bin/$applet"
done
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP

tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$work/rootfs.tar" .
"${podman[@]}" import --quiet \
  --change 'CMD ["/usr/sbin/haproxy","-W","-db","-S","/run/kat-ingress/master.sock","-f","/run/kat-ingress/haproxy.cfg"]' \
  --change 'ENV PATH=/bin:/usr/bin:/usr/sbin' \
  --change 'WORKDIR /' \
  "$work/rootfs.tar" "$image" >/dev/null
"${podman[@]}" tag "$image" "$alias_name"
echo "ingress image: built $image ($("$root/usr/sbin/haproxy" -v | head -n1 | awk '{print $3}')), tagged $alias_name"
