package clicks

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     Command
		wantRest []string
		wantErr  string
	}{
		{"date", []string{"clicks", "--date", "2026-11-28"}, Command{Date: testDay}, []string{}, ""},
		{"date with equals among settings", []string{"clicks", "--redis.addr", "h:1", "--date=2026-11-28"}, Command{Date: testDay}, []string{"--redis.addr", "h:1"}, ""},
		{"audit", []string{"clicks", "audit", "--ad", "ad-7", "--date", "2026-11-28", "--log.level=warn"},
			Command{Date: testDay, Audit: true, AdID: "ad-7"}, []string{"--log.level=warn"}, ""},
		{"audit with equals", []string{"clicks", "audit", "--date=2026-11-28", "--ad=ad-7"}, Command{Date: testDay, Audit: true, AdID: "ad-7"}, []string{}, ""},
		{"no command", nil, Command{}, nil, "help requested"},
		{"help", []string{"clicks", "--help"}, Command{}, nil, "help requested"},
		{"unknown command", []string{"views", "--date", "2026-11-28"}, Command{}, nil, `unknown command "views"`},
		{"no date", []string{"clicks"}, Command{}, nil, "give --date YYYY-MM-DD"},
		{"date missing value", []string{"clicks", "--date"}, Command{}, nil, "--date needs a value"},
		{"bad date", []string{"clicks", "--date", "2026-11-31"}, Command{}, nil, `--date "2026-11-31": want YYYY-MM-DD`},
		{"audit without ad", []string{"clicks", "audit", "--date", "2026-11-28"}, Command{}, nil, "audit needs --ad"},
		{"ad without audit", []string{"clicks", "--ad", "x", "--date", "2026-11-28"}, Command{}, nil, "--ad is for clicks audit only"},
		{"bad ad", []string{"clicks", "audit", "--ad", "a/b", "--date", "2026-11-28"}, Command{}, nil, `--ad: has character '/'`},
		{"audit out of place", []string{"clicks", "--date", "2026-11-28", "audit"}, Command{}, nil, "audit must come right after clicks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rest, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || !slices.Equal(rest, tt.wantRest) {
				t.Fatalf("got %+v, %q, %v; want %+v, %q, nil", got, rest, err, tt.want, tt.wantRest)
			}
		})
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("clicks --date 2026-11-28")
	f.Add("clicks audit --ad ad-1 --date=2026-11-28 --redis.addr x:1")
	f.Add("clicks --date=2026-02-30")
	f.Add("clicks audit --ad")
	f.Add("--help")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		cmd, rest, err := ParseArgs(args)
		if err != nil {
			if cmd != (Command{}) || rest != nil {
				t.Fatalf("got %+v, %q with error %v; want zero values", cmd, rest, err)
			}
			return
		}
		if cmd.Date.Location() != time.UTC || cmd.Date.Truncate(24*time.Hour) != cmd.Date {
			t.Fatalf("got date %v from %q; want a UTC midnight", cmd.Date, line)
		}
		if cmd.Audit == (cmd.AdID == "") {
			t.Fatalf("got %+v from %q; want an ad exactly when auditing", cmd, line)
		}
		for _, a := range rest {
			if a == "--date" || a == "--ad" || strings.HasPrefix(a, "--date=") || strings.HasPrefix(a, "--ad=") {
				t.Fatalf("got %q passed on to the settings from %q; want it consumed", a, line)
			}
		}
	})
}
