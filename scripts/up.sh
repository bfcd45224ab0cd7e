#!/usr/bin/env bash
# Starts a single-node KAT in the background (embedded etcd) that follows a
# config repo made from examples-repo, waits until the leader has applied it
# and shows the cluster's status. Running it again resumes the same cluster.
# Stop it with scripts/down.sh.
#
# The config repo is a bare Git repository, KAT_CONFIG_REPO (default
# .kat/config.git), created from examples-repo on the first run and left alone
# afterwards: clone it, commit, push, and KAT applies the change.
#
# Environment: KAT_DATA_DIR (default .kat/data); KAT_CONFIG_REPO; KAT_API_PORT,
# KAT_AGENT_PORT, KAT_ETCD_CLIENT_PORT, KAT_ETCD_PEER_PORT override cluster.kat's
# ports; KAT_NODE_NAME sets the node name (default: the host name);
# KAT_NODE_LABELS, space-separated KEY=VALUE, are the node's labels at init
# (default kat.dws.rip/role=ingress: examples-repo's ingress proxy runs on
# it and answers on the machine's port 80; empty: no proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
data=${KAT_DATA_DIR:-$root/.kat/data}
bin=$root/bin
katcall() { "$bin/katcall" --config "$data/katcall.yaml" "$@"; }

CGO_ENABLED=0 go build -trimpath -o "$bin/" ./cmd/...
mkdir -p "$data"
repo=${KAT_CONFIG_REPO:-$(dirname "$data")/config.git}
if [ ! -d "$repo" ]; then
  seed=$(mktemp -d)
  cp -R "$root/examples-repo/." "$seed/"
  git -C "$seed" init -q -b main
  git -C "$seed" add -A
  git -C "$seed" -c user.name=kat -c user.email=kat@localhost commit -q -m "examples-repo"
  git init -q --bare -b main "$repo"
  git -C "$seed" push -q "$repo" main
  rm -rf "$seed"
  echo "created the config repo $repo from examples-repo"
fi
repo=$(cd "$repo" && pwd)
# cluster.kat, with spec.gitops pointing at the config repo and etcd
# snapshots beside the data directory.
cluster=$data/cluster.kat
{
  cat "$root/examples-repo/cluster.kat"
  printf '  backupPath: %s\n' "$(cd "$(dirname "$data")" && pwd)/backups"
  printf '  gitops:\n    repository: file://%s\n    branch: main\n    path: .\n    pollIntervalSeconds: 10\n' "$repo"
} >"$cluster"
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
  for label in ${KAT_NODE_LABELS-kat.dws.rip/role=ingress}; do
    ports+=(--node-label "$label")
  done
  nohup "$bin/kat-agent" init --config "$cluster" --data-dir "$data" \
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

# A data directory made before KAT followed a config repo has no source yet.
if ! katcall get sources config >/dev/null 2>&1; then
  katcall source set config --repo "file://$repo" --branch main --path . --interval 10s
fi
katcall sync config >/dev/null || true
head=$(git -C "$repo" rev-parse main)
applied=no
for _ in $(seq 1 120); do
  if katcall get sources config -o json | grep -q "\"appliedCommit\": \"$head\""; then
    applied=yes
    break
  fi
  sleep 0.5
done
if [ "$applied" = yes ]; then
  echo "config repo $repo: commit ${head:0:12} of branch main applied"
else
  echo "config repo $repo: commit ${head:0:12} not applied yet; see katcall get sources" >&2
fi
# Wait for the Services and DaemonServices to roll out (examples-repo's hello
# and the ingress proxy, so that the README's next command is answered), each
# at most a minute.
katcall get workloads | awk 'NR > 1 && ($3 == "Service" || $3 == "DaemonService") { print $1 "/" $2 }' |
  while read -r workload; do
    katcall rollout status "$workload" --timeout 60s >/dev/null 2>&1 ||
      echo "workload $workload: not rolled out yet; see katcall status $workload" >&2
  done
echo
katcall status
echo
echo "katcall is configured by $data/katcall.yaml; for example:"
echo "  export KATCONFIG=$data/katcall.yaml; $bin/katcall get workloads"
echo "Change the cluster with git: git clone $repo my-config, edit, commit, git push,"
echo "then $bin/katcall sync (or wait 10s) and $bin/katcall get sources"
