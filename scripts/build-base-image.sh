#!/usr/bin/env bash
# Builds localhost/kat-base:latest offline: a rootfs holding the static
# busybox from Debian's busybox-static with a symlink per applet (/bin/sh,
# httpd, ...), imported with `podman import`. Idempotent: does nothing when the
# image exists, unless KAT_BASE_REBUILD=1.
#
# KAT_PODMAN_ARGS holds podman global arguments (for example
# "--root /x/storage --runroot /x/run") for agents with their own storage.
# KAT_BASE_IMAGE overrides the image name.
set -euo pipefail

image=${KAT_BASE_IMAGE:-localhost/kat-base:latest}
busybox=${KAT_BUSYBOX:-/bin/busybox}
# shellcheck disable=SC2206 # word splitting of the global args is wanted
podman=(podman ${KAT_PODMAN_ARGS:-})

if [ "${KAT_BASE_REBUILD:-0}" != 1 ] && "${podman[@]}" image exists "$image"; then
  # An image whose layer a crashed podman left half-written still "exists":
  # check that a container can read it, and rebuild it otherwise.
  if timeout 120 "${podman[@]}" run --rm --pull never --network none "$image" /bin/true >/dev/null 2>&1; then
    echo "base image: $image present"
    exit 0
  fi
  echo "base image: $image is present but unusable; removing and rebuilding it" >&2
  timeout 120 "${podman[@]}" rmi --force "$image" >/dev/null 2>&1 || true
fi
if ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked' &&
  ! ldd "$busybox" 2>&1 | grep -q 'not a dynamic executable'; then
  echo "base image: $busybox is not a static busybox; install busybox-static (scripts/install-prereqs.sh)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,proc,sys,dev,root,var/www,home}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
echo "kat-base: busybox $("$root/bin/busybox" | head -n1 | awk '{print $2}')" >"$root/etc/kat-base-release"
echo '<html><body>kat-base</body></html>' >"$root/var/www/index.html"

tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$work/rootfs.tar" .
"${podman[@]}" import --quiet \
  --change 'CMD ["/bin/sh"]' \
  --change 'ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin' \
  --change 'WORKDIR /' \
  "$work/rootfs.tar" "$image" >/dev/null
echo "base image: built $image"
