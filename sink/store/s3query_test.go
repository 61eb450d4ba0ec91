package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chdb-io/chdb-go/chdb"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/storetest"
)

// TestS3QueryOfTheDocs runs the s3() query deploy/README.md gives for the sink's files in a
// bucket ("Reading the sink's files", "the same from S3") on the chDB engine itself, in this
// process: the embedded server's guard refuses s3() to every user over HTTP, so the query can
// only be checked here. The files are the sink's own (rawlog.WriteFlush) in the in-test S3
// server, under a prefix, with a second day that the query must not count.
func TestS3QueryOfTheDocs(t *testing.T) {
	s3 := storetest.StartS3(t, "tally-bucket")
	st := s3.Open(t, "tally/")
	views, _ := rawlog.TopicByName(schemas.TopicViews)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	want := map[string]int{}
	for p := range int32(3) {
		var values [][]byte
		for i := range 500 {
			ts := day.Add(-2 * time.Hour).Add(time.Duration(i) * 30 * time.Second) // two hours of the day before, then the day
			item := fmt.Sprintf("item-%d", i%5)
			values = append(values, schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: fmt.Sprint(i), EventID: fmt.Sprintf("p%d-%d", p, i), TS: ts.UnixMilli()}))
			if !ts.Before(day) {
				want[item]++
			}
		}
		if err := rawlog.WriteFlush(st, views, p, 0, values); err != nil {
			t.Fatal(err)
		}
	}

	sess, err := chdb.NewSession(t.TempDir())
	if err != nil {
		t.Fatalf("open chDB: %v", err)
	}
	defer sess.Close()
	// The docs' query, with the test server's endpoint (plain HTTP) and keys.
	query := fmt.Sprintf(`SELECT item_id, count() FROM s3('http://%s/tally-bucket/tally/views/2026-12-01/*/*.parquet',
      'test', 'test', 'Parquet') GROUP BY item_id ORDER BY item_id`, s3.Endpoint)
	res, err := sess.Query(query, "TabSeparated")
	if err != nil {
		t.Fatalf("s3() query: %v", err)
	}
	got := strings.TrimSpace(string(res.Buf()))
	res.Free()
	var lines []string
	for i := range 5 {
		item := fmt.Sprintf("item-%d", i)
		lines = append(lines, fmt.Sprintf("%s\t%d", item, want[item]))
	}
	if w := strings.Join(lines, "\n"); got != w {
		t.Fatalf("s3() query: got\n%s\nwant\n%s", got, w)
	}
}
