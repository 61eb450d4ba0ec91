package main

import (
	"fmt"
	"time"

	"github.com/tallypipeline/tally/batchjob/counters"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
)

func runCounters(args []string) int {
	cmd, env, code := openJob("counters", counters.Usage, args, counters.ParseArgs)
	if env == nil {
		return code
	}
	defer env.close()
	meter := progress.Start(progress.Options{What: "counter records"}) // lines only on a terminal, none under cron
	reps, err := counters.Run(env.ctx, cmd.Namespace, cmd.Date, counters.Deps{
		Log:   logread.Reader{Brokers: env.cfg.Kafka.Brokers, Dial: env.dial, Client: "tally-batchjob-counters", Logger: env.logger},
		Topic: schemas.TopicCounterEvents, ClickHouse: env.conn, Redis: env.rdb, LockTTL: env.sec.Batchjob.LockTTL,
		Progress: meter, Logger: env.logger, Now: time.Now,
	})
	meter.Stop()
	if err != nil {
		return failed(env.logger, "counter recount", err)
	}
	if len(reps) == 0 {
		fmt.Println("no eventual or accurate namespace: nothing to recount")
	}
	code = exitOK
	for _, rep := range reps {
		fmt.Println(rep.Summary())
		if len(rep.Differing) > 0 {
			code = exitDifferences
		}
	}
	return code
}
