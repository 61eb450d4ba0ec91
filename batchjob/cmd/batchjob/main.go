// Command batchjob runs tally's nightly jobs:
//   - `batchjob likes --date YYYY-MM-DD | --all` rebuilds exact like state from the like log,
//     reconciles Redis and ClickHouse with it and writes a versioned report (package reconcile);
//   - `batchjob clicks --date YYYY-MM-DD` writes the day's exact, versioned click counts per ad
//     from the click log, and `batchjob clicks audit --ad X --date D` lists the clicks behind one
//     ad's count and the day's refused click and verdict records (package clicks);
//   - `batchjob views --date YYYY-MM-DD` recounts a day's views from the sink's files and reports
//     any difference from the streaming totals (package recount, views.go);
//   - `batchjob counters --namespace NS --date YYYY-MM-DD` recounts a namespace's generic
//     counters on a day from the log and reports any difference from the stream (package
//     counters, counters.go).
//
// See `batchjob --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/batchjob"
	"github.com/tallypipeline/tally/batchjob/clicks"
	"github.com/tallypipeline/tally/batchjob/counters"
	"github.com/tallypipeline/tally/batchjob/reconcile"
	"github.com/tallypipeline/tally/batchjob/recount"
	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/buildinfo"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/logging"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/clickconf"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/schemas/viewconf"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/sinkconf"
	"github.com/tallypipeline/tally/sink/store"
)

// Exit codes, documented in each job's Usage.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitLocked = 3
	// exitDifferences: a recount (views, counters) found totals that differ from the stream's.
	exitDifferences = 4
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "clicks":
			return runClicks(args)
		case "views":
			return runViews(args[1:])
		case "counters":
			return runCounters(args[1:])
		case "--version":
			fmt.Println("batchjob", buildinfo.Read())
			return exitOK
		case "likes", "-h", "--help":
		default:
			fmt.Fprintf(os.Stderr, "batchjob: unknown command %q; want likes, clicks, views or counters\n\n%s%s%s%s", args[0], reconcile.Usage, clicks.Usage, recount.Usage, counters.Usage)
			return exitUsage
		}
	}
	job, rest, err := reconcile.ParseArgs(args)
	if errors.Is(err, pflag.ErrHelp) {
		_, _ = os.Stdout.WriteString(reconcile.Usage + clicks.Usage + recount.Usage + counters.Usage)
		var sec sections
		_, _ = config.Load("batchjob", []string{"--help"}, sec.list()...)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "batchjob: %v\n\n%s", err, reconcile.Usage)
		return exitUsage
	}
	env, code := open("likes", rest)
	if env == nil {
		return code
	}
	defer env.close()
	store := likestate.NewStore(env.rdb)
	files, err := env.files()
	if err != nil {
		env.logger.Error("open sink files", "err", err)
		return exitError
	}
	meter := progress.Start(progress.Options{What: "like records"}) // lines only on a terminal, none under cron
	rep, err := reconcile.Run(env.ctx, job, reconcile.Deps{
		Brokers: env.cfg.Kafka.Brokers, Dial: env.dial, Topic: schemas.TopicLikes, Files: files, SinkGroup: env.sec.Sink.Group, ClickHouse: env.conn, Store: store, Redis: env.rdb,
		LockTTL: env.sec.Batchjob.LockTTL, Progress: meter, Logger: env.logger, Now: time.Now,
	})
	meter.Stop()
	if err != nil {
		return failed(env.logger, "like reconciliation", err)
	}
	fmt.Println(rep.Summary())
	return exitOK
}

func runClicks(args []string) int {
	cmd, env, code := openJob("clicks", clicks.Usage, args, clicks.ParseArgs)
	if env == nil {
		return code
	}
	defer env.close()
	cfg := env.cfg
	kafkaSrc := clicks.NewKafkaSource(clicks.KafkaOptions{Brokers: cfg.Kafka.Brokers, Dial: env.dial,
		ClicksTopic: schemas.TopicClicks, VerdictsTopic: schemas.TopicFraudVerdicts,
		Early: env.sec.Collector.FutureBound + env.sec.Batchjob.ClicksSkew, Late: env.sec.Collector.LateBound + env.sec.Batchjob.ClicksSkew,
		Logger: env.logger})
	var src clicks.Source = kafkaSrc
	st, err := env.files()
	if err != nil {
		env.logger.Error("open sink files", "err", err)
		return exitError
	}
	day := clicks.DayOf(cmd.Date)
	ok, err := rawlog.Present(env.ctx, st, schemas.TopicClicks, day.Add(-env.sec.Batchjob.ClicksLookback), day.AddDate(0, 0, 1))
	if err != nil {
		env.logger.Error("look for the sink's click files", "err", err)
		return exitError
	}
	if ok {
		src = clicks.NewFilesSource(st, kafkaSrc, env.sec.Sink.Group)
	}
	env.logger.Info("click source chosen", "files", ok, "store", st.String())
	deps := clicks.Deps{
		Source:     src,
		ClickHouse: env.conn, Redis: env.rdb, LockTTL: env.sec.Batchjob.LockTTL,
		Rules:    clicks.Rules{FraudScoreThreshold: env.sec.Clicks.FraudScoreThreshold},
		Lookback: env.sec.Batchjob.ClicksLookback, Logger: env.logger, Now: time.Now,
	}
	meter := progress.Start(progress.Options{What: "click and verdict records"}) // lines only on a terminal, none under cron
	defer meter.Stop()
	deps.Progress = meter
	if cmd.Audit {
		ar, err := clicks.Audit(env.ctx, cmd.Date, cmd.AdID, deps)
		if err == nil {
			err = ar.Write(os.Stdout)
		}
		if err != nil {
			env.logger.Error("click audit failed", "err", err)
			return exitError
		}
		return exitOK
	}
	rep, err := clicks.Run(env.ctx, cmd.Date, deps)
	if err != nil {
		return failed(env.logger, "click report", err)
	}
	fmt.Println(rep.Summary())
	return exitOK
}

