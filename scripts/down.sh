#!/usr/bin/env bash
# Stops the kat-agent started by scripts/up.sh (SIGTERM, then waits).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${KAT_DATA_DIR:-$PWD/.kat/data}
pidfile=$data/kat-agent.pid
if [ ! -f "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "kat-agent is not running"
  rm -f "$pidfile"
  exit 0
fi
pid=$(cat "$pidfile")
kill -TERM "$pid"
for _ in $(seq 1 60); do
  kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "kat-agent stopped"; exit 0; }
  sleep 0.5
done
echo "kat-agent (pid $pid) did not stop within 30s" >&2
exit 1
