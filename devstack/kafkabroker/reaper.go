package kafkabroker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reaper removes the members of classic consumer groups that kfake keeps although nothing has
// been heard from them for twice their session timeout. kfake starts a member's session timer
// only once an answer to it is delivered (group.reply), so a member whose process dies while
// its first JoinGroup waits, and whose answer finds the connection closed, has none; when the
// leader syncs before the pending-sync deadline it stays in the group for good, holding its
// share of the partitions, which nobody consumes. A real coordinator expires it after its
// session timeout. The reaper sees the group requests (a kfake control function that handles
// nothing), describes the groups every sweep interval through a client of its own, and sends a
// LeaveGroup naming the silent member, as an operator would. Twice the timeout leaves kfake's
// own expiry, which covers every other case, to act first.
//
// kfake runs control functions before its SASL check, so the reaper also sees requests of
// connections that never logged in; they are refused after. Such a request can only make the
// reaper wait longer: naming a member keeps it heard, and a join's session timeout raises its
// group's bound, to at most twice the broker's largest session timeout. Nothing it sends makes
// the reaper remove a member that is heard from.
//
// Such a member also holds every later round of its group until the round's rebalance timeout
// (kfake runs no session timer for it); a cooperative group's second round follows the first at
// once. So in a rebalancing group the reaper removes a member whose process is gone (connSet)
// once it has been gone for its session timeout, as a Kafka coordinator's session timer would.
//
// The reaper also keeps alive the members kfake would drop while they wait in JoinGroup
// (keepalive.go).
type reaper struct {
	mu      sync.Mutex
	heard   map[memberKey]time.Time  // the last request naming the member, or when first described
	session map[string]time.Duration // the longest session timeout a join of the group asked for
	gen     map[memberKey]int32      // the generation each member last synced or heartbeat in
	joining map[memberKey]joinWait   // the members waiting in JoinGroup kept alive
	beating map[memberKey]int        // the reaper's own heartbeats for a member, in flight
	kept    map[memberKey]bool       // members kept alive, not heard from since
	hosts   map[memberKey]string     // each member's client address, as last described
	conns   *connSet                 // the client addresses connected
	// groupInfo is kfake's view of a group (nil if it has none); called without mu held.
	groupInfo func(group string) *kfake.GroupInfo
	logger    *slog.Logger
}

type memberKey struct{ group, member string }

const (
	sweepEvery = time.Second
	// defaultSession stands for the session timeout of a group no join was seen of since the
	// broker started (a group restored from the data directory).
	defaultSession = 45 * time.Second
)

func newReaper(c *kfake.Cluster, conns *connSet, logger *slog.Logger) *reaper {
	r := &reaper{heard: map[memberKey]time.Time{}, session: map[string]time.Duration{}, gen: map[memberKey]int32{},
		joining: map[memberKey]joinWait{}, beating: map[memberKey]int{}, kept: map[memberKey]bool{},
		hosts: map[memberKey]string{}, conns: conns, groupInfo: c.GroupInfo, logger: logger}
	for _, k := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup} {
		c.ControlKey(int16(k), r.observe)
	}
	return r
}

// observe notes the member a group request names; it handles nothing, so kfake goes on.
func (r *reaper) observe(req kmsg.Request) (kmsg.Response, error, bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch q := req.(type) {
	case *kmsg.JoinGroupRequest:
		session := min(time.Duration(q.SessionTimeoutMillis)*time.Millisecond, maxSessionTimeout)
		r.session[q.Group] = max(r.session[q.Group], session)
		if q.MemberID != "" {
			r.heard[memberKey{q.Group, q.MemberID}] = now
			r.noteJoin(memberKey{q.Group, q.MemberID}, q, now)
		}
	case *kmsg.SyncGroupRequest:
		r.heard[memberKey{q.Group, q.MemberID}] = now
		delete(r.kept, memberKey{q.Group, q.MemberID})
		r.noteSync(memberKey{q.Group, q.MemberID}, q, now)
	case *kmsg.HeartbeatRequest:
		k := memberKey{q.Group, q.MemberID}
		if r.beating[k] == 0 { // not the reaper's own, for a member waiting in JoinGroup
			r.heard[k] = now
			delete(r.kept, k)
		}
		r.gen[k] = q.Generation
	case *kmsg.LeaveGroupRequest:
		delete(r.joining, memberKey{q.Group, q.MemberID}) // version 0-2
		for _, m := range q.Members {
			delete(r.joining, memberKey{q.Group, m.MemberID})
		}
	}
	return nil, nil, false
}

// run sweeps every sweepEvery and heartbeats for the members waiting in JoinGroup every
// keepEvery, until ctx ends.
func (r *reaper) run(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	sweep, keep := time.NewTicker(sweepEvery), time.NewTicker(keepEvery)
	defer sweep.Stop()
	defer keep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			r.sweep(ctx, adm, cl)
		case now := <-keep.C:
			r.keepAlive(ctx, cl, now)
		}
	}
}

