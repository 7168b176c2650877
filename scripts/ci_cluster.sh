#!/usr/bin/env bash
# CI: make sure a Redis Cluster answers where tests/test_cluster.py looks for it ($EMQLAB_CLUSTER_URL, default
# redis://127.0.0.1:7000): when none answers there with cluster_state:ok, start the local 3-master cluster with
# scripts/start_cluster.sh on that port (installing Debian's redis-server when missing). Exports nothing; the
# cluster keeps running for the test run (nothing on disk but its temp folder; scripts/stop_cluster.sh stops it).
set -euo pipefail
cd "$(dirname "$0")/.."

URL="${EMQLAB_CLUSTER_URL:-redis://127.0.0.1:7000}"
hostport="${URL#*://}"
hostport="${hostport##*@}"
hostport="${hostport%%/*}"
hostport="${hostport%%\?*}"
HOST="${hostport%%:*}"
PORT="${hostport##*:}"
[ "$PORT" != "$hostport" ] || PORT=6379

answers() {
  command -v redis-cli >/dev/null 2>&1 &&
    timeout 3 redis-cli -h "$HOST" -p "$PORT" CLUSTER INFO 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'
}

if answers; then
  echo "ci_cluster: a cluster answers at $HOST:$PORT"
  exit 0
fi
case "$HOST" in
  127.0.0.1 | localhost) ;;
  *) echo "ci_cluster: no cluster answers at $HOST:$PORT, and emqlab starts one only on 127.0.0.1" >&2; exit 1 ;;
esac
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "ci_cluster: installing redis-server from Debian"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null
fi
echo "ci_cluster: starting a 3-master cluster on 127.0.0.1:$PORT-$((PORT + 2))"
EMQLAB_CLUSTER_PORT="$PORT" bash scripts/start_cluster.sh
answers || { echo "ci_cluster: the cluster does not answer at $HOST:$PORT" >&2; exit 1; }
