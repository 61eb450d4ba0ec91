package kafkabroker

import (
	"context"
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
// its session timer with its JoinGroup never answered.
func TestMemberWaitingInJoinIsAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, y := twoMembers(ctx, t)
	stopX := x.beat(ctx, 2)
	defer y.beat(ctx, 2)() // Y heartbeats and never rejoins
	time.Sleep(300 * time.Millisecond)
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
func twoMembers(ctx context.Context, t *testing.T) (x, y *rawMember) {
	t.Helper()
	k, err := Start(Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	x, y = &rawMember{group: "g"}, &rawMember{group: "g"}
	for _, m := range []*rawMember{x, y} {
		if m.cl, err = kgo.NewClient(kgo.SeedBrokers(k.Addrs()...)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.cl.Close)
	}
	x.joinNew(ctx, t)
	x.sync(ctx, t, 1, x.id)
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
		syncs.Go(func() { m.sync(ctx, t, 2, x.id, y.id) })
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
func (m *rawMember) sync(ctx context.Context, t *testing.T, gen int32, members ...string) {
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
		t.Errorf("sync %s in generation %d: %v", m.id, gen, err)
	}
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
