package reconcile

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		args     []string
		wantJob  Job
		wantRest []string
		wantErr  string
	}{
		{"all", []string{"likes", "--all"}, Job{All: true}, []string{}, ""},
		{"date", []string{"likes", "--date", "2026-11-28"}, Job{Date: day}, []string{}, ""},
		{"date with equals among settings", []string{"likes", "--redis.addr", "h:1", "--date=2026-11-28", "--log.level=warn"},
			Job{Date: day}, []string{"--redis.addr", "h:1", "--log.level=warn"}, ""},
		{"no command", nil, Job{}, nil, "help requested"},
		{"help", []string{"likes", "--help"}, Job{}, nil, "help requested"},
		{"unknown command", []string{"clicks", "--all"}, Job{}, nil, `unknown command "clicks"`},
		{"neither", []string{"likes"}, Job{}, nil, "give --date YYYY-MM-DD or --all"},
		{"both", []string{"likes", "--all", "--date", "2026-11-28"}, Job{}, nil, "not both"},
		{"date missing value", []string{"likes", "--date"}, Job{}, nil, "--date needs a value"},
		{"bad date", []string{"likes", "--date", "28/11/2026"}, Job{}, nil, `--date "28/11/2026": want YYYY-MM-DD`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, rest, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || job != tt.wantJob || !slices.Equal(rest, tt.wantRest) {
				t.Fatalf("got %+v, %q, %v; want %+v, %q, nil", job, rest, err, tt.wantJob, tt.wantRest)
			}
		})
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("likes --all")
	f.Add("likes --date 2026-11-28 --redis.addr x:1")
	f.Add("likes --date=2026-02-30")
	f.Add("likes --date")
	f.Add("--help")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		job, rest, err := ParseArgs(args)
		if err != nil {
			if job != (Job{}) || rest != nil {
				t.Fatalf("got %+v, %q with error %v; want zero values", job, rest, err)
			}
			return
		}
		if job.All == !job.Date.IsZero() {
			t.Fatalf("got %+v from %q; want exactly one of --all and --date", job, line)
		}
		if !job.All && (job.Date.Location() != time.UTC || job.Date.Truncate(24*time.Hour) != job.Date) {
			t.Fatalf("got date %v from %q; want a UTC midnight", job.Date, line)
		}
		for _, a := range rest {
			if a == "--all" || a == "--date" || strings.HasPrefix(a, "--date=") {
				t.Fatalf("got %q passed on to the settings from %q; want it consumed", a, line)
			}
		}
	})
}

func TestJobScopeAndDate(t *testing.T) {
	job := Job{Date: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)}
	tests := []struct {
		name string
		at   time.Time
		want bool
	}{
		{"midnight opens the day", time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), true},
		{"last millisecond", time.Date(2026, 11, 28, 23, 59, 59, 999e6, time.UTC), true},
		{"next midnight", time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false},
		{"day before", time.Date(2026, 11, 27, 23, 59, 59, 0, time.UTC), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := job.covers(tt.at.UnixMilli()); got != tt.want {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}
	if got := job.Scope(); got != "date:2026-11-28" {
		t.Errorf("got scope %q; want date:2026-11-28", got)
	}
	if got := (Job{All: true}).Scope(); got != "all" {
		t.Errorf("got scope %q; want all", got)
	}
}

func TestCompare(t *testing.T) {
	log := map[string]record{"a": {liked: true, offset: 5}, "b": {liked: false, offset: 7}, "c": {liked: true, offset: 9}}
	tests := []struct {
		name         string
		got          map[string]observed
		exact        bool
		wantExpected int64
		wantActual   int64
		wantDrift    []string
	}{
		{"agrees", map[string]observed{"a": {true, 5, true}, "b": {false, 7, true}, "c": {true, 9, true}}, true, 2, 2, nil},
		{"member removed behind the script's back", map[string]observed{"a": {false, 5, true}, "b": {false, 7, true}, "c": {true, 9, true}}, false, 2, 1, []string{"a"}},
		{"phantom member", map[string]observed{"a": {true, 5, true}, "c": {true, 9, true}, "x": {true, 0, false}}, false, 2, 3, []string{"x"}},
		{"state only: offsets do not matter", map[string]observed{"a": {true, 3, true}, "c": {true, 9, true}}, false, 2, 2, nil},
		{"record: missing row", map[string]observed{"a": {true, 5, true}, "c": {true, 9, true}}, true, 2, 2, []string{"b"}},
		{"record: stale row", map[string]observed{"a": {true, 3, true}, "b": {false, 7, true}, "c": {true, 9, true}}, true, 2, 2, []string{"a"}},
		{"newer than the snapshot is skipped", map[string]observed{"a": {false, 12, true}, "b": {true, 10, true}, "c": {true, 9, true}}, true, 1, 1, nil},
		{"phantom row below the snapshot", map[string]observed{"a": {true, 5, true}, "b": {false, 7, true}, "c": {true, 9, true}, "y": {true, 8, true}}, true, 2, 3, []string{"y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compare(log, tt.got, 10, tt.exact)
			if c.expected != tt.wantExpected || c.actual != tt.wantActual || !slices.Equal(c.drift, tt.wantDrift) {
				t.Fatalf("got expected %d actual %d drift %q; want %d %d %q", c.expected, c.actual, c.drift, tt.wantExpected, tt.wantActual, tt.wantDrift)
			}
		})
	}
}
