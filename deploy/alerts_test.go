package deploy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
)

// loadAlerts parses prometheus/alerts.yml as Prometheus does (promtool check rules: the file's
// shape, every expression, every template) and returns its alerts by name.
func loadAlerts(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join("prometheus", "alerts.yml"), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yml: %v", err)
	}
	if groups == nil {
		t.Fatal("alerts.yml: got no rule groups")
	}
	alerts := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r
		}
	}
	return alerts
}

// TestAlertRulesLoad: the rule file loads, every alert says its severity and what to do, every
// tally_* metric it reads is registered by the code, and Prometheus's config loads the file.
func TestAlertRulesLoad(t *testing.T) {
	alerts := loadAlerts(t)
	code := goSource(t)
	metricRe := regexp.MustCompile(`\btally_[a-z_]+`)
	for name, r := range alerts {
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: got severity %q, summary %q, description %q; want all three", name, r.Labels["severity"], r.Annotations["summary"], r.Annotations["description"])
		}
		for _, m := range metricRe.FindAllString(r.Expr, -1) {
			if !strings.Contains(code, `"`+m+`"`) {
				t.Errorf("%s: metric %s is not registered by any Go file", name, m)
			}
		}
	}
	if len(alerts) < 4 {
		t.Errorf("got %d alerts; want at least the halted, dead letter, epoch and rollup ones", len(alerts))
	}
	prom, err := os.ReadFile(filepath.Join("prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prom), "rule_files: [alerts.yml]") {
		t.Error("prometheus.yml: got no rule_files entry for alerts.yml")
	}
}

// TestAlertRulesFire evaluates each alert's expression with Prometheus's own engine over
// series written in promtool's notation: it must hold on the bad series after the alert's
// `for`, and not on the healthy ones.
func TestAlertRulesFire(t *testing.T) {
	alerts := loadAlerts(t)
	tests := []struct {
		alert       string
		bad, health string // series, one minute apart, in promqltest's load notation
	}{
		{"TallyPartitionHalted",
			`tally_aggregator_partitions_halted{stream="views",topic="views",partition="3"} 0 1x30`,
			`tally_aggregator_partitions_halted{stream="views",topic="views",partition="3"} 0x30`},
		{"TallyDeadLetters",
			`tally_dead_letters_total{source="clicks"} 0x20 2x10`,
			`tally_dead_letters_total{source="clicks"} 5x30`},
		{"TallyEpochDisagreement",
			`tally_views_epoch_disagreements_total 0x20 1x10`,
			`tally_views_epoch_disagreements_total 0x30`},
		{"TallyRollupRepairRefused",
			`tally_views_rollup_repairs_refused_total 0x20 1x10`,
			`tally_views_rollup_repairs_refused_total 0x30`},
		{"TallyFlushErrors",
			`tally_clicks_flush_errors_total 0+1x30`,
			`tally_clicks_flush_errors_total 3x30`},
		{"TallyZombieBatches",
			`tally_views_zombie_batches_total 0x20 4x10`,
			`tally_views_zombie_batches_total 0x30`},
		{"TallyLikesLoaderErrors",
			`tally_likes_loader_insert_errors_total 0+1x30`,
			`tally_likes_loader_insert_errors_total 2x30`},
	}
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1e6)
	for _, tt := range tests {
		t.Run(tt.alert, func(t *testing.T) {
			r, ok := alerts[tt.alert]
			if !ok {
				t.Fatalf("got no alert %s in alerts.yml", tt.alert)
			}
			at := time.Unix(0, 0).Add(25*time.Minute + time.Duration(r.For))
			holds := func(series string) bool {
				return alertHolds(t, engine, promqltest.LoadedStorage(t, "load 1m\n  "+series), r.Expr, at)
			}
			if !holds(tt.bad) {
				t.Errorf("on %s: got no alert; want %s firing", tt.bad, tt.alert)
			}
			if holds(tt.health) {
				t.Errorf("on %s: got %s firing; want none", tt.health, tt.alert)
			}
		})
	}
	for name := range alerts {
		found := false
		for _, tt := range tests {
			found = found || tt.alert == name
		}
		if !found {
			t.Errorf("alert %s has no firing test", name)
		}
	}
}

// alertHolds says whether expr, evaluated at at over st, returns any series.
func alertHolds(t *testing.T, engine promql.QueryEngine, st storage.Queryable, expr string, at time.Time) bool {
	t.Helper()
	q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, at)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", expr, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return len(v) > 0
}
