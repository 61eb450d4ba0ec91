#!/bin/sh
# The batch jobs on a schedule for docker compose, run by the batchjob-cron image as its
# unprivileged user: every day at NIGHTLY_HOUR:00 UTC (default 3, as the Kubernetes CronJobs)
# it runs each job for the day that just ended, one after the other, logging to stdout. A job
# that fails is logged and retried the next night; batchjob exits 3 when another copy holds the
# job's lock. Add a job as one more line in run_jobs.
set -u
hour=${NIGHTLY_HOUR:-3}

run_jobs() {
  day=$1
  /usr/local/bin/batchjob likes --date "$day" || echo "nightly: batchjob likes --date $day exited $?"
}

while :; do
  now=$(date -u +%s)
  next=$(( now / 86400 * 86400 + hour * 3600 ))
  [ "$next" -le "$now" ] && next=$(( next + 86400 ))
  echo "nightly: next run at $(date -u -d "@$next" '+%F %T') UTC"
  sleep $(( next - now ))
  run_jobs "$(date -u -d "@$(( next - 86400 ))" +%F)"
done
