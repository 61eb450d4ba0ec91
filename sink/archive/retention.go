package archive

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tallypipeline/tally/sink/store"
)

func (a *Archive) retainLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.RetentionEvery)
	defer t.Stop()
	for {
		for _, topic := range a.cfg.Topics {
			keep := topic.Retention
			if d, ok := a.cfg.Retention[topic.Name]; ok {
				keep = d
			}
			n, err := Retain(ctx, a.store, topic.Name, keep, a.now(), a.logger)
			a.m.deleted.WithLabelValues(topic.Name).Add(float64(n))
			if err != nil && ctx.Err() == nil {
				a.logger.Warn("delete expired sink files; retrying later", "topic", topic.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Retain deletes a topic's hours that ended more than keep before now, whole hours at a time,
// logging each hour it deletes, and returns how many files it deleted.
func Retain(ctx context.Context, st store.Store, topic string, keep time.Duration, now time.Time, logger *slog.Logger) (int, error) {
	cutoff := now.UTC().Add(-keep).Truncate(time.Hour) // hours before it ended at or before now-keep
	days, err := st.Dirs(ctx, topic+"/")
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, d := range days {
		day, err := time.Parse(time.DateOnly, strings.TrimSuffix(strings.TrimPrefix(d, topic+"/"), "/"))
		if err != nil || !day.Before(cutoff) {
			continue
		}
		hours, err := st.Dirs(ctx, d)
		if err != nil {
			return deleted, err
		}
		for _, h := range hours {
			hh, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(h, d), "/"))
			if err != nil || hh < 0 || hh > 23 {
				continue
			}
			hour := day.Add(time.Duration(hh) * time.Hour)
			if !hour.Before(cutoff) {
				continue
			}
			names, err := st.List(ctx, h)
			if err != nil {
				return deleted, err
			}
			if err := st.Delete(ctx, names); err != nil {
				return deleted, err
			}
			deleted += len(names)
			logger.Info("deleted expired sink hour", "topic", topic, "hour", hour.Format(time.RFC3339), "files", len(names), "retention", keep)
		}
	}
	return deleted, nil
}
