package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMemberWaitingInJoinIsAnswered has member X of a two-member group join again while Y
// heartbeats without rejoining, as a member still finishing its batch does. X's session (1 s)
// is far shorter than the rebalance timeout (4 s) the round waits for Y: X must stay in the
// group and get its answer when the round ends, as from a Kafka coordinator, not be dropped by
// its session timer with its JoinGroup never answered. Also after X's client closed the idle
// connection of its first JoinGroup (franz-go reaps idle connections), the address kfake
// describes X with: X, alive, joins on a new connection and is no member whose process is gone.
func TestMemberWaitingInJoinIsAnswered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []kgo.Opt
		steady time.Duration // before X joins again
	}{
		{"on its first connection", nil, 300 * time.Millisecond},
		// A sweep describes X meanwhile; heartbeats every 250 ms keep their own connection open.
		{"on a new connection", []kgo.Opt{kgo.ConnIdleTimeout(500 * time.Millisecond)}, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			x, y := twoMembers(ctx, t, tc.opts...)
			stopX := x.beat(ctx, 2)
			defer y.beat(ctx, 2)() // Y heartbeats and never rejoins
			time.Sleep(tc.steady)
			stopX() // X joins again, with new metadata
			joinCtx, joinCancel := context.WithTimeout(ctx, 9*time.Second)
			defer joinCancel()
			start := time.Now()
			resp, err := x.join(joinCtx, "v2")
			if err != nil {
				t.Fatalf("X's JoinGroup after %v: %v; want an answer when the round ends (about 4 s)", time.Since(start).Round(time.Millisecond), err)
			}
			if resp.Generation != 3 || resp.MemberID != x.id {
				t.Fatalf("got generation %d for member %s; want 3 for %s", resp.Generation, resp.MemberID, x.id)
			}
		})
	}
}

// TestMemberWaitingInSyncOutlivesADeadLeader has X, the leader, die after the round's answer and
// before its SyncGroup, having heartbeat since, so that Y, waiting in SyncGroup for X's
// assignment, has the older session timer. Y must stay in the group and be told to join again
// once X's session ends, then complete a round alone at once, as with a Kafka coordinator;
// kfake alone drops Y first, its SyncGroup unanswered, and miscounts the next round's joins.
func TestMemberWaitingInSyncOutlivesADeadLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, y := twoMembers(ctx, t)
	stopX, stopY := x.beat(ctx, 2), y.beat(ctx, 2)
	time.Sleep(300 * time.Millisecond)
	stopX()
	joinedX := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := x.join(ctx, "v2")
		if err != nil {
			t.Errorf("X joining again: %v", err)
		}
		joinedX <- resp
	}()
	time.Sleep(300 * time.Millisecond) // Y's heartbeats learn of the round
	stopY()
	respY, err := y.join(ctx, "v1")
	if err != nil {
		t.Fatalf("Y joining again: %v", err)
	}
	respX := <-joinedX
	if respX == nil || respY.Generation != 3 || respY.LeaderID != x.id {
		t.Fatalf("got generation %d led by %s; want 3 led by X (%s)", respY.Generation, respY.LeaderID, x.id)
	}
	time.Sleep(300 * time.Millisecond)
	stopX = x.beat(ctx, 3) // X's session timer restarts after Y's
	time.Sleep(300 * time.Millisecond)
	stopX()
	x.cl.Close() // the leader dies before its SyncGroup

	syncCtx, syncCancel := context.WithTimeout(ctx, 5*time.Second)
	defer syncCancel()
	start := time.Now()
	if err := y.sync(syncCtx, 3); !errors.Is(err, kerr.RebalanceInProgress) {
		t.Fatalf("Y's SyncGroup after %v: %v; want REBALANCE_IN_PROGRESS once X's 1 s session ends", time.Since(start).Round(time.Millisecond), err)
	}
	joinCtx, joinCancel := context.WithTimeout(ctx, 2*time.Second)
	defer joinCancel()
	if resp, err := y.join(joinCtx, "v1"); err != nil || resp.Generation != 4 {
		t.Fatalf("Y joining alone: got %v, %v; want generation 4 at once", resp, err)
	}
}

