package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/logging"
	"github.com/tallypipeline/tally/schemas/migrate"
)

// migrateUsage is the help of `aggregator migrate`.
const migrateUsage = `usage: aggregator migrate print [--after N] | status | apply  [config flags]

For operators who own their DDL. Every component applies the migrations itself at start; these
do it by hand:
  print    write the SQL of every migration after version N (default 0) for clickhouse.cluster,
           each followed by the row that records it in schema_migrations, so that the
           components find it applied (needs no server)
  status   list every migration of this build as applied, pending or changed
  apply    apply what is pending, as a component's start does, and print the status
Config flags (clickhouse.addr, .database, .username, .password, .cluster, ...) as for the
aggregator; --help lists them. Exit status: 0 done, 1 failed, 2 bad usage, 3 (status) some
migration pending or changed.
`

// runMigrate runs `aggregator migrate` and returns the exit code.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || !slices.Contains([]string{"print", "status", "apply"}, args[0]) {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, migrateUsage)
			_, _ = config.Load("aggregator migrate", []string{"--help"})
			return 0
		}
		fmt.Fprintf(stderr, "aggregator migrate: want print, status or apply\n\n%s", migrateUsage)
		return 2
	}
	action, rest := args[0], args[1:]
	after := uint32(0)
	if i := slices.IndexFunc(rest, func(a string) bool { return a == "--after" || strings.HasPrefix(a, "--after=") }); i >= 0 && action == "print" {
		v, ok := strings.CutPrefix(rest[i], "--after=")
		n := 1
		if !ok && i+1 < len(rest) {
			v, n = rest[i+1], 2
		}
		a, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			fmt.Fprintf(stderr, "aggregator migrate: --after %q: want a migration version\n", v)
			return 2
		}
		after, rest = uint32(a), slices.Delete(rest, i, i+n)
	}
	cfg, err := config.Load("aggregator migrate", rest)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err == nil && action != "print" {
		err = cfg.RequireServers(config.Servers{ClickHouse: true})
	}
	if err != nil {
		fmt.Fprintf(stderr, "aggregator migrate: %v\n", err)
		return 2
	}
	target := migrate.Target{Cluster: cfg.ClickHouse.Cluster}
	if action == "print" {
		if err := migrate.Script(stdout, target, after); err != nil {
			fmt.Fprintf(stderr, "aggregator migrate: %v\n", err)
			return 1
		}
		return 0
	}
	return migrateOnServer(cfg, target, action == "apply", stdout, stderr)
}

// migrateOnServer applies the pending migrations when apply is set, then prints every
// migration's status.
func migrateOnServer(cfg config.Config, target migrate.Target, apply bool, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := chclient.Open(ctx, cfg.ClickHouse.Options())
	if err != nil {
		fmt.Fprintf(stderr, "aggregator migrate: %v\n", err)
		return 1
	}
	defer conn.Close()
	if apply {
		logger := logging.New(cfg.Log, stderr).With("binary", "aggregator migrate")
		if _, err := migrate.ApplyTo(ctx, conn, logger, target); err != nil {
			fmt.Fprintf(stderr, "aggregator migrate: %v\n", err)
			return 1
		}
	}
	states, err := migrate.Status(ctx, conn, target)
	if err != nil {
		fmt.Fprintf(stderr, "aggregator migrate: %v\n", err)
		return 1
	}
	code := 0
	for _, s := range states {
		fmt.Fprintf(stdout, "%03d_%s\t%s\n", s.Version, s.Name, s.Status)
		if s.Status != "applied" {
			code = 3
		}
	}
	return code
}
