package views

import (
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"tally/aggregator/halt"
	"tally/aggregator/member"
)

// testMember is a views group member of the test broker, with conn keeping its halts.
func testMember(group string, conn driver.Conn, logger *slog.Logger) member.Config {
	return member.Config{Group: member.Group{Brokers: []string{infra.Kafka.Addr()}, Name: group, SessionTimeout: 6 * time.Second},
		Poll: 200 * time.Millisecond, Halts: halt.Store{Conn: conn}, Owner: "test", Now: time.Now, Logger: logger, Registry: prometheus.NewRegistry()}
}
