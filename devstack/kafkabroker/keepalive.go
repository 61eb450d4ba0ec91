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
// A member whose process is gone (no connection open from the client address kfake describes
// it with, connSet) is not kept: kfake's session timer removes it. One that dies while kept ends
// up in the next generation, where kfake starts no session timer for it (its answer found the
// connection closed); so the reaper's own heartbeats do not count as hearing from it, and a
// member kept and not heard from since is removed after one session timeout of silence, not
// two (reaper.go).

// joinWait is a member waiting in JoinGroup that the reaper keeps alive.
type joinWait struct {
	instance *string
	gen      int32
	every    time.Duration // between heartbeats
	next     time.Time     // the next heartbeat
	until    time.Time     // the member's rebalance timeout after its JoinGroup
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
	rebalance := time.Duration(q.RebalanceTimeoutMillis) * time.Millisecond
	if rebalance <= 0 {
		rebalance = session
	}
	every := max(session/3, keepEvery)
	r.joining[k] = joinWait{instance: q.InstanceID, gen: gen, every: every, next: now.Add(every), until: now.Add(min(rebalance, maxSessionTimeout))}
}

// noteSync records the generation member k synced in and ends its keeping: its join was
// answered. Called with r.mu held.
func (r *reaper) noteSync(k memberKey, gen int32) {
	r.gen[k] = gen
	delete(r.joining, k)
}

// keepAlive sends the heartbeats due for members waiting in JoinGroup.
func (r *reaper) keepAlive(ctx context.Context, cl *kgo.Client, now time.Time) {
	r.mu.Lock()
	var due []memberKey
	var waits []joinWait
	for k, w := range r.joining {
		host, described := r.hosts[k]
		switch {
		case now.After(w.until), described && !r.conns.has(host): // waited its rebalance timeout, or its process is gone
			r.endKeeping(k, now)
		case !now.Before(w.next):
			w.next = now.Add(w.every)
			r.joining[k] = w
			due, waits = append(due, k), append(waits, w)
		}
	}
	r.mu.Unlock()
	for i, k := range due {
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
