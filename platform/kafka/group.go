package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// LeaveStatic removes cl's static group membership (kgo.InstanceID) from its group. The
// client's own leave does not, so that a restart under the same id takes its partitions back
// without a rebalance: they wait for it until the session times out. A member stopping calls
// this once its last commit is done, so that the group hands its partitions on at once. A
// dynamic member, or a client in no group, is left alone.
func LeaveStatic(ctx context.Context, cl *kgo.Client) error {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	id, _ := cl.OptValue(kgo.InstanceID).(string)
	if group == "" || id == "" {
		return nil
	}
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(id))
	if err == nil {
		err = resp.Error()
	}
	// Unknown: the client's own leave already removed it (it had partitions revoked and had
	// not rejoined), or the group had timed it out.
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		return fmt.Errorf("leave group %s as static member %s: %w", group, id, err)
	}
	return nil
}
