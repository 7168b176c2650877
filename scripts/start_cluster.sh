#!/usr/bin/env bash
# Start a local Redis Cluster of 3 masters and no replicas, for emqlab's cluster tests and docs/cluster.md.
#
#   scripts/start_cluster.sh            # ports 7000 7001 7002 (bus ports +10000), on 127.0.0.1
#   EMQLAB_CLUSTER_PORT=7100 scripts/start_cluster.sh    # ports 7100 7101 7102
#   scripts/stop_cluster.sh             # stops the nodes this script started (same EMQLAB_CLUSTER_PORT)
#
# Each node is `redis-server --cluster-enabled yes` with nothing persisted (--save "" --appendonly no), its
# files (nodes.conf, log, pid) in a temp folder of its own: ${TMPDIR:-/tmp}/emqlab-cluster-<first port>/.
# The cluster is made with `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`; the script returns
# once CLUSTER INFO says cluster_state:ok on every node.
#
# Run again while its cluster is up, it says so and exits 0. It refuses (exit 1, nothing started) when one of
# the ports (or bus ports) is taken by anything that is not a node this script started.
set -euo pipefail

FIRST="${EMQLAB_CLUSTER_PORT:-7000}"
case "$FIRST" in '' | *[!0-9]*) echo "start_cluster: EMQLAB_CLUSTER_PORT must be a port number, not '$FIRST'" >&2; exit 2 ;; esac
if [ "$FIRST" -lt 1024 ] || [ "$FIRST" -gt 55000 ]; then
  echo "start_cluster: EMQLAB_CLUSTER_PORT=$FIRST: use 1024..55000 (the bus ports are +10000)" >&2; exit 2
fi
PORTS=("$FIRST" "$((FIRST + 1))" "$((FIRST + 2))")
HOST=127.0.0.1
DIR="${TMPDIR:-/tmp}/emqlab-cluster-$FIRST"
WAIT_S="${EMQLAB_CLUSTER_WAIT:-30}"

for exe in redis-server redis-cli; do
  command -v "$exe" >/dev/null 2>&1 || { echo "start_cluster: $exe not on PATH (Debian: apt-get install redis-server)" >&2; exit 1; }
done

cli() { timeout 3 redis-cli -h "$HOST" -p "$1" "${@:2}" 2>/dev/null; }

# Is something listening on this TCP port? (bash's /dev/tcp: no extra tools)
listening() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Is the node on this port one this script started? Its pid file in $DIR names a live redis-server whose
# command line carries this port, and the node's id is the "myself" id of the nodes.conf in its folder.
ours() {
  local port=$1 pid id
  [ -f "$DIR/$port/redis.pid" ] || return 1
  pid=$(cat "$DIR/$port/redis.pid")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server.*:$port\b" || return 1
  id=$(cli "$port" CLUSTER MYID) || return 1
  [ -n "$id" ] && grep -q "^$id .*myself" "$DIR/$port/nodes.conf"
}

state_ok() { cli "$1" CLUSTER INFO | tr -d '\r' | grep -qx 'cluster_state:ok'; }

all_ok() {
  local p
  for p in "${PORTS[@]}"; do
    state_ok "$p" || return 1
    [ "$(cli "$p" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')" = 3 ] || return 1
  done
}

# 1. The ports: all ours and healthy -> nothing to do; any taken by something else -> refuse.
taken=0
mine=0
for p in "${PORTS[@]}"; do
  for q in "$p" "$((p + 10000))"; do
    if listening "$q"; then
      taken=$((taken + 1))
      if [ "$q" = "$p" ] && ours "$p"; then
        mine=$((mine + 1))
      elif [ "$q" != "$p" ] && ours "$p"; then
        :  # its own bus port
      else
        what=$(cli "$p" INFO server | tr -d '\r' | sed -n 's/^redis_version:/a Redis /p' || true)
        echo "start_cluster: refusing: port $q is taken by ${what:-something} that this script did not start" \
          "(choose other ports with EMQLAB_CLUSTER_PORT=N, N..N+2 and N+10000..N+10002 free)" >&2
        exit 1
      fi
    fi
  done
done
if [ "$mine" = 3 ]; then
  if all_ok; then
    echo "start_cluster: already running on $HOST:${PORTS[0]}-${PORTS[2]} (files in $DIR)"
    exit 0
  fi
  echo "start_cluster: the nodes on ${PORTS[*]} are ours but the cluster is not ok; restarting it" >&2
fi
if [ "$mine" != 0 ]; then
  EMQLAB_CLUSTER_PORT="$FIRST" bash "$(dirname "$0")/stop_cluster.sh" >/dev/null
fi

# 2. The nodes: fresh folders, no persistence, daemonized with a pid file each.
rm -rf "$DIR"
mkdir -p "$DIR"
for p in "${PORTS[@]}"; do
  mkdir -p "$DIR/$p"
  redis-server --port "$p" --bind "$HOST" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 5000 --save "" --appendonly no --dir "$DIR/$p" --daemonize yes \
    --pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log"
done
for p in "${PORTS[@]}"; do
  for _ in $(seq 1 100); do
    [ "$(cli "$p" PING)" = PONG ] && break
    sleep 0.05
  done
  [ "$(cli "$p" PING)" = PONG ] || { echo "start_cluster: node $p did not start (log: $DIR/$p/redis.log)" >&2; exit 1; }
done

# 3. The cluster: the 16384 slots split over the 3 masters.
redis-cli --cluster create "$HOST:${PORTS[0]}" "$HOST:${PORTS[1]}" "$HOST:${PORTS[2]}" \
  --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 \
  || { echo "start_cluster: redis-cli --cluster create failed:" >&2; cat "$DIR/create.log" >&2; exit 1; }

deadline=$((SECONDS + WAIT_S))
until all_ok; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "start_cluster: cluster_state is not ok on every node after ${WAIT_S}s" >&2
    for p in "${PORTS[@]}"; do echo "  $p: $(cli "$p" CLUSTER INFO | tr -d '\r' | grep cluster_state)" >&2; done
    exit 1
  fi
  sleep 0.1
done
echo "start_cluster: cluster_state:ok on $HOST:${PORTS[0]} $HOST:${PORTS[1]} $HOST:${PORTS[2]} (files in $DIR;" \
  "stop: EMQLAB_CLUSTER_PORT=$FIRST scripts/stop_cluster.sh)"
