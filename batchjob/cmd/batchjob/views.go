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

	"github.com/tallypipeline/tally/batchjob/recount"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/logging"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/sink/rawlog"
)

func runViews(args []string) int {
	day, rest, err := recount.ParseArgs(args)
	if errors.Is(err, pflag.ErrHelp) {
		_, _ = os.Stdout.WriteString(recount.Usage)
		var sec sections
		_, _ = config.Load("batchjob views", []string{"--help"}, sec.list()...)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "batchjob views: %v\n\n%s", err, recount.Usage)
		return exitUsage
	}
	var sec sections
	cfg, err := config.Load("batchjob views", rest, sec.list()...)
	if err == nil && sec.Batchjob.ViewsLookback < sec.Views.Held() {
		err = fmt.Errorf("config: batchjob.views_lookback: got %s; want at least views.dedupe_window + views.dedupe_grace (%s)", sec.Batchjob.ViewsLookback, sec.Views.Held())
	}
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		err = cfg.RequireServers(config.Servers{ClickHouse: true})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitUsage
	}
	logger := logging.New(cfg.Log, os.Stderr).With("binary", "batchjob", "job", "views")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	octx, cancel := context.WithTimeout(ctx, time.Minute)
	conn, err := chclient.Open(octx, cfg.ClickHouse.Options())
	if err == nil {
		_, err = migrate.ApplyTo(octx, conn, logger, migrate.Target{Cluster: cfg.ClickHouse.Cluster})
	}
	cancel()
	if err != nil {
		logger.Error("open clickhouse", "err", err)
		return exitError
	}
	defer conn.Close()
	st, err := sec.Sink.OpenStore(ctx, &cfg, logger)
	if err != nil {
		logger.Error("open sink files", "err", err)
		return exitError
	}
	files := rawlog.Files[rawlog.ViewKey]{Store: st, Topic: schemas.TopicViews}
	ok, err := rawlog.Present(ctx, st, schemas.TopicViews, day.Add(-sec.Batchjob.ViewsLookback), day.Add(24*time.Hour))
	if err != nil {
		logger.Error("look for the day's files", "err", err)
		return exitError
	}
	if !ok {
		logger.Error("the sink's files do not cover the day (none written, or removed by retention)", "day", day.Format(time.DateOnly), "store", st.String())
		return exitError
	}
	meter := progress.Start(progress.Options{What: "view records"}) // lines only on a terminal, none under cron
	rep, err := recount.Run(ctx, day, recount.Deps{Source: files, SourceName: "files", ClickHouse: conn,
		Rules: sec.Views, Lookback: sec.Batchjob.ViewsLookback, Progress: meter, Logger: logger, Now: time.Now})
	meter.Stop()
	if err != nil {
		logger.Error("view recount failed", "err", err)
		return exitError
	}
	fmt.Println(rep.Summary())
	if rep.Differs() {
		return exitDifferences
	}
	return exitOK
}
