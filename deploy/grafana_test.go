package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDashboardDataSources: every panel reads one of the provisioned data sources, by uid.
func TestDashboardDataSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "provisioning", "datasources", "tally.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var prov struct {
		Datasources []struct {
			UID  string `json:"uid"`
			Type string `json:"type"`
		} `json:"datasources"`
	}
	if err := yaml.Unmarshal(b, &prov); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, d := range prov.Datasources {
		types[d.UID] = d.Type
	}
	if types["tally-clickhouse"] != "grafana-clickhouse-datasource" || types["tally-prometheus"] != "prometheus" {
		t.Fatalf("provisioned data sources %v; want tally-clickhouse (ClickHouse plugin) and tally-prometheus", types)
	}
	for file, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: got uid %q title %q; want both", file, d.UID, d.Title)
		}
		for _, p := range d.Panels {
			if got := types[p.Datasource.UID]; got == "" || got != p.Datasource.Type {
				t.Errorf("%s %q: data source %s/%s is not provisioned", file, p.Title, p.Datasource.Type, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s %q: got no queries", file, p.Title)
			}
		}
	}
}

// TestDashboardMetricsExist: every tally_* metric a Prometheus panel reads is registered by the
// code (its name appears in a non-test Go file), so a renamed metric cannot leave a panel empty.
func TestDashboardMetricsExist(t *testing.T) {
	code := goSource(t)
	metricRe := regexp.MustCompile(`\btally_[a-z_]+`)
	n := 0
	for file, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					continue
				}
				if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
					t.Errorf("%s %q: unbalanced parentheses in %s", file, p.Title, tg.Expr)
				}
				for _, m := range metricRe.FindAllString(tg.Expr, -1) {
					n++
					name := m
					for _, suffix := range []string{"_bucket", "_count", "_sum"} {
						name = strings.TrimSuffix(name, suffix)
					}
					if !strings.Contains(code, `"`+name+`"`) {
						t.Errorf("%s %q: metric %s is not registered by any Go file", file, p.Title, name)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("got no tally_* metrics in the dashboards; want the operations dashboard's")
	}
}

// goSource returns the text of every non-test Go file of the repository outside deploy/, where
// the metrics are registered.
func goSource(t *testing.T) string {
	t.Helper()
	var src strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "deploy" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return src.String()
}
