#!/usr/bin/env bash
# Installs what KAT's tests and the single-node quick start need on a Debian
# machine, and only what is missing. Run as root (apt-get); idempotent.
set -euo pipefail

need=()
command -v git >/dev/null 2>&1 || need+=(git)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)

if [ ${#need[@]} -eq 0 ]; then
  echo "prerequisites: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "prerequisites missing: ${need[*]}; run this script as root or install them with apt-get" >&2
  exit 1
fi
echo "prerequisites: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
