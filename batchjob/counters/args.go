package counters

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/platform/counters"
)

// Usage is the command's help text, printed before the settings' flags.
const Usage = `Usage: batchjob counters [--namespace NS] --date YYYY-MM-DD [settings flags]

batchjob counters recounts the generic counters of namespace NS (mode eventual or accurate), or
of every eventual and accurate namespace without --namespace, on a UTC date from the log (the
counter_events topic, read once for all): it replays, in log order, every record produced from
the longest idempotency window (plus 10 minutes of grace and an hour of clock skew) before the
day up to the end of the log now, with the aggregators' rule (a token counts once
within its window; a clear sets the counter to zero at its place in the log). Each counter with
an add, a clear or a stored change stamped on the day gets a row: the day's counted adds, its
clears, the repeats dropped, its count at the end of the day (the stream's stored total before
the day, or zero after the day's last clear, plus the adds counted after it), and beside it the
stream's stored total at the end of the day (counter_deltas). Each namespace's rows are written as
a new version (counter_reports_daily, made visible by its row in counter_report_versions); a
rerun adds version N+1 beside N. Run it once the day's late adds are in and while the log still holds the
day (its retention).

Exit codes: 0 no difference, 1 error (also: NS does not exist or is best_effort), 2 bad usage,
3 another copy is running, 4 counters whose recount differs from the stream (in the report).

Sample crontab line (02:00 UTC, yesterday's counters of every logged namespace):
  0 2 * * * batchjob counters --date "$(date -u -d yesterday +\%F)" --config /etc/tally/tally.yaml >>/var/log/tally/batchjob-counters.log 2>&1

`

// Command is one parsed command line.
type Command struct {
	Namespace string    // "": every eventual and accurate namespace
	Date      time.Time // UTC midnight of the day
}

// ParseArgs reads the arguments after "counters": --date YYYY-MM-DD and, optionally,
// --namespace NS, in any order among the settings' flags, which it returns untouched for
// config.Load.
func ParseArgs(args []string) (Command, []string, error) {
	vals := map[string]string{}
	rest := []string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, inline := strings.Cut(a, "=")
		switch {
		case a == "-h" || a == "--help":
			return Command{}, nil, pflag.ErrHelp
		case name == "--date" || name == "--namespace":
			if !inline {
				if i+1 >= len(args) {
					return Command{}, nil, fmt.Errorf("%s needs a value", a)
				}
				i++
				val = args[i]
			}
			vals[name] = val
		default:
			rest = append(rest, a)
		}
	}
	ns, ok := vals["--namespace"]
	if ok {
		if err := counters.CheckName(ns); err != nil {
			return Command{}, nil, fmt.Errorf("--namespace: %w", err)
		}
	}
	date, ok := vals["--date"]
	if !ok {
		return Command{}, nil, errors.New("give --date YYYY-MM-DD")
	}
	d, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return Command{}, nil, fmt.Errorf("--date %q: want YYYY-MM-DD", date)
	}
	return Command{Namespace: ns, Date: d.UTC()}, rest, nil
}
