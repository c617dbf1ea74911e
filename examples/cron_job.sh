#!/usr/bin/env bash
# A cron-style job under a lock: `prioritylock run` holds the lock while the job runs (renewing
# it), releases it when the job exits, and passes the job's exit status through. A second copy
# started while the first still runs gives up at once (--timeout 0, exit code 6) instead of
# running twice. The job sees its fencing token in PRIORITYLOCK_FENCE.
#
#   examples/cron_job.sh [STORE_URL]     (default: a fresh temporary directory)
#
# In a crontab:  */5 * * * *  prioritylock run --timeout 0 'file:///var/lib/locks' jobs/report -- /usr/local/bin/report
set -euo pipefail

url=${1:-}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
[ -n "$url" ] || url="file://$scratch/locks"
plock() { "${PYTHON:-python3}" -m prioritylock "$@"; }

# The first run: a job that waits until we tell it to finish.
plock run --timeout 10 --message "nightly report" "$url" jobs/report -- \
  sh -c 'echo "first run: working with fencing token $PRIORITYLOCK_FENCE"; touch "$0/started";
         while [ ! -e "$0/finish" ]; do sleep 0.05; done; exit 3' "$scratch" &
first=$!
while [ ! -e "$scratch/started" ]; do sleep 0.05; done

# An overlapping run (cron fired again): the lock is held, so it skips.
set +e
plock run --timeout 0 "$url" jobs/report -- echo "second run: must not happen"
status=$?
set -e
echo "overlapping run skipped with exit code $status (6: lock not acquired)"

touch "$scratch/finish"
set +e
wait "$first"
status=$?
set -e
echo "first run finished; prioritylock passed on the job's exit code $status"

plock run --timeout 10 "$url" jobs/report -- sh -c 'echo "next run: fencing token $PRIORITYLOCK_FENCE"'
