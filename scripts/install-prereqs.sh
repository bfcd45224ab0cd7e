#!/usr/bin/env bash
# Installs what KAT's tests and the single-node quick start need on a Debian
# machine, and only what is missing. Run as root (apt-get); idempotent.
set -euo pipefail

need=()
command -v git >/dev/null 2>&1 || need+=(git)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# Container runtime: Podman with runc (crun refuses the hybrid cgroup layout
# of these hosts), netavark and aardvark-dns as its network backend and
# iptables, which netavark runs for every container network and published
# port (Podman only suggests it, so a minimal install lacks it), uidmap for
# user namespaces, busybox-static for the offline base image;
# docker-registry and gnupg for builds and signed commits; iperf3 for
# task bench:overlay; dnsperf for task bench:dns; the libraries of Debian's
# haproxy for the offline ingress image (scripts/build-ingress-image.sh,
# which unpacks the package itself rather than install it: installing it
# starts a haproxy service on the host) and haproxy's own tests.
for pkg in podman runc netavark aardvark-dns iptables uidmap busybox-static docker-registry gnupg iperf3 dnsperf \
  libssl3 liblua5.3-0 libpcre2-8-0 libsystemd0 libopentracing-c-wrapper0 libcrypt1; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done

if [ ${#need[@]} -ne 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "prerequisites missing: ${need[*]}; run this script as root or install them with apt-get" >&2
    exit 1
  fi
  echo "prerequisites: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
else
  echo "prerequisites: packages all present"
fi

# Pebble, a local ACME server, and its DNS test server for the ACME tests
# (reconcile/leader TestLeaderACMEWithPebble): Go programs, installed into
# Go's bin directory (GOBIN, else GOPATH/bin), where the tests look.
pebble_version=v2.10.3
gobin="$(go env GOBIN 2>/dev/null || true)"
[ -n "$gobin" ] || gobin="$(go env GOPATH 2>/dev/null || true)/bin"
if ! command -v go >/dev/null 2>&1; then
  echo "prerequisites: go is not installed; skipping Pebble (ACME tests skip)" >&2
elif [ ! -x "$gobin/pebble" ] || [ ! -x "$gobin/pebble-challtestsrv" ]; then
  echo "prerequisites: installing Pebble $pebble_version into $gobin"
  # Only tests use it: a failed install leaves task up working, and the ACME
  # tests skip (or fail under task ci, which requires every prerequisite).
  go install "github.com/letsencrypt/pebble/v2/cmd/pebble@$pebble_version" \
    "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$pebble_version" ||
    echo "prerequisites: could not install Pebble $pebble_version; the ACME tests skip (task ci fails them)" >&2
fi

# Podman settings this kind of host needs. The file is KAT's when it starts
# with the marker line; a file someone else wrote is left alone, with a
# warning when it lacks what KAT needs.
conf=/etc/containers/containers.conf
marker="# Written by KAT's scripts/install-prereqs.sh"
want="$marker
[containers]
default_ulimits = [\"nofile=1024:1024\", \"nproc=4096:4096\"]

[engine]
runtime = \"runc\"

[network]
network_backend = \"netavark\""
if [ "$(id -u)" -ne 0 ]; then
  echo "prerequisites: not root, leaving $conf and /etc/subuid, /etc/subgid as they are"
  exit 0
fi
if [ ! -e "$conf" ] || head -n1 "$conf" | grep -qxF "$marker"; then
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want" >"$conf.tmp" && mv "$conf.tmp" "$conf"
    echo "prerequisites: wrote $conf"
  fi
else
  grep -q 'runtime *= *"runc"' "$conf" && grep -q 'nofile' "$conf" && grep -q 'network_backend *= *"netavark"' "$conf" ||
    echo "prerequisites: WARNING: $conf was not written by KAT and is left alone; KAT needs runtime = \"runc\" under [engine], default_ulimits = [\"nofile=1024:1024\", \"nproc=4096:4096\"] under [containers] and network_backend = \"netavark\" under [network]" >&2
fi

# A host where Podman ran before with the CNI backend keeps CNI's bridge
# (cni-podman0, 10.88.0.0/16), which collides with netavark's default network
# on the same subnet: remove it when no container runs.
if ip link show cni-podman0 >/dev/null 2>&1; then
  if [ -z "$(podman ps -q 2>/dev/null)" ]; then
    ip link delete cni-podman0 && echo "prerequisites: removed the CNI backend's bridge cni-podman0 (Podman now uses netavark)"
  else
    echo "prerequisites: WARNING: CNI's bridge cni-podman0 is left in place because containers run; stop them and run this script again" >&2
  fi
fi

# Sub-id ranges for --userns=auto, owned by the user "containers".
for f in /etc/subuid /etc/subgid; do
  touch "$f"
  if ! grep -q '^containers:' "$f"; then
    echo "containers:2147483647:2147483648" >>"$f"
    echo "prerequisites: added the containers range to $f"
  fi
done
