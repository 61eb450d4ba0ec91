package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"tally/client"
)

// checkClient drives the real collector through the Go client: a view, a batch through the
// Batcher, a bad line, a like, then the counts, the series and the user's likes.
func checkClient(t *testing.T, api string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(client.Options{BaseURL: api})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := c.SendView(ctx, client.View{ItemID: "client-item", ViewerID: "cv0", TS: now}); err != nil {
		t.Fatalf("SendView: %v", err)
	}
	b := c.NewBatcher(client.BatcherOptions{MaxEvents: 7, MaxDelay: 50 * time.Millisecond})
	for i := 1; i <= 20; i++ {
		if err := b.Add(ctx, client.View{ItemID: "client-item", ViewerID: fmt.Sprintf("cv%d", i)}); err != nil {
			t.Fatalf("Batcher.Add: %v", err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Batcher.Close: %v", err)
	}
	if st := b.Stats(); st.Accepted != 20 || st.Batches != 3 || st.Failed != 0 {
		t.Errorf("batcher stats: got %+v; want 20 accepted in 3 bodies", st)
	}
	res, err := c.SendEvents(ctx, []client.Event{client.View{ItemID: "client-item", ViewerID: "cv21"}, client.View{ItemID: "bad/id", ViewerID: "v"}})
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Line != 2 || res.Rejected[0].Field != "item_id" {
		t.Errorf("SendEvents with a bad line: got %+v, %v; want 1 accepted, line 2 rejected for item_id", res, err)
	}
	_, err = c.SendEvents(ctx, []client.Event{client.View{ItemID: "", ViewerID: "v"}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("SendEvents with only bad lines: got %v; want a 400 APIError", err)
	}
	st, err := c.Like(ctx, "client-item", "cu1", "")
	if err != nil || !st.Liked || st.Likes != 1 {
		t.Errorf("Like: got %+v, %v; want liked, 1 like", st, err)
	}
	var got []client.Counts
	waitFor(t, 30*time.Second, "client-item counts through the client", func() bool {
		got, err = c.Counts(ctx, "client-item", "client-never")
		return err == nil && len(got) == 2 && got[0].Views == 22 && got[0].UniqueViewers == 22
	})
	want := []client.Counts{{ItemID: "client-item", Views: 22, UniqueViewers: 22, Likes: 1}, {ItemID: "client-never"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Counts: got %+v; want %+v", got, want)
	}
	s, err := c.Views(ctx, "client-item", client.SeriesQuery{From: now.Add(-time.Hour), Granularity: client.Hour})
	var sum int64
	for _, p := range s.Points {
		sum += p.Views
	}
	if err != nil || s.Granularity != client.Hour || sum != 22 {
		t.Errorf("Views: got %+v (sum %d), %v; want hourly points summing to 22", s, sum, err)
	}
	liked, err := c.Liked(ctx, "cu1", "client-item", "other")
	if err != nil || !liked["client-item"] || liked["other"] {
		t.Errorf("Liked: got %v, %v; want client-item only", liked, err)
	}
	if _, err := c.Counts(ctx); err == nil {
		t.Error("Counts with no ids: got nil error; want one")
	}
}