// sweep removes every member of a stable group silent for twice the group's session timeout,
// and every member of a rebalancing group whose process is gone, silent for its session timeout
// and not waiting in JoinGroup: kfake would wait for it until the rebalance timeout, while a
// Kafka coordinator's session timer, which runs through the join phase, removes it. Such a member
// is one that died while its first JoinGroup waited: it came into the generation without a
// session timer, and a cooperative group's second round follows at once.
func (r *reaper) sweep(ctx context.Context, adm *kadm.Client, cl *kgo.Client) {
	groups, err := adm.DescribeGroups(ctx)
	if err != nil {
		return // the next sweep tries again
	}
	now := time.Now()
	r.learnHosts(groups)
	for _, g := range groups {
		if g.Err != nil || (g.State != "Stable" && g.State != "PreparingRebalance") {
			continue
		}
		for _, m := range g.Members {
			if g.State != "Stable" && !r.goneIdle(g.Group, m.MemberID) {
				continue
			}
			if silent := r.silence(g.Group, m.MemberID, now); silent > 0 {
				r.remove(ctx, cl, g.Group, m, silent)
			}
		}
	}
	r.forget(groups)
}

// goneIdle says whether member's process is gone and it is not waiting in JoinGroup or
// SyncGroup as the reaper knows it.
func (r *reaper) goneIdle(group, member string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := memberKey{group, member}
	_, waiting := r.joining[k]
	return !waiting && r.gone(k)
}

// gone says whether member k's process is gone: no connection is open from the client address
// kfake describes it with, and that address's last one closed after the last request naming the
// member. kfake describes a member by the connection of its first JoinGroup, which its client
// closes when idle (franz-go: after 30 s) and replaces: a member heard from since is alive on
// other connections. Called with r.mu held.
func (r *reaper) gone(k memberKey) bool {
	host, described := r.hosts[k]
	if !described {
		return false
	}
	at, closed := r.conns.closedAt(host)
	return closed && !at.Before(r.heard[k])
}

// sessionOf is the session timeout the silence of group's members is measured against.
// Called with r.mu held.
func (r *reaper) sessionOf(group string) time.Duration {
	if s := r.session[group]; s > 0 {
		return s
	}
	return defaultSession
}

// silence is how long member has been silent past twice its group's session timeout, or once
// for a member kept alive while it waited in JoinGroup and not heard from since, or whose
// process is gone (a member killed while its JoinGroup waited comes into the next generation
// without a session timer), or 0.
func (r *reaper) silence(group, member string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := memberKey{group, member}
	host, described := r.hosts[k]
	last, ok := r.heard[k]
	if !ok { // a member never heard (its only join named no member id): silent since its process went, or from now
		last = now
		if described {
			if at, gone := r.conns.closedAt(host); gone {
				last = at
			}
		}
		r.heard[k] = last
	}
	limit := r.sessionOf(group)
	if r.kept[k] || r.gone(k) { // kfake may have no timer left for it
		limit /= 2
	}
	if d := now.Sub(last); d > 2*limit {
		return d
	}
	return 0
}

// remove sends the LeaveGroup for member that its process never sent. It names the member id
// alone: by its instance id it could remove a live member that took the id over since. A
// failed attempt is tried again after another twice the session timeout, not every sweep.
func (r *reaper) remove(ctx context.Context, cl *kgo.Client, group string, m kadm.DescribedGroupMember, silent time.Duration) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = m.MemberID
	req.Members = append(req.Members, lm)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) == 1 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	if err != nil {
		r.mu.Lock()
		r.heard[memberKey{group, m.MemberID}] = time.Now()
		r.mu.Unlock()
		r.logger.Warn("embedded kafka: could not remove a group member silent past its session timeout",
			"group", group, "member", m.MemberID, "silent", silent.Round(time.Second), "err", err)
		return
	}
	instance := ""
	if m.InstanceID != nil {
		instance = *m.InstanceID
	}
	r.logger.Warn("embedded kafka: removed a group member silent past its session timeout",
		"group", group, "member", m.MemberID, "instance", instance, "client", m.ClientID, "silent", silent.Round(time.Second))
}

// forget drops what it heard of members no longer in described groups.
func (r *reaper) forget(groups kadm.DescribedGroups) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := func(k memberKey) bool {
		g, ok := groups[k.group]
		return !ok || !slices.ContainsFunc(g.Members, func(m kadm.DescribedGroupMember) bool { return m.MemberID == k.member })
	}
	for k := range r.heard {
		if gone(k) {
			delete(r.heard, k)
		}
	}
	for k := range r.gen {
		if _, waiting := r.joining[k]; !waiting && gone(k) {
			delete(r.gen, k)
			delete(r.kept, k)
			delete(r.hosts, k)
		}
	}
}

// learnHosts records the client address kfake describes each member with: the connection its
// first JoinGroup came on.
func (r *reaper) learnHosts(groups kadm.DescribedGroups) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range groups {
		for _, m := range g.Members {
			r.hosts[memberKey{g.Group, m.MemberID}] = m.ClientHost
		}
	}
}
