// Command aggregator consumes the event topics and writes exact, deduplicated totals to
// ClickHouse. `aggregator resume` lists the partitions halted because their checkpoint does not
// fit their Kafka log, and records an operator's decision to resume one (package halt);
// `aggregator migrate` prints, applies or lists the ClickHouse migrations (package migrate).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/aggregator"
	"github.com/tallypipeline/tally/aggregator/aggregatorconf"
	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/schemas/clickconf"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "resume" {
		os.Exit(resume(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "migrate" {
		os.Exit(runMigrate(os.Args[2:], os.Stdout, os.Stderr))
	}
	var settings aggregatorconf.Settings
	// The click-id keys are the clicks section's other part: the aggregator reads none of them,
	// but loads them so that a file's clicks section is checked whole (config.Section).
	var clickIDs clickconf.ClickIDs
	os.Exit(cli.Run(cli.Command{Name: "aggregator", Args: os.Args[1:], Commands: "  aggregator resume    list the halted partitions; record the decision to resume one\n  aggregator migrate   print, apply or list the ClickHouse migrations, for operators who own their DDL\n", Needs: config.Servers{Kafka: true, ClickHouse: true, Redis: true}, Sections: append(settings.Sections(), &clickIDs), Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		return aggregator.Parts(e, &settings, lifecycle.OwnAdmin), nil
	}}))
}

// resume runs `aggregator resume` and returns the exit code: 0 done, 1 failed, 2 bad usage.
func resume(args []string) int {
	a, rest, err := halt.ParseArgs(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Print(halt.Usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregator resume: %v\n\n%s", err, halt.Usage)
		return 2
	}
	cfg, err := config.Load("aggregator resume", rest)
	if err == nil {
		err = cfg.RequireServers(config.Servers{ClickHouse: true})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregator resume: %v\n", err)
		return 2
	}
	if a.By == "" {
		a.By = operator()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := chclient.Open(ctx, cfg.ClickHouse.Options())
	if err == nil {
		defer conn.Close()
		err = halt.Run(ctx, halt.Store{Conn: conn}, a, time.Now(), os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregator resume: %v\n", err)
		return 1
	}
	return 0
}

// operator names who decided, when --by does not: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
