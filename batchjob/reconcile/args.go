package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Usage is the command's help text, printed before the settings' flags.
const Usage = `Usage: batchjob likes (--date YYYY-MM-DD | --all) [settings flags]

Rebuilds exact like state from the like log and reconciles Redis and ClickHouse with it:
  --date YYYY-MM-DD  items with a like change on that UTC date
  --all              every item in the log
Writes a new version of the report to ClickHouse (like_reconciliation_runs and
like_reconciliation_diffs) and repairs the drift it finds.

Exit codes: 0 clean or repaired, 1 error, 2 bad usage, 3 another copy is running.

Sample crontab line (03:15 UTC, yesterday's changes):
  15 3 * * * batchjob likes --date "$(date -u -d yesterday +\%F)" --config /etc/tally/tally.yaml >>/var/log/tally/batchjob-likes.log 2>&1

`

// Job is what one run checks.
type Job struct {
	All  bool
	Date time.Time // UTC midnight of the day checked, when not All
}

// Scope names the job in the report: "all" or "date:YYYY-MM-DD".
func (j Job) Scope() string {
	if j.All {
		return "all"
	}
	return "date:" + j.Date.Format(time.DateOnly)
}

// covers reports whether a record stamped ts (Unix ms) falls in the job's date.
func (j Job) covers(ts int64) bool {
	t := time.UnixMilli(ts).UTC()
	return !t.Before(j.Date) && t.Before(j.Date.AddDate(0, 0, 1))
}

// ParseArgs reads the command line without the program name: the subcommand likes, then
// exactly one of --date YYYY-MM-DD or --all, in any order among the settings' flags, which it
// returns untouched for config.Load.
func ParseArgs(args []string) (Job, []string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return Job{}, nil, pflag.ErrHelp
	}
	if args[0] != "likes" {
		return Job{}, nil, fmt.Errorf("unknown command %q; want likes", args[0])
	}
	var job Job
	var date string
	var haveDate bool
	rest := []string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help":
			return Job{}, nil, pflag.ErrHelp
		case a == "--all":
			job.All = true
		case a == "--date":
			if i+1 >= len(args) {
				return Job{}, nil, errors.New("--date needs a value YYYY-MM-DD")
			}
			i++
			date, haveDate = args[i], true
		case strings.HasPrefix(a, "--date="):
			date, haveDate = strings.TrimPrefix(a, "--date="), true
		default:
			rest = append(rest, a)
		}
	}
	switch {
	case job.All && haveDate:
		return Job{}, nil, errors.New("give --date or --all, not both")
	case !job.All && !haveDate:
		return Job{}, nil, errors.New("give --date YYYY-MM-DD or --all")
	case haveDate:
		d, err := time.Parse(time.DateOnly, date)
		if err != nil {
			return Job{}, nil, fmt.Errorf("--date %q: want YYYY-MM-DD", date)
		}
		job.Date = d.UTC()
	}
	return job, rest, nil
}
