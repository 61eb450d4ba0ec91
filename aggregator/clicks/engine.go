package clicks

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"tally/aggregator/member"
	"tally/schemas"
)

// NewSource joins the clicks and fraud_verdicts topics' consumer group with agg as the
// partition engine. The group uses the range balancer, which gives partition p of both topics
// (they have the same partition count) to the same member, as the engine needs. c names the
// group and the member's dependencies; the stream's own fields are set here.
func NewSource(c member.Config, agg *Aggregator) (*member.Source, error) {
	c.Stream, c.Topics = "clicks", []string{schemas.TopicClicks, schemas.TopicFraudVerdicts}
	c.Balancers = []kgo.GroupBalancer{kgo.RangeBalancer()}
	return member.NewSource(c, engine{agg})
}

// engine is the Aggregator as a member.Source drives it.
type engine struct{ a *Aggregator }

// Assign also reports to readiness whether partition state loads.
func (e engine) Assign(ctx context.Context, ids []int32) (member.Resume, error) {
	at, err := e.a.Assign(ctx, ids)
	if err != nil {
		e.a.writes.Failed(e.a.now(), fmt.Errorf("load click partition state: %w", err))
		return member.Resume{}, err
	}
	e.a.writes.Succeeded(e.a.now())
	return member.Resume{At: split(at)}, nil
}

func (e engine) Process(topic string, id int32, recs []*kgo.Record) { e.a.Process(topic, id, recs) }
func (e engine) Reclaims() []int32                                  { return nil }
func (e engine) FlushDue() bool                                     { return e.a.FlushDue() }
func (e engine) Lost(ids []int32)                                   { e.a.Lost(ids) }

func (e engine) Flush(ctx context.Context) (member.Offsets, error) {
	done, err := e.a.Flush(ctx)
	return split(done), err
}

func (e engine) FlushAll(ctx context.Context) (member.Offsets, error) {
	done, err := e.a.FlushAll(ctx)
	return split(done), err
}

func (e engine) Revoke(ctx context.Context, ids []int32) (member.Offsets, error) {
	done, err := e.a.Revoke(ctx, ids)
	return split(done), err
}

// split gives each topic its offsets.
func split(m map[int32]offsets) member.Offsets {
	if len(m) == 0 {
		return nil
	}
	c, v := make(map[int32]int64, len(m)), make(map[int32]int64, len(m))
	for id, o := range m {
		c[id], v[id] = o.clicks, o.verdicts
	}
	return member.Offsets{schemas.TopicClicks: c, schemas.TopicFraudVerdicts: v}
}
