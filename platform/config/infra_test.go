package config

import (
	"strings"
	"testing"
)

func TestRequireServers(t *testing.T) {
	all := Servers{Kafka: true, ClickHouse: true, Redis: true}
	set := Config{DataDir: "/d", Kafka: Kafka{Brokers: []string{"k:9092"}}, ClickHouse: ClickHouse{Addr: "c:8123"}, Redis: Redis{Addr: "r:6379"}}
	tests := []struct {
		name    string
		cfg     Config
		need    Servers
		missing string // "" when no error is wanted
	}{
		{"everything given", set, all, ""},
		{"nothing needed", Config{DataDir: "/d"}, Servers{}, ""},
		{"nothing given", Config{DataDir: "/d"}, all, "kafka.brokers, clickhouse.addr, redis.addr: not set"},
		{"only kafka needed", Config{DataDir: "/d", Kafka: set.Kafka}, Servers{Kafka: true}, ""},
		{"redis missing", Config{DataDir: "/d", Kafka: set.Kafka, ClickHouse: set.ClickHouse}, all, "redis.addr: not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.RequireServers(tc.need)
			switch {
			case tc.missing == "" && err != nil:
				t.Fatalf("got %v; want no error", err)
			case tc.missing != "" && (err == nil || !strings.Contains(err.Error(), tc.missing) || !strings.Contains(err.Error(), "/d/infra.env")):
				t.Fatalf("got %v; want an error naming %q and /d/infra.env", err, tc.missing)
			}
		})
	}
}