// TestDeadMemberWaitingInJoinIsNotKept has X join again as above and its process die (its
// connection closed) while the JoinGroup waits: X must leave the group on its session timeout,
// not be kept into the next generation as a member nobody hears from.
func TestDeadMemberWaitingInJoinIsNotKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, y := twoMembers(ctx, t)
	stopX := x.beat(ctx, 2)
	defer y.beat(ctx, 2)()
	time.Sleep(1500 * time.Millisecond) // a sweep describes X with its client address
	stopX()
	joinCtx, joinCancel := context.WithCancel(ctx)
	joined := make(chan struct{})
	go func() { defer close(joined); x.join(joinCtx, "v2") }() //nolint:errcheck // it dies waiting
	time.Sleep(300 * time.Millisecond)
	x.cl.Close() // the process dies with its JoinGroup waiting
	joinCancel()
	<-joined
	adm := kadm.NewClient(y.cl)
	deadline := time.Now().Add(3 * time.Second) // kept, it would stay until the round ends, 4 s after its join
	for {
		groups, err := adm.DescribeGroups(ctx, "g")
		if err == nil && !slices.ContainsFunc(groups["g"].Members, func(m kadm.DescribedGroupMember) bool { return m.MemberID == x.id }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("X still in the group (state %s, err %v) 3 s after its process died; want it gone after its 1 s session", groups["g"].State, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// twoMembers starts a broker and forms group "g" of two raw members, X and Y, stable in
// generation 2, each on a connection of its own (kfake answers a connection's requests in
// order).
func twoMembers(ctx context.Context, t *testing.T, opts ...kgo.Opt) (x, y *rawMember) {
	t.Helper()
	k, err := Start(Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	x, y = &rawMember{group: "g"}, &rawMember{group: "g"}
	for _, m := range []*rawMember{x, y} {
		if m.cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Addrs()...)}, opts...)...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.cl.Close)
	}
	x.joinNew(ctx, t)
	if err := x.sync(ctx, 1, x.id); err != nil {
		t.Fatal(err)
	}
	stopX := x.beat(ctx, 1) // as a client's heartbeat loop, at a quarter of the session
	joinedY := make(chan struct{})
	go func() { defer close(joinedY); y.joinNew(ctx, t) }()
	time.Sleep(200 * time.Millisecond) // Y's join starts the round; X rejoins as told
	stopX()
	if _, err := x.join(ctx, "v1"); err != nil {
		t.Fatalf("X rejoining with Y: %v", err)
	}
	<-joinedY
	var syncs sync.WaitGroup // the leader's, whichever it is, answers both
	for _, m := range []*rawMember{x, y} {
		syncs.Go(func() {
			if err := m.sync(ctx, 2, x.id, y.id); err != nil {
				t.Error(err)
			}
		})
	}
	syncs.Wait()
	return x, y
}

// rawMember is one member of a classic consumer group sending its requests one by one, as a
// client's group loop would, so that a test decides when each member speaks.
type rawMember struct {
	cl    *kgo.Client
	group string
	id    string
}

func (m *rawMember) join(ctx context.Context, meta string) (*kmsg.JoinGroupResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = m.group, m.id, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 1000, 4000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte(meta)
	req.Protocols = append(req.Protocols, p)
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	return resp, err
}

// joinNew joins as a new member, with the member id the broker asks for first.
func (m *rawMember) joinNew(ctx context.Context, t *testing.T) {
	resp, err := m.join(ctx, "v1")
	if err == kerr.MemberIDRequired {
		m.id = resp.MemberID
		resp, err = m.join(ctx, "v1")
	}
	if err != nil {
		t.Errorf("join: %v", err)
		return
	}
	m.id = resp.MemberID
}

// sync syncs in generation gen, passing every member's (empty) assignment, which the broker
// takes from the leader alone.
func (m *rawMember) sync(ctx context.Context, gen int32, members ...string) error {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = m.group, m.id, gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	for _, id := range members {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID = id
		req.GroupAssignment = append(req.GroupAssignment, a)
	}
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("sync %s in generation %d: %w", m.id, gen, err)
	}
	return nil
}

// beat heartbeats in generation gen every 250 ms until the returned function is called.
func (m *rawMember) beat(ctx context.Context, gen int32) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
				req := kmsg.NewPtrHeartbeatRequest()
				req.Group, req.MemberID, req.Generation = m.group, m.id, gen
				req.RequestWith(ctx, m.cl) //nolint:errcheck // REBALANCE_IN_PROGRESS is an answer expected
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
