// Package allinone composes every tally component into one process on the embedded defaults
// (the all-in-one), or runs only the embedded infrastructure (infra mode) so that component
// processes can be started, killed and restarted against it.
package allinone

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/tallypipeline/tally/aggregator"
	"github.com/tallypipeline/tally/aggregator/aggregatorconf"
	"github.com/tallypipeline/tally/allinone/demo"
	"github.com/tallypipeline/tally/collector"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/sink"
	"github.com/tallypipeline/tally/sink/sinkconf"
	"github.com/tallypipeline/tally/topk"
)

// Settings is every component's section of the configuration: the all-in-one reads them all.
// A new component adds its section here and to Sections.
type Settings struct {
	Collector  collectorconf.Settings
	Aggregator aggregatorconf.Settings
	TopK       topk.Settings
	Sink       sinkconf.Settings
	Demo       demo.Settings
	AllInOne   Components
	Embedded   Embedded
}

// Sections lists s's sections for config.Load, in the order --help shows them.
func (s *Settings) Sections() []config.Section {
	return append(append(s.Collector.Sections(), s.Aggregator.Sections()...), &s.TopK, &s.Sink, &s.Demo, &s.AllInOne, &s.Embedded)
}

// AllInOne returns the parts of the whole pipeline: embedded infrastructure for whatever is not
// configured, the aggregator, topk and the sink (unless s.AllInOne leaves them out), the collector, the
// demo workload if enabled, and a banner saying where to look (written to out).
func AllInOne(e cli.Env, s *Settings, out io.Writer) []lifecycle.Part {
	cfg := e.Config
	parts := embedded.Parts(cfg, e.Logger, s.Embedded.Options(e.Registry))
	parts = append(parts, aggregator.Parts(e, &s.Aggregator, lifecycle.SharedAdmin)...)
	if s.AllInOne.TopK {
		parts = append(parts, topk.Parts(e, &s.TopK, lifecycle.SharedAdmin)...)
	}
	if s.AllInOne.Sink {
		parts = append(parts, sink.Parts(e, &s.Sink, lifecycle.SharedAdmin)...)
	}
	coll, apiAddr := collector.Parts(e, &s.Collector)
	parts = append(parts, coll...)
	if s.Demo.Enabled && s.Collector.AuthOn() {
		// The demo posts without a key; with access control on it would only collect 401s.
		e.Logger.Warn("demo workload off: the API needs keys (collector.auth is on)")
		s.Demo.Enabled = false
	}
	if s.Demo.Enabled {
		w := &demo.Workload{Rate: s.Demo.Rate, Items: s.Demo.Items, Logger: e.Logger}
		parts = append(parts, lifecycle.Part{
			Name:  "demo workload",
			Start: func(context.Context) error { w.URL = "http://" + apiAddr(); w.Start(); return nil },
			Stop:  func(context.Context) error { w.Stop(); return nil },
		})
	}
	parts = append(parts, lifecycle.Part{
		Name: "banner",
		Start: func(context.Context) error {
			api := "http://" + apiAddr()
			admin := api // with auth on, /metrics is on the admin address (docs/SECURITY.md)
			if s.Collector.AuthOn() {
				admin = "http://" + s.Collector.AdminAddr
			}
			fmt.Fprintf(out, `
tally is running (data in %s).
  Live page:   %s/
  API:         %s   (POST /v1/views, POST /v1/events, GET /v1/counts?ids=, GET /v1/top?kind=items&window=1m, PUT /v1/items/{id}/likes/{user}; docs/API.md)
  Metrics:     %s/metrics   health: %s/healthz, %s/readyz
  ClickHouse:  http://%s/   e.g. curl -u %s: 'http://%s/?query=SELECT+item_id,sum(views)+FROM+%s.views_by_second+GROUP+BY+item_id+ORDER+BY+2+DESC+LIMIT+5'
  Kafka:       %v   Redis: %s
  Passwords:   %s   (Kafka, ClickHouse administrator, Redis; mode 0600)
  Demo:        %s
Stop with Ctrl-C.

`, cfg.DataDir, api, api, admin, api, api, cfg.ClickHouse.Addr, s.Embedded.DashboardsUser, cfg.ClickHouse.Addr, cfg.ClickHouse.Database,
				cfg.Kafka.Brokers, cfg.Redis.Addr, filepath.Join(cfg.DataDir, embedded.EnvFile), demoLine(s.Demo.Enabled, s.Demo.Rate))
			return nil
		},
	})
	return parts
}

// Infra returns only the embedded infrastructure parts and a banner with their addresses.
func Infra(e cli.Env, s *Embedded, out io.Writer) []lifecycle.Part {
	cfg := e.Config
	return append(embedded.Parts(cfg, e.Logger, s.Options(e.Registry)), lifecycle.Part{
		Name: "banner",
		Start: func(context.Context) error {
			env := filepath.Join(cfg.DataDir, embedded.EnvFile)
			fmt.Fprintf(out, "tally infra: kafka %v, clickhouse http://%s/, redis %s (data in %s)\ncomponents connect after: set -a; . %s; set +a\n",
				cfg.Kafka.Brokers, cfg.ClickHouse.Addr, cfg.Redis.Addr, cfg.DataDir, env)
			return nil
		},
	})
}

func demoLine(on bool, rate int) string {
	if !on {
		return "off (--demo.enabled=false)"
	}
	return fmt.Sprintf("posting %d views/s through the API (--demo.enabled=false to switch off)", rate)
}
