package buildinfo

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		in   Info
		want string
	}{
		{"stamped", Info{Version: "v1.2.0", Revision: "abc123", Time: "2026-12-04T03:01:31Z", GoVersion: "go1.26.8"},
			"v1.2.0 revision abc123 (2026-12-04T03:01:31Z) go1.26.8"},
		{"modified work tree", Info{Version: "(devel)", Revision: "abc123", Time: "2026-12-04T03:01:31Z", Modified: true, GoVersion: "go1.26.8"},
			"(devel) revision abc123 (2026-12-04T03:01:31Z) modified go1.26.8"},
		{"not stamped", Info{Version: "(devel)", Revision: "unknown", GoVersion: "go1.26.8"}, "(devel) revision unknown go1.26.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

// Read sees the test binary's own build, and Register exposes it as tally_build_info 1.
func TestReadAndRegister(t *testing.T) {
	info := Read()
	if info.GoVersion != runtime.Version() || info.Version == "" || info.Revision == "" {
		t.Errorf("got %+v; want Go %s and a version and revision, known or not", info, runtime.Version())
	}
	reg := prometheus.NewRegistry()
	info.Register(reg)
	want := `
		# HELP tally_build_info 1, labelled with the binary's build.
		# TYPE tally_build_info gauge
		tally_build_info{goversion="` + info.GoVersion + `",modified="` + map[bool]string{true: "true", false: "false"}[info.Modified] +
		`",revision="` + info.Revision + `",version="` + info.Version + `"} 1
	`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tally_build_info"); err != nil {
		t.Error(err)
	}
}
