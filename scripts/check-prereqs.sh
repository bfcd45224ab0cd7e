#!/usr/bin/env bash
# Checks that every program Podman and its network backend (netavark) run to
# start KAT's containers is installed and found the way they look it up: in
# PATH, or in Podman's helper directories. Prints one line per missing
# program with the Debian package that provides it, and exits non-zero when
# anything is missing. scripts/install-prereqs.sh runs it last; so does every
# `task prereqs` (and with it `task up` and `task ci`).
set -uo pipefail

helper_dirs=(/usr/local/libexec/podman /usr/local/lib/podman /usr/libexec/podman /usr/lib/podman)
missing=0

in_path() { command -v "$1" >/dev/null 2>&1; }
in_helpers() {
  local d
  for d in "${helper_dirs[@]}"; do [ -x "$d/$1" ] && return 0; done
  return 1
}
need() { # need WHERE PROGRAM PACKAGE WHY
  local where=$1 prog=$2 pkg=$3 why=$4
  if [ "$where" = helper ]; then
    in_helpers "$prog" && return
    echo "missing: $prog is not in ${helper_dirs[*]} ($why); install it with: apt-get install $pkg" >&2
  else
    in_path "$prog" && return
    echo "missing: $prog is not in PATH ($PATH) ($why); install it with: apt-get install $pkg" >&2
  fi
  missing=$((missing + 1))
}

need path podman podman "runs every container"
need path conmon conmon "Podman's container monitor"
need path runc runc "Podman's OCI runtime here (crun refuses this host's cgroup layout)"
need helper netavark netavark "Podman's network backend"
need helper aardvark-dns aardvark-dns "netavark's DNS for networks with DNS on"
need path iptables iptables "netavark runs it for every container network and published port"
need path newuidmap uidmap "user namespaces of containers and builds"
need path newgidmap uidmap "user namespaces of containers and builds"
need path nsenter util-linux "enters network namespaces (multi-node harness)"
need path git git "config and app repositories"
need path busybox busybox-static "the offline base image"
need path docker-registry docker-registry "the build-cache registry of the tests"

for f in /etc/subuid /etc/subgid; do
  if ! grep -q '^containers:' "$f" 2>/dev/null; then
    echo "missing: no range for the user containers in $f (workloads' user namespaces); run scripts/install-prereqs.sh as root" >&2
    missing=$((missing + 1))
  fi
done

if in_path podman; then
  backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || true)
  if [ -n "$backend" ] && [ "$backend" != netavark ]; then
    echo "missing: Podman uses the $backend network backend, KAT needs netavark: set network_backend = \"netavark\" under [network] in /etc/containers/containers.conf (scripts/install-prereqs.sh does)" >&2
    missing=$((missing + 1))
  fi
fi

if [ "$missing" -ne 0 ]; then
  echo "prerequisites: $missing missing; run scripts/install-prereqs.sh as root" >&2
  exit 1
fi
echo "prerequisites: every program Podman and netavark run is installed"
