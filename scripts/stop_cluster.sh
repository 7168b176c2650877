#!/usr/bin/env bash
# Stop the local Redis Cluster that scripts/start_cluster.sh started (same EMQLAB_CLUSTER_PORT, default 7000):
# each node by the pid in its pid file, only when that pid is a redis-server started for that port, then its
# temp folder is removed. Nodes it did not start are left alone. Nothing was persisted, nothing is kept.
set -euo pipefail

FIRST="${EMQLAB_CLUSTER_PORT:-7000}"
case "$FIRST" in '' | *[!0-9]*) echo "stop_cluster: EMQLAB_CLUSTER_PORT must be a port number, not '$FIRST'" >&2; exit 2 ;; esac
DIR="${TMPDIR:-/tmp}/emqlab-cluster-$FIRST"
if [ ! -d "$DIR" ]; then
  echo "stop_cluster: no cluster started by start_cluster.sh for port $FIRST ($DIR does not exist)"
  exit 0
fi

stopped=0
for p in "$FIRST" "$((FIRST + 1))" "$((FIRST + 2))"; do
  f="$DIR/$p/redis.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server.*:$p\b"; then
    kill "$pid"
    for _ in $(seq 1 100); do
      [ -e "/proc/$pid" ] || break
      sleep 0.05
    done
    if [ -e "/proc/$pid" ]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
    stopped=$((stopped + 1))
  fi
done
rm -rf "$DIR"
echo "stop_cluster: stopped $stopped node(s) of the cluster on port $FIRST and removed $DIR"
