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
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"tally/platform/config"
	"tally/platform/lifecycle"
	"tally/platform/logging"
)

// Env is what a binary's part list is built from.
type Env struct {
	Config   *config.Config
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Runner   *lifecycle.Runner
}

// Run runs the binary called name with args. A standalone component (standalone true) never
// embeds infrastructure: unset addresses point at a `pipeline infra` process instead.
func Run(name string, args []string, standalone bool, parts func(Env) ([]lifecycle.Part, error)) int {
	cfg, err := config.Load(name, args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err == nil && standalone {
		err = cfg.UseInfraDefaults()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger := logging.New(cfg.Log, os.Stderr).With("binary", name)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	runner := lifecycle.NewRunner(logger)
	ps, err := parts(Env{Config: &cfg, Logger: logger, Registry: reg, Runner: runner})
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
