package archive

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tallypipeline/tally/sink/rawlog"
)

// flush writes p's open flush (marker, files) and commits it; p is then empty.
func (a *Archive) flush(ctx context.Context, p *partition) error {
	if p.batch == nil {
		return nil
	}
	t0 := time.Now()
	replay := p.marker != nil && p.marker.First == p.first && p.marker.Last == p.last
	if !replay {
		if err := a.writeMarker(p); err != nil {
			a.abort(p)
			return err
		}
	}
	rows, err := p.batch.Close()
	if err != nil {
		a.abort(p)
		return fmt.Errorf("finish files of %s partition %d offsets %d-%d: %w", p.topic.Name, p.id, p.first, p.last, err)
	}
	for hour, f := range p.files {
		name := rawlog.FileName(p.topic.Name, hour, p.id, p.first, p.last)
		if err := f.Commit(name); err != nil {
			a.abort(p)
			return fmt.Errorf("write sink file: %w", err)
		}
		a.m.files.WithLabelValues(p.topic.Name).Inc()
		a.m.rows.WithLabelValues(p.topic.Name).Add(float64(rows[hour]))
	}
	if err := a.commit(ctx, p); err != nil {
		a.reset(p)
		return err
	}
	a.m.flushSeconds.Observe(time.Since(t0).Seconds())
	a.logger.Debug("sink flush", "topic", p.topic.Name, "partition", p.id, "first", p.first, "last", p.last,
		"records", p.n, "files", len(p.files), "took", time.Since(t0).Round(time.Microsecond))
	a.reset(p)
	return nil
}

// flushAll flushes the partitions for which due says so. A partition replaying a marker is
// never cut early: its flush must end where the marker says.
func (a *Archive) flushAll(ctx context.Context, due func(*partition) bool) error {
	for _, p := range a.parts {
		if p.batch != nil && p.marker == nil && due(p) {
			if err := a.flush(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// abort drops p's open flush and its temporary files.
func (a *Archive) abort(p *partition) {
	for _, f := range p.files {
		f.Abort()
	}
	a.reset(p)
}

func (a *Archive) reset(p *partition) {
	p.batch, p.files, p.marker, p.n = nil, nil, nil, 0
}

// dropAll forgets every partition, removing the temporary files of open flushes.
func (a *Archive) dropAll() {
	for k, p := range a.parts {
		a.abort(p)
		delete(a.parts, k)
	}
}

func (a *Archive) writeMarker(p *partition) error {
	return rawlog.WriteMarker(a.store, p.topic.Name, p.id, rawlog.Marker{First: p.first, Last: p.last})
}

func (a *Archive) readMarker(ctx context.Context, p *partition) (*rawlog.Marker, error) {
	return rawlog.ReadMarker(ctx, a.store, p.topic.Name, p.id)
}

// commit commits p's flush to Kafka, retrying a few times: the next flush of the partition may
// not begin before this one is committed.
func (a *Archive) commit(ctx context.Context, p *partition) error {
	offs := map[string]map[int32]kgo.EpochOffset{p.topic.Name: {p.id: {Epoch: p.epoch, Offset: p.last + 1}}}
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("commit %s partition %d at %d: %w", p.topic.Name, p.id, p.last+1, ctx.Err())
			}
		}
		err = nil
		a.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, cerr error) {
			if cerr != nil {
				err = cerr
				return
			}
			for _, t := range resp.Topics {
				for _, pr := range t.Partitions {
					if pr.ErrorCode != 0 {
						err = fmt.Errorf("kafka error code %d", pr.ErrorCode)
					}
				}
			}
		})
		if err == nil {
			return nil
		}
		a.m.commitErrors.Inc()
		a.logger.Warn("commit sink offsets; retrying", "topic", p.topic.Name, "partition", p.id, "offset", p.last+1, "err", err)
	}
	return fmt.Errorf("commit %s partition %d at %d: %w", p.topic.Name, p.id, p.last+1, err)
}

// revoked flushes and commits the revoked partitions before they move; one replaying a marker is
// dropped instead (the next owner replays the same marker).
func (a *Archive) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.running, cancel)
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for topic, ids := range revoked {
		for _, id := range ids {
			k := tp{topic, id}
			p := a.parts[k]
			if p == nil {
				continue
			}
			if p.marker == nil {
				if err := a.flush(ctx, p); err != nil {
					a.logger.Warn("flush revoked partition; the next owner replays it", "topic", topic, "partition", id, "err", err)
				}
			}
			a.abort(p)
			delete(a.parts, k)
		}
	}
}

// lost drops the lost partitions: another member owns them already.
func (a *Archive) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for topic, ids := range lost {
		for _, id := range ids {
			if p := a.parts[tp{topic, id}]; p != nil {
				a.abort(p)
				delete(a.parts, tp{topic, id})
			}
		}
	}
}
