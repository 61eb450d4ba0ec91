package clicks

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/schemas"
)

// Usage is the command's help text, printed before the settings' flags.
const Usage = `Usage: batchjob clicks --date YYYY-MM-DD [settings flags]
       batchjob clicks audit --ad AD_ID --date YYYY-MM-DD [settings flags]

batchjob clicks re-reads the day's raw clicks (UTC date) and every fraud verdict from the log,
counts each click id once (its first occurrence by event time), applies the latest verdict on
each click, and writes the day's exact and billable counts per ad, and per campaign and per
device, to ClickHouse as a new version (click_reports_daily and click_reports_by, made visible
by its row in click_report_versions). A rerun adds version N+1 beside N; nothing is
overwritten. GET /v1/reports/daily/{date}[?by=campaign|device] serves them.

batchjob clicks audit lists every click of one ad on the day with what became of it (counted,
fraud, duplicate) and the verdict behind it, recomputed from the log (raw clicks are kept 7
days), next to the latest stored version's numbers. Below them, apart, it lists the click and
verdict records the streaming aggregator refused (they did not decode or validate) and set
aside in dead_letters on the day (the UTC day it first set them aside; kept 90 days), with
topic, partition, offset, key and reason: those whose payload names the ad, and those whose
payload does not say its ad (ad "?"), which may be the ad's. It writes nothing.

Exit codes: 0 done, 1 error, 2 bad usage, 3 another copy is running (clicks only).

Sample crontab line (01:00 UTC, yesterday's clicks, done well before 03:00):
  0 1 * * * batchjob clicks --date "$(date -u -d yesterday +\%F)" --config /etc/tally/tally.yaml >>/var/log/tally/batchjob-clicks.log 2>&1

`

// Command is one parsed command line.
type Command struct {
	Date  time.Time // UTC midnight of the day
	Audit bool
	AdID  string // the audited ad
}

// ParseArgs reads the command line without the program name: clicks, optionally audit, then
// --date YYYY-MM-DD (and --ad AD_ID for audit), in any order among the settings' flags, which
// it returns untouched for config.Load.
func ParseArgs(args []string) (Command, []string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return Command{}, nil, pflag.ErrHelp
	}
	if args[0] != "clicks" {
		return Command{}, nil, fmt.Errorf("unknown command %q; want clicks", args[0])
	}
	var cmd Command
	i := 1
	if i < len(args) && args[i] == "audit" {
		cmd.Audit = true
		i++
	}
	var date, ad string
	var haveDate, haveAd bool
	rest := []string{}
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help":
			return Command{}, nil, pflag.ErrHelp
		case a == "--date" || a == "--ad":
			if i+1 >= len(args) {
				return Command{}, nil, fmt.Errorf("%s needs a value", a)
			}
			i++
			if a == "--date" {
				date, haveDate = args[i], true
			} else {
				ad, haveAd = args[i], true
			}
		case strings.HasPrefix(a, "--date="):
			date, haveDate = strings.TrimPrefix(a, "--date="), true
		case strings.HasPrefix(a, "--ad="):
			ad, haveAd = strings.TrimPrefix(a, "--ad="), true
		case a == "audit":
			return Command{}, nil, errors.New("audit must come right after clicks")
		default:
			rest = append(rest, a)
		}
	}
	if !haveDate {
		return Command{}, nil, errors.New("give --date YYYY-MM-DD")
	}
	d, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return Command{}, nil, fmt.Errorf("--date %q: want YYYY-MM-DD", date)
	}
	cmd.Date = d.UTC()
	switch {
	case cmd.Audit && !haveAd:
		return Command{}, nil, errors.New("audit needs --ad AD_ID")
	case !cmd.Audit && haveAd:
		return Command{}, nil, errors.New("--ad is for clicks audit only")
	case cmd.Audit:
		if err := schemas.CheckID("--ad", ad, true); err != nil {
			return Command{}, nil, err
		}
		cmd.AdID = ad
	}
	return cmd, rest, nil
}

// Write prints the audit: a summary, then one tab-separated line per click occurrence.
func (ar AuditReport) Write(w io.Writer) error {
	stored := "no complete version stored yet"
	if ar.Version > 0 {
		stored = fmt.Sprintf("stored version %d: exact %d billable %d", ar.Version, ar.Stored.ExactCount, ar.Stored.BillableCount)
		if ar.Stored == ar.Recomputed {
			stored += " (same)"
		} else {
			stored += " (differs: the log changed since, e.g. late verdicts; a rerun writes a new version)"
		}
	}
	if _, err := fmt.Fprintf(w, "# ad %s on %s: recomputed from the log now: exact %d billable %d; %s\n",
		ar.AdID, ar.Date.Format(time.DateOnly), ar.Recomputed.ExactCount, ar.Recomputed.BillableCount, stored); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "click_id\tts\tstatus\tverdict\tdecided_at\treason\twhy\tpartition\toffset")
	for _, l := range ar.Lines {
		decided, verdict := "-", "-"
		if l.Verdict != "" {
			verdict, decided = l.Verdict, time.UnixMilli(l.DecidedAt).UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%q\t%s\t%d\t%d\n", l.ClickID, time.UnixMilli(l.TS).UTC().Format(time.RFC3339Nano),
			l.Status, verdict, decided, l.Reason, orDash(l.Why), l.Partition, l.Offset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ar.writeRejected(w)
}

// writeRejected prints, after a blank line, the refused records of the day that are or may be
// the ad's: a summary, then one tab-separated line each. Key and reason are quoted: they come
// from whoever wrote the record, and must not reach a terminal raw.
func (ar AuditReport) writeRejected(w io.Writer) error {
	named, unknown := 0, 0
	for _, r := range ar.Rejected {
		if r.AdID == "" {
			unknown++
		} else {
			named++
		}
	}
	if _, err := fmt.Fprintf(w, "\n# rejected on %s (click and verdict records the aggregator set aside in dead_letters, by the UTC day first set aside; counted nowhere): %d naming ad %s, %d whose payload names no ad (ad ?, possibly %s's), %d naming other ads (not listed)\n",
		ar.Date.Format(time.DateOnly), named, ar.AdID, unknown, ar.AdID, ar.RejectedOthers); err != nil {
		return err
	}
	if len(ar.Rejected) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "source\tpartition\toffset\tad\tkey\treason\tbytes\tseen_at")
	for _, r := range ar.Rejected {
		ad := r.AdID
		if ad == "" {
			ad = "?"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%q\t%q\t%d\t%s\n", r.Source, r.Partition, r.Offset, ad, r.Key, r.Reason, r.Bytes,
			r.SeenAt.UTC().Format(time.RFC3339Nano))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
