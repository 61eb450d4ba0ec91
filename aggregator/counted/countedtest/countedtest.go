// Package countedtest holds test doubles of the counted topic for the aggregator paths' tests.
// It is imported by tests only.
package countedtest

import (
	"context"
	"errors"

	"github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/schemas"
)

// FailAfterFirstChunk publishes only the first chunk of a batch and then fails, like a crash in
// the middle of a publish.
type FailAfterFirstChunk struct{ counted.Topic }

func (c FailAfterFirstChunk) Publish(ctx context.Context, kind schemas.CountKind, b schemas.BatchID, counts []schemas.BucketCount) error {
	recs := schemas.CountedRecords(kind, b, counts)
	if err := c.Topic.Publish(ctx, kind, b, recs[0].Counts); err != nil {
		return err
	}
	return errors.New("crashed after the first chunk")
}
