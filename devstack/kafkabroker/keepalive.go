package kafkabroker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Members waiting in JoinGroup: kfake does not restart a member's session timer when its
// JoinGroup arrives, and a client sends no heartbeat while it waits, so a member that rejoined
// at once and waits longer than its session timeout for the slowest one (a member finishing
// its batch before it gives partitions up takes seconds) is removed by its session timer, its
// JoinGroup never answered: the client gives up on its own timeout (the rebalance timeout plus
// 10 s), drops its partitions and joins again. A Kafka coordinator keeps a member that has sent
// JoinGroup until the join phase ends, for at most its rebalance timeout. So while a known
// member's JoinGroup waits, the reaper heartbeats for it, at a third of its session timeout,
// with the generation the member last named, until its rebalance timeout has passed or the
// member is heard again (it syncs, joins again or leaves). A heartbeat of a generation that has
// ended (the join phase completed) is refused and ends the keeping.
//
// Members waiting in SyncGroup, for a leader that may be gone: kfake removing such a member on
// its session timer drops its SyncGroup unanswered and counts its pending request as a join
// (group.removeMember), so the next round cannot complete when every member has joined: it ends
// only at its rebalance timeout, which each join restarts, and the members' JoinGroups time out
// in turn (a handover of over a minute, the e2e handover test's failure). A Kafka coordinator
// answers them when the leader's session expires. So the reaper keeps a member waiting in
// SyncGroup alive while its group completes that generation's rebalance (kfake.GroupInfo): a
// dead leader is removed on its own timer, and the waiting members are told to join again.
//
// A member whose process is gone (gone) is not kept: kfake's session timer removes it. One that
// dies while kept ends up in the next generation, where kfake starts no session timer for it
// (its answer found the connection closed); so the reaper's own heartbeats do not count as
// hearing from it, and a member kept and not heard from since is removed after one session
// timeout of silence, not two (reaper.go).

// joinWait is a member waiting in JoinGroup, or in SyncGroup (sync), that the reaper keeps alive.
type joinWait struct {
	instance  *string
	gen       int32
	sync      bool
	every     time.Duration // between heartbeats
	next      time.Time     // the next heartbeat
	until     time.Time     // the member's rebalance timeout after its request
	rebalance time.Duration // the member's rebalance timeout, bounded by maxSessionTimeout
}

// keepEvery is how often the reaper looks for heartbeats due; kfake's shortest session timeout
// (GroupMinSessionTimeout, 1 s) gets three.
const keepEvery = 100 * time.Millisecond

// noteJoin starts keeping member k alive, when it is known (it named a generation before).
// Called with r.mu held.
func (r *reaper) noteJoin(k memberKey, q *kmsg.JoinGroupRequest, now time.Time) {
	gen, ok := r.gen[k]
	if !ok || q.MemberID == "" {
		return
	}
	session := time.Duration(q.SessionTimeoutMillis) * time.Millisecond
	rebalance := min(time.Duration(q.RebalanceTimeoutMillis)*time.Millisecond, maxSessionTimeout)
	if rebalance <= 0 {
		rebalance = min(session, maxSessionTimeout)
	}
	every := max(session/3, keepEvery)
	r.joining[k] = joinWait{instance: q.InstanceID, gen: gen, every: every, next: now.Add(every), until: now.Add(rebalance), rebalance: rebalance}
}

// noteSync records the generation member k syncs in, and keeps it alive while its SyncGroup
// waits, at the pace and for at most the rebalance timeout of its JoinGroup's keeping (a member
// not kept in JoinGroup: at a third of its group's session timeout). Called with r.mu held.
func (r *reaper) noteSync(k memberKey, q *kmsg.SyncGroupRequest, now time.Time) {
	r.gen[k] = q.Generation
	w, ok := r.joining[k]
	if !ok {
		every := max(r.sessionOf(k.group)/3, keepEvery)
		w = joinWait{instance: q.InstanceID, every: every, rebalance: maxSessionTimeout}
	}
	w.gen, w.sync = q.Generation, true
	w.next, w.until = now.Add(w.every), now.Add(w.rebalance)
	r.joining[k] = w
}

// keepAlive sends the heartbeats due for members waiting in JoinGroup or SyncGroup.
func (r *reaper) keepAlive(ctx context.Context, cl *kgo.Client, now time.Time) {
	due, waits := r.dueBeats(now)
	for i, k := range due {
		if waits[i].sync && !r.completing(k.group, waits[i].gen) {
			r.mu.Lock()
			r.endKeeping(k, now) // answered: the leader synced, or the round started over
			r.mu.Unlock()
			continue
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation, req.InstanceID = k.group, k.member, waits[i].gen, waits[i].instance
		r.mu.Lock()
		r.beating[k]++ // observe tells it from the member's own
		r.kept[k] = true
		r.mu.Unlock()
		resp, err := req.RequestWith(ctx, cl)
		r.mu.Lock()
		if r.beating[k]--; r.beating[k] == 0 {
			delete(r.beating, k)
		}
		r.mu.Unlock()
		if err != nil {
			continue // the next beat tries again
		}
		if code := resp.ErrorCode; code != 0 && code != kerr.RebalanceInProgress.Code {
			r.mu.Lock()
			r.endKeeping(k, time.Now()) // answered, removed or fenced since: nothing left to keep
			r.mu.Unlock()
		}
	}
}

// dueBeats ends the keeping of the members whose wait is over or whose process is gone, and
// returns those whose heartbeat is due, with their waits.
func (r *reaper) dueBeats(now time.Time) ([]memberKey, []joinWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []memberKey
	var waits []joinWait
	for k, w := range r.joining {
		switch {
		case now.After(w.until), r.gone(k): // waited its rebalance timeout, or its process is gone
			r.endKeeping(k, now)
		case !now.Before(w.next):
			w.next = now.Add(w.every)
			r.joining[k] = w
			due, waits = append(due, k), append(waits, w)
		}
	}
	return due, waits
}

// completing says whether group is completing the rebalance of generation gen: its members
// wait in SyncGroup for the leader's.
func (r *reaper) completing(group string, gen int32) bool {
	g := r.groupInfo(group)
	return g != nil && g.State == "CompletingRebalance" && g.Epoch == gen
}

// endKeeping stops keeping member k alive. A kept member's silence counts from here, as a Kafka
// coordinator's session timer for it starts when the join phase ends. Called with r.mu held.
func (r *reaper) endKeeping(k memberKey, now time.Time) {
	if _, ok := r.joining[k]; !ok {
		return
	}
	delete(r.joining, k)
	if r.kept[k] {
		r.heard[k] = now
	}
}
