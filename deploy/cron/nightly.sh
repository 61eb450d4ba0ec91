#!/bin/sh
# The batch jobs on a schedule for docker compose, run by the batchjob-cron image as its
# unprivileged user: every day at NIGHTLY_HOUR:00 UTC (default 3, as the Kubernetes CronJobs)
# it runs the jobs one after the other, logging to stdout: likes, clicks and counters (every
# logged namespace) for the day that just ended, views (the recount from the sink's files) for
# the day before, whose late events (collector.late_bound, 24h) are in by then. A job that fails is logged and not retried (run it
# again by hand: each run adds a version); batchjob exits 3 when another copy holds the job's
# lock. batchjob views and counters exit 4 when they found differences: that is their report
# (view_recount_diffs, counter_reports_daily), logged as such, not a failure. Add a job as one more line in run_jobs.
#
# `nightly run DAY BEFORE` runs the jobs once, now (a missed night by hand: docker compose exec
# batchjob nightly run 2026-11-30 2026-11-29), and exits. BATCHJOB is the batchjob binary.
set -u
hour=${NIGHTLY_HOUR:-3}
batchjob=${BATCHJOB:-/usr/local/bin/batchjob}

run_jobs() {
  day=$1 before=$2
  "$batchjob" likes --date "$day" || echo "nightly: batchjob likes --date $day exited $?"
  "$batchjob" clicks --date "$day" || echo "nightly: batchjob clicks --date $day exited $?"
  recount counters "$day" counter_reports_daily
  recount views "$before" view_recount_diffs
}

# recount JOB DATE TABLE runs a recount, whose exit 4 is its report of differences in TABLE.
recount() {
  rc=0
  "$batchjob" "$1" --date "$2" || rc=$?
  case $rc in
    0) ;;
    4) echo "nightly: batchjob $1 --date $2 found differences ($3)" ;;
    *) echo "nightly: batchjob $1 --date $2 exited $rc" ;;
  esac
}

if [ "${1:-}" = run ]; then
  [ $# -eq 3 ] || { echo "usage: nightly run DAY BEFORE (YYYY-MM-DD: likes, clicks and counters for DAY, views for BEFORE)" >&2; exit 2; }
  run_jobs "$2" "$3"
  exit 0
fi

while :; do
  now=$(date -u +%s)
  next=$(( now / 86400 * 86400 + hour * 3600 ))
  [ "$next" -le "$now" ] && next=$(( next + 86400 ))
  echo "nightly: next run at $(date -u -d "@$next" '+%F %T') UTC"
  sleep $(( next - now ))
  run_jobs "$(date -u -d "@$(( next - 86400 ))" +%F)" "$(date -u -d "@$(( next - 172800 ))" +%F)"
done
