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
//
// A Stop is made before the Kafka client (the group may call back before the client exists)
// and is safe for concurrent use by the poll loop, the group callbacks and the stopping caller.
package member

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stop is one member's stop.
type Stop struct {
	live    context.Context // ends at the stop's deadline: the group callbacks' waits
	endLive context.CancelFunc
	leaving atomic.Bool
}

// New returns a Stop that has not begun.
func New() *Stop {
	s := &Stop{}
	s.live, s.endLive = context.WithCancel(context.Background())
	return s
}

// Leaving reports whether the stop has begun; a partition assigned from then on is refused.
func (s *Stop) Leaving() bool { return s.leaving.Load() }

// errLeaving refuses a partition assigned while leaving.
var errLeaving = errors.New("this member is stopping; it takes no partition")

// Refuse returns an error when the stop has begun, for an assignment to give up at once.
func (s *Stop) Refuse() error {
	if s.Leaving() {
		return errLeaving
	}
	return nil
}

// Until returns ctx ended also when the stop's deadline passes. The group callbacks get the
// client's context, which ends only once the client is closed, and closing waits for them:
// their ClickHouse retries must end with the stop instead.
func (s *Stop) Until(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unregister := context.AfterFunc(s.live, cancel)
	return ctx, func() {
		unregister()
		cancel()
	}
}

// EndLoop returns the endLoop of Leave for a poll loop that ends when cancel is called, closes
// done, and leaves why it ended in *err.
func EndLoop(cancel context.CancelFunc, done <-chan struct{}, err *error) func() error {
	return func() error {
		cancel()
		<-done
		if errors.Is(*err, context.Canceled) {
			return nil
		}
		return *err
	}
}

// Leave stops the member of group within ctx: endLoop ends the poll loop and returns why it
// ended (nil for the stop itself); the group is then left, whose revoke writes and commits what
// is held; last writes whatever the leave did not (it was cut short) and, for a static member,
// leaves by instance id (the client's own leave does not); then the client closes.
func (s *Stop) Leave(ctx context.Context, cl *kgo.Client, group string, endLoop func() error, last func(context.Context) error) error {
	s.leaving.Store(true)
	defer context.AfterFunc(ctx, s.endLive)()
	loopErr := endLoop()
	leaveErr := cl.LeaveGroupContext(ctx)
	if leaveErr != nil {
		leaveErr = fmt.Errorf("leave group %s: %w", group, leaveErr)
	}
	lastErr := last(ctx)
	s.endLive()
	cl.Close()
	return errors.Join(loopErr, leaveErr, lastErr)
}
