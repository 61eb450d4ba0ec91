package aggregatorconf

import (
	"strings"
	"testing"

	"tally/platform/config"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Settings
			_, err := config.Load("test", tt.args, &s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v; want one naming %s", err, tt.want)
			}
		})
	}
}
