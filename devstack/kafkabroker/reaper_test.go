package kafkabroker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

// groupMember drives one member of a classic consumer group with raw requests.
type groupMember struct {
	cl        *kgo.Client
	group     string
	instance  string
	id        string
	gen       int32
	rebalance int32 // the rebalance timeout its joins ask for, in ms; 0: 3000
}

func (m *groupMember) join(ctx context.Context) (*kmsg.JoinGroupResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.InstanceID, req.MemberID = m.group, &m.instance, m.id
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 1000, cmp.Or(m.rebalance, 3000)
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"t"}
	p.Metadata = meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, p)
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return nil, fmt.Errorf("join %s as %s: %w", m.group, m.instance, err)
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	return resp, nil
}

// lead joins and, as the leader, syncs an empty assignment for every member.
func (m *groupMember) lead(ctx context.Context) error {
	resp, err := m.join(ctx)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.InstanceID, req.MemberID, req.Generation = m.group, &m.instance, m.id, m.gen
	for _, jm := range resp.Members {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID = jm.MemberID
		req.GroupAssignment = append(req.GroupAssignment, a)
	}
	sresp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(sresp.ErrorCode)
	}
	return err
}

// heartbeat keeps m in its group until ctx ends, joining again (after a pause, so that the
// members joining meanwhile wait) whenever the group rebalances.
func (m *groupMember) heartbeat(ctx context.Context) {
	for pause(ctx, 200*time.Millisecond) {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.InstanceID, req.MemberID, req.Generation = m.group, &m.instance, m.id, m.gen
		resp, err := req.RequestWith(ctx, m.cl)
		if err == nil && resp.ErrorCode == 0 {
			continue
		}
		if err == nil && errors.Is(kerr.ErrorForCode(resp.ErrorCode), kerr.UnknownMemberID) {
			m.id = ""
		}
		if pause(ctx, 300*time.Millisecond) {
			_ = m.lead(ctx)
		}
	}
}

// pause waits d and reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// members returns the instance ids of group's members once it is stable.
func members(ctx context.Context, adm *kadm.Client, group string) ([]string, error) {
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	g := gs[group]
	if g.Err != nil || g.State != "Stable" {
		return nil, fmt.Errorf("group %s: state %q, %v", group, g.State, g.Err)
	}
	var ids []string
	for _, m := range g.Members {
		if m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	return ids, nil
}

// A member whose process dies while its first JoinGroup waits for the rebalance is kept by
// kfake for good when the join's answer cannot be delivered (kfake's group.reply starts the
// session timer only after a delivered answer) and the leader syncs before the pending-sync
// deadline: a real coordinator expires it after its session timeout. The broker removes such a
// member (reaper.go) within about twice its session timeout.
func TestMemberDeadInItsFirstJoinIsRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, _, dead := deadInFirstJoin(ctx, t, 3000)
	start := time.Now()
	for {
		ids, err := members(ctx, adm, "g")
		if err == nil && len(ids) == 1 && ids[0] == "leader" {
			t.Logf("%s removed %s after it was seen in the group", dead, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("group g: got members %v, %v 15 s after %s died; want only the leader", ids, err, dead)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A member that dies while its first JoinGroup waits comes into the generation (above), and a
// cooperative group's second round follows at once: kfake would wait for it until the round's
// rebalance timeout (20 s here), a Kafka coordinator until its session timeout (1 s). The broker
// removes it from the rebalancing group once its process has been gone for its session timeout.
func TestDeadMemberDoesNotHoldTheNextRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, client, dead := deadInFirstJoin(ctx, t, 20000)
	late := &groupMember{cl: client(), group: "g", instance: "late", rebalance: 20000}
	defer late.cl.Close()
	start := time.Now()
	if _, err := late.join(ctx); err != nil { // the next round: the leader rejoins, the dead member cannot
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the round after %s died took %v; want it to end about its 1 s session after the death, not at the 20 s rebalance timeout", dead, took.Round(100*time.Millisecond))
	} else {
		t.Logf("the round after %s died took %v", dead, took.Round(100*time.Millisecond))
	}
}

// deadInFirstJoin starts a broker and group "g" led by a heartbeating member (its joins asking
// for rebalance ms), then has members join and die before the group answers until one is left
// in the group (kfake delivers the answer to a closed connection or not at random, and only
// undelivered ones leave a member behind), and returns as soon as the group is stable with it:
// an admin client, a maker of clients of the broker, and the dead member's instance id.
func deadInFirstJoin(ctx context.Context, t *testing.T, rebalance int32) (*kadm.Client, func() *kgo.Client, string) {
	t.Helper()
	b, err := Start(Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	client := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	leader := &groupMember{cl: client(), group: "g", instance: "leader", rebalance: rebalance}
	t.Cleanup(leader.cl.Close)
	if err := leader.lead(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() { defer close(beating); leader.heartbeat(hctx) }()
	t.Cleanup(func() { stop(); <-beating })
	adm := kadm.NewClient(leader.cl)
	for round := range 12 {
		m := &groupMember{cl: client(), group: "g", instance: fmt.Sprintf("dies-%d", round)}
		go func() { _, _ = m.join(ctx) }()
		time.Sleep(100 * time.Millisecond)
		m.cl.Close()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ids, err := members(ctx, adm, "g")
			if err == nil && slices.Contains(ids, m.instance) {
				return adm, client, m.instance
			}
			if err == nil && len(ids) == 1 {
				break
			}
		}
	}
	t.Fatal("no member outlived its process in 12 rounds; want the kfake behaviour this guards against to show")
	return nil, nil, ""
}

// The reaper's goroutine and client end with the broker.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Requests the reaper sees may come from connections that never logged in (kfake's control
// functions run before its SASL check): whatever session timeout a join asks for, the reaper's
// bound stays within twice the broker's largest, and a member named by nothing is reaped on it.
func TestReaperBoundsForgedSessionTimeouts(t *testing.T) {
	r := &reaper{heard: map[memberKey]time.Time{}, session: map[string]time.Duration{}}
	tests := []struct {
		name    string
		session int32
		want    time.Duration
	}{
		{"a member's own", 3000, 3 * time.Second},
		{"a smaller one later", 1000, 3 * time.Second},
		{"forged, a day", 86_400_000, maxSessionTimeout},
		{"forged, the largest int32", 1<<31 - 1, maxSessionTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.SessionTimeoutMillis = "g", tt.session
			if _, _, handled := r.observe(req); handled {
				t.Fatalf("got the join handled; want kfake to handle it")
			}
			if got := r.session["g"]; got != tt.want {
				t.Errorf("got a session bound of %s; want %s", got, tt.want)
			}
		})
	}
	start := time.Now()
	if got := r.silence("g", "m", start); got != 0 {
		t.Fatalf("first seen: got %s silent; want 0", got)
	}
	if got := r.silence("g", "m", start.Add(2*maxSessionTimeout-time.Second)); got != 0 {
		t.Errorf("just within twice the largest session: got %s silent; want 0", got)
	}
	if got := r.silence("g", "m", start.Add(2*maxSessionTimeout+time.Second)); got == 0 {
		t.Errorf("past twice the largest session: got 0; want the member reaped")
	}
}
