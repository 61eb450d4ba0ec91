package allinone

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/platform/config"
)

func TestEmbeddedSettings(t *testing.T) {
	ok := []struct {
		name string
		args []string
		get  func(Embedded) any
		want any
	}{
		{"memory size flag", []string{"--embedded.redis_maxmemory", "512MB"}, func(e Embedded) any { return e.RedisMaxMemory }, "512MB"},
		{"niceness default", nil, func(e Embedded) any { return e.RedisNice }, -10},
		{"niceness flag", []string{"--embedded.redis_nice", "0"}, func(e Embedded) any { return e.RedisNice }, 0},
		{"dashboards password on a LAN address", []string{"--embedded.clickhouse_addr", "10.1.2.3:8123", "--embedded.dashboards_password", "p"}, func(e Embedded) any { return e.DashboardsPass }, "p"},
		{"LAN address with a real ClickHouse", []string{"--embedded.clickhouse_addr", "10.1.2.3:8123", "--clickhouse.addr", "ch:8123"}, func(e Embedded) any { return e.ClickHouseAddr }, "10.1.2.3:8123"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			var e Embedded
			if _, err := config.Load("test", tc.args, &e); err != nil {
				t.Fatal(err)
			}
			if got := tc.get(e); got != tc.want {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
		})
	}
	bad := []struct {
		name string
		args []string
		key  string
	}{
		{"memory without digits", []string{"--embedded.redis_maxmemory", "gb"}, "embedded.redis_maxmemory"},
		{"memory unit unknown", []string{"--embedded.redis_maxmemory", "2tb"}, "embedded.redis_maxmemory"},
		{"memory zero is no bound", []string{"--embedded.redis_maxmemory", "0"}, "embedded.redis_maxmemory"},
		{"niceness below -20", []string{"--embedded.redis_nice", "-21"}, "embedded.redis_nice"},
		{"niceness above 19", []string{"--embedded.redis_nice", "20"}, "embedded.redis_nice"},
		{"all interfaces without a dashboards password", []string{"--embedded.clickhouse_addr", "0.0.0.0:8123"}, "embedded.dashboards_password"},
		{"a LAN address without a dashboards password", []string{"--embedded.clickhouse_addr", "10.1.2.3:8123"}, "embedded.dashboards_password"},
		{"dashboards user named as the pipeline user", []string{"--embedded.dashboards_user", "default"}, "embedded.dashboards_user"},
		{"cors wildcard", []string{"--embedded.cors_origins", "*"}, "embedded.cors_origins"},
		{"no time limit", []string{"--embedded.dashboards_max_execution_time", "0s"}, "embedded.dashboards_max_execution_time"},
		{"no memory", []string{"--embedded.dashboards_max_memory_usage", "0"}, "embedded.dashboards_max_memory_usage"},
		{"bad broker address", []string{"--embedded.kafka_addr", "nope"}, "embedded.kafka_addr"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var e Embedded
			if _, err := config.Load("test", tc.args, &e); err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("got %v; want an error naming %s", err, tc.key)
			}
		})
	}
}

func FuzzMemorySize(f *testing.F) {
	for _, s := range []string{"1gb", "512MB", "100", "0", "gb", "2tb", "1b", "-1k", "", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !memorySize(s) {
			return
		}
		num := strings.TrimRight(strings.ToLower(s), "kmgb")
		if n, err := strconv.ParseUint(num, 10, 64); err != nil || n == 0 {
			t.Fatalf("accepted %q; want digits of a positive number before the unit", s)
		}
	})
}
