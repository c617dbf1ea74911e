#!/usr/bin/env bash
# Dapr's lock API from the shell: start `prioritylock serve` beside "an app", then lock and
# unlock with curl as any language would over HTTP: first Dapr's alpha1 calls, then the full API
# (a lock id, a blocking wait, priorities). Needs curl and 'prioritylock[server]'.
#
#   examples/serve_curl.sh [STORE_URL]     (default: a fresh temporary directory)
set -euo pipefail

url=${1:-}
scratch=$(mktemp -d)
[ -n "$url" ] || url="file://$scratch/locks"
py=${PYTHON:-python3}
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$py" -m prioritylock serve --app-id walkthrough --store "lockstore=$url" \
  --http-port "$port" --grpc-port 0 > "$scratch/serve.out" 2> "$scratch/serve.err" &
service=$!
trap 'kill -TERM "$service" 2> /dev/null || true; wait "$service" 2> /dev/null || true; rm -rf "$scratch"' EXIT

api="http://127.0.0.1:$port"
for _ in $(seq 200); do  # ready once the health check answers 204
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$api/v1.0/healthz/outbound")" = 204 ] && break
  sleep 0.05
done

call() {  # call lock|unlock JSON: print the request and the answer
  echo "$1 $2 -> $(curl -s -d "$2" "$api/v1.0-alpha1/$1/lockstore")"
}
call lock '{"resourceId": "order-1", "lockOwner": "worker-a", "expiryInSeconds": 30}'
call lock '{"resourceId": "order-1", "lockOwner": "worker-b", "expiryInSeconds": 30}'
call unlock '{"resourceId": "order-1", "lockOwner": "worker-b"}'
call unlock '{"resourceId": "order-1", "lockOwner": "worker-a"}'
call lock '{"resourceId": "order-1", "lockOwner": "worker-b", "expiryInSeconds": 30}'
call lock '{"resourceId": "order-1", "lockOwner": "worker-b", "expiryInSeconds": 0}'

# The full API: the service renews the lease until the lock id unlocks it.
full="$api/v1.0-alpha2/lock/lockstore"
answer=$(curl -s -d '{"owner": "worker-a", "ttl": "30s"}' "$full/report-7")
echo "lock report-7 -> $answer"
lock_id=$("$py" -c 'import json, sys; print(json.loads(sys.argv[1])["lockID"])' "$answer")
echo "try report-7 -> $(curl -s -d '{"owner": "worker-b", "immediate": true}' "$full/report-7")"
echo "owner of report-7 -> $(curl -s "$full/report-7" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["owner"])')"
echo "unlock report-7 -> $(curl -s -o /dev/null -w '%{http_code}' -X DELETE -d "{\"lockID\": \"$lock_id\"}" "$full/report-7")"
echo "unlock report-7 again -> $(curl -s -X DELETE -d "{\"lockID\": \"$lock_id\"}" "$full/report-7")"
