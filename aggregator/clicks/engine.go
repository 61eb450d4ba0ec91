package clicks

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
)

// NewSource joins the clicks and fraud_verdicts topics' consumer group with agg's engine. The
// group uses the range balancer, which gives partition p of both topics (they have the same
// partition count) to the same member, as the engine needs. c names the group and the member's
// dependencies; the stream's own fields are set here.
func NewSource(c member.Config, agg *Aggregator) (*member.Source, error) {
	c.Stream, c.Topics = "clicks", []string{schemas.TopicClicks, schemas.TopicFraudVerdicts}
	c.Balancers = []kgo.GroupBalancer{kgo.RangeBalancer()}
	return member.NewSource(c, agg.Engine)
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
