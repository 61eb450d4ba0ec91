package views

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"tally/aggregator/member"
	"tally/schemas"
)

// NewSource joins the views topic's consumer group with agg as the partition engine. c names
// the group and the member's dependencies; the stream's own fields are set here.
func NewSource(c member.Config, agg *Aggregator) (*member.Source, error) {
	c.Stream, c.Topics, c.Partitions = "views", []string{schemas.TopicViews}, agg.SetPartitions
	return member.NewSource(c, &engine{a: agg})
}

// engine is the Aggregator as a member.Source drives it. Its buffers are the poll loop's alone.
type engine struct {
	a       *Aggregator
	offsets []int64
	values  [][]byte
}

// Assign also reports to readiness whether partition state loads, and says how far each
// partition has counted: its deltas may be ahead of the sketches it resumes for.
func (e *engine) Assign(ctx context.Context, ids []int32) (member.Resume, error) {
	at, err := e.a.Assign(ctx, ids)
	if err != nil {
		e.a.writes.Failed(e.a.now(), fmt.Errorf("load partition state: %w", err))
		return member.Resume{}, err
	}
	e.a.writes.Succeeded(e.a.now())
	counted := make(map[int32]int64, len(at))
	e.a.mu.Lock()
	for id := range at {
		if p := e.a.parts[id]; p != nil {
			counted[id] = max(p.flushed, p.sketched)
		}
	}
	e.a.mu.Unlock()
	return member.Resume{At: views(at), Counted: views(counted)}, nil
}

func (e *engine) Process(_ string, id int32, recs []*kgo.Record) {
	e.offsets, e.values = e.offsets[:0], e.values[:0]
	for _, r := range recs {
		e.offsets = append(e.offsets, r.Offset)
		e.values = append(e.values, r.Value)
	}
	e.a.Process(id, e.offsets, e.values)
}

func (e *engine) Reclaims() []int32 { return e.a.Reclaims() }
func (e *engine) FlushDue() bool    { return e.a.FlushDue() }
func (e *engine) Lost(ids []int32)  { e.a.Lost(ids) }

func (e *engine) Flush(ctx context.Context) (member.Offsets, error) {
	done, err := e.a.Flush(ctx)
	return views(done), err
}

func (e *engine) FlushAll(ctx context.Context) (member.Offsets, error) {
	done, err := e.a.FlushAll(ctx)
	return views(done), err
}

func (e *engine) Revoke(ctx context.Context, ids []int32) (member.Offsets, error) {
	done, err := e.a.Revoke(ctx, ids)
	return views(done), err
}

func views(m map[int32]int64) member.Offsets {
	if len(m) == 0 {
		return nil
	}
	return member.Offsets{schemas.TopicViews: m}
}
