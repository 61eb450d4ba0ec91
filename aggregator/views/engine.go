package views

import (
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
)

// NewSource joins the views topic's consumer group with agg's engine. c names the group and the
// member's dependencies; the stream's own fields are set here.
func NewSource(c member.Config, agg *Aggregator) (*member.Source, error) {
	c.Stream, c.Topics, c.Partitions = "views", []string{schemas.TopicViews}, agg.SetPartitions
	return member.NewSource(c, agg.Engine)
}
