package allinone

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
)

// The all-in-one runs topk and the sink unless allinone.* leaves them out.
func TestComponentsLeftOut(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		sink, topk bool
	}{
		{"defaults run both", nil, true, true},
		{"no sink", []string{"--allinone.sink=false"}, false, true},
		{"no topk", []string{"--allinone.topk=false"}, true, false},
		{"neither", []string{"--allinone.sink=false", "--allinone.topk=false"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Settings
			cfg, err := config.Load("test", append([]string{"--data_dir", t.TempDir()}, tt.args...), s.Sections()...)
			if err != nil {
				t.Fatal(err)
			}
			e := cli.Env{Config: &cfg, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Now: time.Now}
			var names []string
			for _, p := range AllInOne(e, &s, io.Discard) {
				names = append(names, p.Name)
			}
			has := func(prefix string) bool {
				return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, prefix) })
			}
			if got := has("sink"); got != tt.sink {
				t.Errorf("got a sink part %v; want %v (parts %q)", got, tt.sink, names)
			}
			if got := has("topk"); got != tt.topk {
				t.Errorf("got a topk part %v; want %v (parts %q)", got, tt.topk, names)
			}
		})
	}
}
