// Package member is a stream's consumer-group member: Source consumes the stream's topics and
// drives its partition engine (the views or the clicks aggregator) through assignment, records,
// flushes, revocation and loss, so that the Kafka side of the exactly-once path is written once.
//
// At assignment each partition's checkpoint is checked against its log's bounds (package halt):
// one that does not fit halts the partition (paused before its first fetch, recorded in
// ClickHouse, reported by Check and the tally_aggregator_partitions_halted gauge) until an
// operator's decision names its checkpoint.
//
// A stopping member leaves its group at once, also a static one, so the group hands its
// partitions on and none comes in; the revoke that leaving runs may write what the member holds
// until the stop's deadline, and no longer; what is still held then is written once more, and
// the client closes. Whatever is not written by the deadline, the next owner replays from the
// ClickHouse checkpoints.
package member

import (
	"context"
	"errors"
	"sync/atomic"
)

// stopping is a Source's stop. It is made before the Kafka client (the group may call back
// before the client exists) and is safe for concurrent use by the poll loop, the group callbacks
// and Stop.
type stopping struct {
	live    context.Context // ends at the stop's deadline: the group callbacks' waits
	endLive context.CancelFunc
	leaving atomic.Bool // a partition assigned from then on is refused
}

func newStopping() *stopping {
	s := &stopping{}
	s.live, s.endLive = context.WithCancel(context.Background())
	return s
}

// errLeaving refuses a partition assigned while leaving.
var errLeaving = errors.New("this member is stopping; it takes no partition")

// refuse returns an error when the stop has begun, for an assignment to give up at once.
func (s *stopping) refuse() error {
	if s.leaving.Load() {
		return errLeaving
	}
	return nil
}

// until returns ctx ended also when the stop's deadline passes. The group callbacks get the
// client's context, which ends only once the client is closed, and closing waits for them:
// their ClickHouse retries must end with the stop instead.
func (s *stopping) until(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unregister := context.AfterFunc(s.live, cancel)
	return ctx, func() {
		unregister()
		cancel()
	}
}
