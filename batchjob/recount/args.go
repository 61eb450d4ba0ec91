package recount

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Usage is the command's help text, printed before the settings' flags.
const Usage = `Usage: batchjob views --date YYYY-MM-DD [settings flags]

Recounts the views of that UTC date from the sink's files (sink.storage, sink.dir, sink.s3.*)
with the streaming dedupe rule (views.dedupe_window, views.dedupe_grace, reading
batchjob.views_lookback before the day), compares each item with the streaming total in
ClickHouse (views_total_by_day) and writes a new version of the report (view_recount_runs and
view_recount_diffs). While view_deltas still holds the day (its TTL, aggregator.ttl_seconds), it also
compares every rollup bucket of the day (views_by_minute, views_by_hour, views_total_by_day;
views_by_day is a view of the last) with the deltas in it; a bucket that differs is a row of
view_recount_diffs with item_id "table/bucket/item", files = the deltas, clickhouse = the
rollup. Run it once the day's late events are in (collector.late_bound after the day) and one
copy at a time.

Exit codes: 0 no difference, 1 error (also: the files do not cover the day), 2 bad usage,
4 differences found, of items or of rollup buckets (listed in the report).

Sample crontab line (04:15 UTC, the day before yesterday):
  15 4 * * * batchjob views --date "$(date -u -d '2 days ago' +\%F)" --config /etc/tally/tally.yaml >>/var/log/tally/batchjob-views.log 2>&1

`

// ParseArgs reads the arguments after "views": --date YYYY-MM-DD among the settings' flags,
// which it returns untouched.
func ParseArgs(args []string) (time.Time, []string, error) {
	var date string
	rest := []string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help":
			return time.Time{}, nil, pflag.ErrHelp
		case a == "--date":
			if i+1 >= len(args) {
				return time.Time{}, nil, errors.New("--date needs a value YYYY-MM-DD")
			}
			i++
			date = args[i]
		case strings.HasPrefix(a, "--date="):
			date = strings.TrimPrefix(a, "--date=")
		default:
			rest = append(rest, a)
		}
	}
	if date == "" {
		return time.Time{}, nil, errors.New("give --date YYYY-MM-DD")
	}
	d, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("--date %q: want YYYY-MM-DD", date)
	}
	return d.UTC(), rest, nil
}
