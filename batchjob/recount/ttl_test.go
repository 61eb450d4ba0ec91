package recount

import (
	"strings"
	"testing"
	"time"
)

func TestParseDeltasTTL(t *testing.T) {
	tests := []struct {
		name, engine string
		want         time.Duration
		err          string
	}{
		{"as ClickHouse prints it", "ReplacingMergeTree PARTITION BY toDate(second) ORDER BY (partition, end_offset, item_id, second) TTL second + toIntervalDay(7) SETTINGS index_granularity = 8192", 7 * 24 * time.Hour, ""},
		{"as written", "MergeTree ORDER BY x TTL second + INTERVAL 30 DAY", 30 * 24 * time.Hour, ""},
		{"no TTL", "MergeTree ORDER BY x SETTINGS index_granularity = 8192", 0, ""},
		{"a TTL of another shape", "MergeTree ORDER BY x TTL toDate(second) + toIntervalMonth(1)", 0, "want TTL second + INTERVAL n DAY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDeltasTTL(tt.engine)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v; want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}
