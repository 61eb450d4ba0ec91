package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A member that stops with LeaveStatic is out of its group at once, static or not; a static one
// that only closes stays a member (its partitions wait for it) until its session times out.
func TestLeaveStatic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	members := func(group string) int {
		described, err := kadm.NewClient(admin).DescribeGroups(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		return len(described[group].Members)
	}
	tests := []struct {
		name       string
		instanceID string
		leave      bool
		want       int // members right after the stop
	}{
		{"static, LeaveStatic", "member-a", true, 0},
		{"static, closed only", "member-b", false, 1},
		{"dynamic, LeaveStatic", "", true, 0},
	}
	defer func() { // a leave that fails is logged, and the member stays until its session ends
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g-fail"), kgo.ConsumeTopics("t"), kgo.InstanceID("member-c"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		done, cancelDone := context.WithCancel(ctx)
		cancelDone()
		var logged bytes.Buffer
		LeaveStatic(done, cl, slog.New(slog.NewTextHandler(&logged, nil)))
		if !strings.Contains(logged.String(), "instance_id=member-c") {
			t.Errorf("a failed leave logged %q; want a warning naming the member", logged.String())
		}
	}()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group := fmt.Sprintf("g%d", i)
			opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("t"),
				kgo.SessionTimeout(30 * time.Second)}
			if tt.instanceID != "" {
				opts = append(opts, kgo.InstanceID(tt.instanceID))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			for members(group) == 0 {
				pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				cl.PollFetches(pctx)
				pcancel()
			}
			var logged bytes.Buffer
			if tt.leave {
				LeaveStatic(ctx, cl, slog.New(slog.NewTextHandler(&logged, nil)))
			}
			cl.Close()
			if got := members(group); got != tt.want {
				t.Errorf("members after the stop: got %d; want %d", got, tt.want)
			}
			if logged.Len() > 0 {
				t.Errorf("got a warning %q; want none", logged.String())
			}
		})
	}
}
