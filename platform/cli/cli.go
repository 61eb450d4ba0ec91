// Package cli is the shared body of every tally binary's main: load the config, build the
// logger, the metrics registry and the runner, let the binary list its parts, and run them until
// SIGINT or SIGTERM. It returns the process exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/platform/buildinfo"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/logging"
)

// Env is what a binary's part list is built from: the loaded shared configuration, the logger,
// the metrics registry, the runner the parts register readiness checks with, and the clock
// (Run sets time.Now; a test may pass its own).
type Env struct {
	Config   *config.Config
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Runner   *lifecycle.Runner
	Now      func() time.Time
}

// Command is what Run runs.
type Command struct {
	// Name is the binary (and sub-command) name, for --help and logs.
	Name string
	// ProcsPerCPU is the binary's runtime.procs_per_cpu when the setting is 0; 1 when unset.
	ProcsPerCPU int
	// MemoryShare is the part of the container's memory limit that runtime.memory_limit auto
	// gives Go's heap; 0.9 when unset. A binary whose embedded engines allocate outside Go's
	// heap gives it less.
	MemoryShare float64
	// Commands lists the binary's other sub-commands, one per line ("resume  decide on a
	// halted partition"), for --help: main dispatches them before Run.
	Commands string
	// Args are the command-line arguments after the name.
	Args []string
	// Needs are the servers a component binary must be given addresses of; it never embeds
	// them (the all-in-one, which may, needs none).
	Needs config.Servers
	// Sections are the components' settings the binary reads (beside the shared ones); they are
	// filled in before Parts is called.
	Sections []config.Section
	// Parts returns the binary's lifecycle parts.
	Parts func(Env) ([]lifecycle.Part, error)
}

// Run runs c and returns the process exit code.
func Run(c Command) int {
	name, parts := c.Name, c.Parts
	build := buildinfo.Read()
	cfg, err := config.Load(name, c.Args, c.Sections...)
	if errors.Is(err, pflag.ErrHelp) {
		if c.Commands != "" {
			fmt.Printf("\nOther commands (each has its own --help):\n%s", c.Commands)
		}
		return 0
	}
	if errors.Is(err, config.ErrVersion) {
		fmt.Println(name, build)
		return 0
	}
	if err == nil {
		err = cfg.RequireServers(c.Needs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger := logging.New(cfg.Log, os.Stderr).With("binary", name)
	_, envSet := os.LookupEnv("GOMAXPROCS")
	goDefault := runtime.GOMAXPROCS(0)
	perCPU := cfg.Runtime.ProcsPerCPU
	if perCPU == 0 {
		perCPU = max(c.ProcsPerCPU, 1)
	}
	n := procs(goDefault, perCPU, envSet)
	if n != goDefault {
		runtime.GOMAXPROCS(n)
	}
	logger.Info("go scheduler", "gomaxprocs", n, "cpus", runtime.NumCPU())
	share := c.MemoryShare
	if share == 0 {
		share = 0.9
	}
	if err := TuneMemory(cfg.Runtime, share, logger); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger.Info("build", "version", build.Version, "revision", build.Revision, "modified", build.Modified, "go", build.GoVersion)
	reg := NewRegistry(build)
	runner := lifecycle.NewRunner(logger)
	ps, err := parts(Env{Config: &cfg, Logger: logger, Registry: reg, Runner: runner, Now: time.Now})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runner.Run(ctx, cfg.Shutdown.Timeout, ps...); err != nil {
		logger.Error("exit", "err", err)
		return 1
	}
	return 0
}

// NewRegistry returns a binary's metrics registry: the Go runtime's and the process's metrics
// (process_cpu_seconds_total, which `load` reads) and build's tally_build_info.
func NewRegistry(build buildinfo.Info) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build.Register(reg)
	return reg
}

// procs is the GOMAXPROCS a process runs with: perCPU times Go's default (the CPUs the process
// may use), unless the GOMAXPROCS environment variable set it. Go notices a ready connection
// (a request, a Redis reply) only when a P runs out of work, or about every 10 ms from its
// monitor thread; with as many Ps as CPUs, all busy with Go work or held by calls into the
// embedded ClickHouse engine, every network hop of a request can wait that long. Spare Ps stay
// idle with a thread parked in the poller, so a ready connection is picked up at once; the
// kernel still shares the same CPUs among the threads. Setting it ends Go's tracking of later
// changes to the process's CPU limit.
func procs(goDefault, perCPU int, envSet bool) int {
	if envSet || perCPU < 1 {
		return goDefault
	}
	return goDefault * perCPU
}
