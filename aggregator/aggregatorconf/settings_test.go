package aggregatorconf

import (
	"strings"
	"testing"

	"github.com/tallypipeline/tally/platform/config"
)

func TestLoadErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad duration flag", []string{"--aggregator.flush_interval", "soon"}, "aggregator.flush_interval"},
		{"ttl not days", []string{"--aggregator.ttl_seconds", "36h"}, "aggregator.ttl_seconds"},
		{"sketch before flush", []string{"--aggregator.sketch_interval", "100ms"}, "aggregator.sketch_interval"},
		{"click group shared with views", []string{"--clicks.group", "tally-aggregator"}, "clicks.group"},
		{"no click group", []string{"--clicks.group", ""}, "clicks.group: must not be empty"},
		{"view window zero", []string{"--views.dedupe_window", "0s"}, "views.dedupe_window"},
		{"negative view grace", []string{"--views.dedupe_grace", "-1s"}, "views.dedupe_grace"},
		{"click window zero", []string{"--clicks.dedupe_window", "0s"}, "clicks.dedupe_window"},
		{"bad click window", []string{"--clicks.dedupe_window", "soon"}, "clicks.dedupe_window"},
		{"fraud threshold over 1", []string{"--clicks.fraud_score_threshold", "1.5"}, "clicks.fraud_score_threshold"},
		{"counted clicks kept a day", []string{"--clicks.counted_ttl", "24h"}, "clicks.counted_ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Settings
			_, err := config.Load("test", tt.args, s.Sections()...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v; want one naming %s", err, tt.want)
			}
		})
	}
}
