package kafka

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupTimeouts are a consumer-group member's timeouts: session (how long the group waits for a
// silent member), heartbeats five times per session, and the rebalance timeout, how long a
// rebalance waits for the members to rejoin: twice the session, at least 10 s. A member
// revoking partitions finishes its batch (a flush: seconds) before it rejoins. franz-go's
// default rebalance timeout (60 s) held an aggregator group in PreparingRebalance for over a
// minute after a member died in the cluster test, every partition of the group uncounted
// meanwhile; with this one the dead member's partitions were counted again 4-15 s after it
// died (session 3 s).
func GroupTimeouts(session time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.SessionTimeout(session),
		kgo.HeartbeatInterval(session / 5),
		kgo.RebalanceTimeout(max(2*session, 10*time.Second)),
	}
}

// LeaveStatic removes cl's static group membership (kgo.InstanceID) from its group. The
// client's own leave does not, so that a restart under the same id takes its partitions back
// without a rebalance: they wait for it until the session times out. A member stopping calls
// this once its last commit is done, so that the group hands its partitions on at once. A
// dynamic member, or a client in no group, is left alone. Leaving is best effort: a failure
// only delays the handover to the session timeout, so it is logged, not returned.
func LeaveStatic(ctx context.Context, cl *kgo.Client, logger *slog.Logger) {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	id, _ := cl.OptValue(kgo.InstanceID).(string)
	if group == "" || id == "" {
		return
	}
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(id))
	if err == nil {
		err = resp.Error()
	}
	// Unknown: the client's own leave already removed it (it had partitions revoked and had
	// not rejoined), or the group had timed it out.
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		logger.Warn("leave the group as a static member; its partitions move after the session timeout",
			"group", group, "instance_id", id, "err", err)
	}
}
