#!/usr/bin/env bash
# Starts a single-node KAT in the background (embedded etcd, examples-repo as
# its configuration), applies examples-repo and shows the cluster's status.
# Running it again resumes the same cluster. Stop it with scripts/down.sh.
#
# Environment: KAT_DATA_DIR (default .kat/data); KAT_API_PORT, KAT_AGENT_PORT,
# KAT_ETCD_CLIENT_PORT, KAT_ETCD_PEER_PORT override cluster.kat's ports;
# KAT_NODE_NAME sets the node name (default: the host name).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
data=${KAT_DATA_DIR:-$root/.kat/data}
bin=$root/bin
katcall() { "$bin/katcall" --config "$data/katcall.yaml" "$@"; }

go build -trimpath -o "$bin/" ./cmd/...
mkdir -p "$data"
pidfile=$data/kat-agent.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "kat-agent is already running (pid $(cat "$pidfile"))"
else
  ports=()
  [ -n "${KAT_API_PORT:-}" ] && ports+=(--api-port "$KAT_API_PORT")
  [ -n "${KAT_AGENT_PORT:-}" ] && ports+=(--agent-port "$KAT_AGENT_PORT")
  [ -n "${KAT_ETCD_CLIENT_PORT:-}" ] && ports+=(--etcd-client-port "$KAT_ETCD_CLIENT_PORT")
  [ -n "${KAT_ETCD_PEER_PORT:-}" ] && ports+=(--etcd-peer-port "$KAT_ETCD_PEER_PORT")
  [ -n "${KAT_NODE_NAME:-}" ] && ports+=(--node-name "$KAT_NODE_NAME")
  nohup "$bin/kat-agent" init --config "$root/examples-repo/cluster.kat" --data-dir "$data" \
    --advertise-address 127.0.0.1 --log-format json "${ports[@]}" >>"$data/kat-agent.log" 2>&1 &
  echo $! >"$pidfile"
  echo "kat-agent started (pid $!, log $data/kat-agent.log)"
fi

for _ in $(seq 1 120); do
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "kat-agent exited; last lines of its log:" >&2
    tail -n 20 "$data/kat-agent.log" >&2
    exit 1
  fi
  if [ -f "$data/katcall.yaml" ] && katcall status >/dev/null 2>&1; then
    break
  fi
  sleep 0.5
done

katcall apply -f "$root/examples-repo"
echo
katcall status
echo
echo "katcall is configured by $data/katcall.yaml; for example:"
echo "  export KATCONFIG=$data/katcall.yaml; $bin/katcall get workloads"
