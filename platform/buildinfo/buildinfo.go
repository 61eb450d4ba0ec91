// Package buildinfo says which build a binary is (its version, VCS revision and commit time,
// and Go version) from what the Go toolchain stamped into it, for `--version` and the
// tally_build_info metric. It reads the binary's own build information only: no file, no
// network, no engine, so a binary can answer `--version` before it loads anything.
package buildinfo

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is one binary's build.
type Info struct {
	Version   string // the main module's version; "(devel)" for a build from a work tree
	Revision  string // VCS commit, "unknown" when the build was not stamped
	Time      string // the commit's time, RFC 3339
	Modified  bool   // the work tree had changes the commit does not hold
	GoVersion string
}

// Read returns the running binary's build.
func Read() Info {
	info := Info{Version: "unknown", Revision: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the line `--version` prints after the binary's name.
func (i Info) String() string {
	s := fmt.Sprintf("%s revision %s", i.Version, i.Revision)
	if i.Time != "" {
		s += " (" + i.Time + ")"
	}
	if i.Modified {
		s += " modified"
	}
	return s + " " + i.GoVersion
}

// Register adds tally_build_info to reg: 1, labelled with the build, so that a dashboard can
// show which build each process runs and an alert can join on it.
func (i Info) Register(reg prometheus.Registerer) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_build_info", Help: "1, labelled with the binary's build.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "modified": fmt.Sprint(i.Modified), "goversion": i.GoVersion}})
	g.Set(1)
	reg.MustRegister(g)
}
