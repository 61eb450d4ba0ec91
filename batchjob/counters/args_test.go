package counters

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     Command
		wantRest []string
		wantErr  string
	}{
		{"both, among settings", []string{"--config", "x.yaml", "--namespace", "shares", "--date=2026-11-30", "--log.level", "debug"},
			Command{Namespace: "shares", Date: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}, []string{"--config", "x.yaml", "--log.level", "debug"}, ""},
		{"inline namespace", []string{"--namespace=plays.eu", "--date", "2026-01-02"},
			Command{Namespace: "plays.eu", Date: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}, []string{}, ""},
		{"every namespace", []string{"--date", "2026-11-30"}, Command{Date: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}, []string{}, ""},
		{"bad namespace", []string{"--namespace", "Shares!", "--date", "2026-11-30"}, Command{}, nil, `--namespace: ns: got "Shares!"`},
		{"no date", []string{"--namespace", "shares"}, Command{}, nil, "give --date"},
		{"bad date", []string{"--namespace", "shares", "--date", "30/11/2026"}, Command{}, nil, `--date "30/11/2026": want YYYY-MM-DD`},
		{"date without value", []string{"--namespace", "shares", "--date"}, Command{}, nil, "--date needs a value"},
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
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !slices.Equal(rest, tt.wantRest) {
				t.Fatalf("got %+v %q; want %+v %q", got, rest, tt.want, tt.wantRest)
			}
		})
	}
	if _, _, err := ParseArgs([]string{"--namespace", "x", "--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("got %v for --help; want pflag.ErrHelp", err)
	}
}