// failed logs a run's error and returns its exit code: exitLocked when another copy holds the
// job's lock.
func failed(logger *slog.Logger, what string, err error) int {
	if errors.Is(err, runlock.ErrLocked) {
		logger.Error("not running", "err", err)
		return exitLocked
	}
	logger.Error(what+" failed", "err", err)
	return exitError
}

// env is what every job opens: settings, logger, a context ended by SIGINT/SIGTERM, ClickHouse
// with the migrations applied, Redis, and the Kafka connection options.
type env struct {
	cfg    config.Config
	sec    sections
	logger *slog.Logger
	ctx    context.Context
	stop   context.CancelFunc
	conn   driver.Conn
	rdb    redis.UniversalClient
	dial   []kgo.Opt
}

// openJob reads a job's command line with parse: --help prints usage and the settings' flags, a
// bad line the error and usage (exit 2); otherwise it opens what the job needs. On failure or
// help it returns a nil env and the exit code.
func openJob[C any](job, usage string, args []string, parse func([]string) (C, []string, error)) (C, *env, int) {
	cmd, rest, err := parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		_, _ = os.Stdout.WriteString(usage)
		var sec sections
		_, _ = config.Load("batchjob "+job, []string{"--help"}, sec.list()...)
		return cmd, nil, exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "batchjob %s: %v\n\n%s", job, err, usage)
		return cmd, nil, exitUsage
	}
	e, code := open(job, rest)
	return cmd, e, code
}

// open loads the settings from rest and opens what a job needs. On failure it returns nil and
// the exit code (0 when only help was asked for).
func open(job string, rest []string) (*env, int) {
	var sec sections
	cfg, err := config.Load("batchjob "+job, rest, sec.list()...)
	if errors.Is(err, pflag.ErrHelp) {
		return nil, exitOK
	}
	if err == nil {
		err = cfg.RequireServers(config.Servers{Kafka: true, ClickHouse: true, Redis: true})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, exitUsage
	}
	e := &env{cfg: cfg, sec: sec, logger: logging.New(cfg.Log, os.Stderr).With("binary", "batchjob", "job", job)}
	if err := cli.TuneMemory(cfg.Runtime, 0.9, e.logger); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, exitUsage
	}
	if e.dial, err = cfg.Kafka.Security().Options(); err != nil {
		e.logger.Error("kafka client options", "err", err)
		return nil, exitError
	}
	e.ctx, e.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	octx, cancel := context.WithTimeout(e.ctx, time.Minute)
	e.conn, err = chclient.Open(octx, cfg.ClickHouse.Options())
	if err == nil {
		if _, err = migrate.ApplyTo(octx, e.conn, e.logger, migrate.Target{Cluster: e.cfg.ClickHouse.Cluster}); err != nil {
			e.conn.Close()
		}
	}
	cancel()
	if err != nil {
		e.logger.Error("open clickhouse", "err", err)
		e.stop()
		return nil, exitError
	}
	if e.rdb, err = redisclient.New(cfg.Redis.Options()); err != nil {
		e.logger.Error("open redis", "err", err)
		e.conn.Close()
		e.stop()
		return nil, exitError
	}
	return e, exitOK
}

// files opens the sink's store (sink.storage, sink.dir, sink.s3.*), where the jobs find the
// sink's files.
func (e *env) files() (store.Store, error) {
	return e.sec.Sink.OpenStore(e.ctx, &e.cfg, e.logger)
}

func (e *env) close() {
	e.rdb.Close()
	e.conn.Close()
	e.stop()
}

// sections are the configuration sections the jobs read besides the shared ones: the
// collector's time bounds (which clicks the log can hold), the rule sets' counting rules (views
// and clicks, as the aggregators count), the sink's files, and the jobs' own. The collector's
// part of the clicks section is loaded with it, so a file's clicks section is checked whole.
type sections struct {
	Collector collectorconf.Settings
	Views     viewconf.Rules
	Clicks    clickconf.Rules
	Sink      sinkconf.Settings
	Batchjob  batchjob.Settings
}

func (s *sections) list() []config.Section {
	return append(s.Collector.Sections(), &s.Views, &s.Clicks, &s.Sink, &s.Batchjob)
}
