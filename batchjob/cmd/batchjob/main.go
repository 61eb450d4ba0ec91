// Command batchjob runs tally's nightly jobs. `batchjob likes --date YYYY-MM-DD | --all`
// rebuilds exact like state from the like log, reconciles Redis and ClickHouse with it and
// writes a versioned report (see package reconcile and `batchjob --help`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"tally/batchjob/reconcile"
	"tally/collector/likes"
	"tally/platform/chclient"
	"tally/platform/config"
	"tally/platform/logging"
	"tally/platform/progress"
	"tally/platform/redisclient"
	"tally/schemas"
	"tally/schemas/migrate"
)

// Exit codes, documented in reconcile.Usage.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitLocked = 3
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	job, rest, err := reconcile.ParseArgs(args)
	if errors.Is(err, reconcile.ErrHelp) {
		_, _ = os.Stdout.WriteString(reconcile.Usage)
		_, _ = config.Load("batchjob likes", []string{"--help"})
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "batchjob: %v\n\n%s", err, reconcile.Usage)
		return exitUsage
	}
	cfg, err := config.Load("batchjob likes", rest)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		err = cfg.UseInfraDefaults()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitUsage
	}
	logger := logging.New(cfg.Log, os.Stderr).With("binary", "batchjob", "job", "likes")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	octx, cancel := context.WithTimeout(ctx, time.Minute)
	conn, err := chclient.Open(octx, cfg.ClickHouse.Options())
	if err == nil {
		_, err = migrate.Apply(octx, conn, logger)
	}
	cancel()
	if err != nil {
		logger.Error("open clickhouse", "err", err)
		return exitError
	}
	defer conn.Close()
	rdb, err := redisclient.New(cfg.Redis.Options())
	if err != nil {
		logger.Error("open redis", "err", err)
		return exitError
	}
	defer rdb.Close()
	store := likes.NewStore(rdb)
	dial, err := cfg.Kafka.Security().Options()
	if err != nil {
		logger.Error("kafka client options", "err", err)
		return exitError
	}

	meter := progress.Start(progress.Options{What: "like records"}) // lines only on a terminal, none under cron
	rep, err := reconcile.Run(ctx, job, reconcile.Deps{
		Brokers: cfg.Kafka.Brokers, Dial: dial, Topic: schemas.TopicLikes, ClickHouse: conn, Store: store, Redis: rdb,
		LockTTL: 30 * time.Second, Progress: meter, Logger: logger, Now: time.Now,
	})
	meter.Stop()
	switch {
	case errors.Is(err, reconcile.ErrLocked):
		logger.Error("not running", "err", err)
		return exitLocked
	case err != nil:
		logger.Error("like reconciliation failed", "err", err)
		return exitError
	}
	fmt.Println(rep.Summary())
	return exitOK
}
