#!/usr/bin/env bash
# Stops the kat-agent started by scripts/up.sh (SIGTERM, then waits).
#
# Stopping kat-agent never stops the containers it manages: `up` adopts them
# again. With --containers (or KAT_DOWN_CONTAINERS=1) the containers of this
# node of this cluster (labels kat.node and kat.cluster) are removed too, for
# a clean machine; `up` recreates them from the cluster's state. Containers
# of another cluster on the same machine, or made by hand, are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${KAT_DATA_DIR:-$PWD/.kat/data}
containers=${KAT_DOWN_CONTAINERS:-0}
for arg in "$@"; do
  case $arg in
  --containers) containers=1 ;;
  *) echo "down.sh: unknown argument $arg (known: --containers)" >&2; exit 2 ;;
  esac
done
pidfile=$data/kat-agent.pid

remove_containers() {
  local node cluster ids
  node=$(sed -n 's/^ *"nodeName": *"\([^"]*\)".*/\1/p' "$data/node.json" 2>/dev/null | head -n1)
  cluster=$(sed -n 's/^ *"clusterUID": *"\([^"]*\)".*/\1/p' "$data/node.json" 2>/dev/null | head -n1)
  if [ -z "$node" ] || [ -z "$cluster" ]; then
    echo "no node name or cluster UID in $data/node.json: no containers removed" >&2
    return 0
  fi
  # podman rm now and then fails on a busy shm mount; a second try succeeds.
  local tried=no
  for _ in 1 2 3; do
    ids=$(podman ps -aq --filter label=kat.managed=true --filter "label=kat.node=$node" --filter "label=kat.cluster=$cluster")
    if [ -z "$ids" ]; then
      # A failed try may still have removed them all.
      [ "$tried" = no ] || echo "removed the containers of node $node"
      return 0
    fi
    tried=yes
    # shellcheck disable=SC2086 # one argument per container ID
    if podman rm --force --time 5 $ids >/dev/null 2>&1; then
      echo "removed $(echo "$ids" | wc -l) container(s) of node $node"
      return 0
    fi
  done
  echo "could not remove every container of node $node: see podman ps -a --filter label=kat.node=$node --filter label=kat.cluster=$cluster" >&2
  return 1
}

stopped=no
if [ ! -f "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "kat-agent is not running"
  rm -f "$pidfile"
  stopped=yes
else
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidfile"
      echo "kat-agent stopped"
      stopped=yes
      break
    fi
    sleep 0.5
  done
fi
if [ "$stopped" != yes ]; then
  echo "kat-agent (pid $pid) did not stop within 30s" >&2
  exit 1
fi
if [ "$containers" = 1 ]; then
  remove_containers
else
  echo "its containers keep running; scripts/down.sh --containers also removes them"
fi
