package likes

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process); tests use their own
// topic, group and database.
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

func openDB(t *testing.T, ctx context.Context, db string, migrated bool) driver.Conn {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if migrated {
		if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// produce writes likes to topic and returns the last state per (item, user) in log order.
func produce(t *testing.T, ctx context.Context, topic string, likes []schemas.Like) map[[2]string]bool {
	t.Helper()
	cl := infra.Producer(t, topic, 3)
	recs := make([]*kgo.Record, len(likes))
	want := map[[2]string]bool{}
	for i, l := range likes {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(l.ItemID), Value: schemas.AppendLike(nil, l)}
		want[[2]string{l.ItemID, l.UserID}] = l.Liked
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return want
}

func genLikes(n int) []schemas.Like {
	out := make([]schemas.Like, n)
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixMilli()
	for i := range out {
		out[i] = schemas.Like{ItemID: fmt.Sprintf("item-%d", i%7), UserID: fmt.Sprintf("user-%d", i%23), Liked: i%3 != 0, TS: ts + int64(i)}
	}
	return out
}

// tableState reads the last state of every pair (FINAL).
func tableState(ctx context.Context, conn driver.Conn) (map[[2]string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT item_id, user_id, liked FROM likes FINAL")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[[2]string]bool{}
	for rows.Next() {
		var item, user string
		var liked uint8
		if err := rows.Scan(&item, &user, &liked); err != nil {
			return nil, err
		}
		out[[2]string{item, user}] = liked == 1
	}
	return out, rows.Err()
}

func sameState(got, want map[[2]string]bool) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d pairs; want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			return fmt.Sprintf("pair %v: got liked=%v (present %v); want %v", k, g, ok, w)
		}
	}
	return ""
}

func startLoader(t *testing.T, conn driver.Conn, topic, group string, reg prometheus.Registerer) *Loader {
	t.Helper()
	l, err := New(Config{Log: likestate.Log{Brokers: []string{infra.Kafka.Addr()}, Topic: topic, Group: group}, FlushInterval: 100 * time.Millisecond, MaxBatch: 50},
		conn, time.Now, infra.Logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	l.Start()
	return l
}

func stopLoader(t *testing.T, l *Loader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// The table's FINAL view is the last state per pair in log order, and loading the whole log
// again (a new group replays from the start) changes no answer.
func TestLoaderKeepsLastStatePerPairAcrossReplays(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := openDB(t, ctx, "loader_replay", true)
	likes := genLikes(400)
	want := produce(t, ctx, "likes-replay", likes)

	tests := []struct{ name, group string }{
		{"first load", "loader-a"},
		{"replay by a new group", "loader-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := startLoader(t, conn, "likes-replay", tt.group, prometheus.NewRegistry())
			defer stopLoader(t, l)
			// Every record is inserted (merges may already have folded older rows)...
			testinfra.WaitFor(t, 20*time.Second, "every record inserted", func() (bool, string) {
				n := testutil.ToFloat64(l.rows)
				return n == float64(len(likes)), fmt.Sprintf("%v rows inserted", n)
			})
			// ...and the FINAL view is the log's last state per pair.
			got, err := tableState(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameState(got, want); d != "" {
				t.Fatal(d)
			}
		})
	}
	var total int64
	if err := conn.QueryRow(ctx, "SELECT sum(likes) FROM like_totals").Scan(&total); err != nil {
		t.Fatal(err)
	}
	var wantTotal int64
	for _, liked := range want {
		if liked {
			wantTotal++
		}
	}
	if total != wantTotal {
		t.Errorf("like_totals: got %d; want %d", total, wantTotal)
	}
}

// ClickHouse refusing the insert (here: the table does not exist yet) makes the loader retry,
// not skip, and commit nothing: a loader of the same group started after the table exists
// loads every record.
func TestLoaderCommitsOnlyAfterInsert(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := openDB(t, ctx, "loader_retry", false)
	want := produce(t, ctx, "likes-retry", genLikes(120))
	l := startLoader(t, conn, "likes-retry", "loader-retry", prometheus.NewRegistry())
	testinfra.WaitFor(t, 20*time.Second, "insert errors retried", func() (bool, string) {
		n := testutil.ToFloat64(l.insertErrors)
		return n >= 2, fmt.Sprintf("%v insert errors", n)
	})
	stopLoader(t, l)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	l = startLoader(t, conn, "likes-retry", "loader-retry", prometheus.NewRegistry())
	defer stopLoader(t, l)
	testinfra.WaitFor(t, 20*time.Second, "rows loaded after the table appeared", func() (bool, string) {
		got, err := tableState(ctx, conn)
		if err != nil {
			return false, err.Error()
		}
		d := sameState(got, want)
		return d == "", d
	})
}

// Records that do not decode or validate are set aside in dead_letters, named by topic,
// partition and offset, and the good records around them are loaded.
func TestLoaderSetsAsideBadRecords(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := openDB(t, ctx, "loader_poison", true)
	topic := "likes-poison"
	cl := infra.Producer(t, topic, 1)
	values := [][]byte{
		schemas.AppendLike(nil, schemas.Like{ItemID: "p", UserID: "u1", Liked: true}),
		[]byte("junk"),
		schemas.AppendLike(nil, schemas.Like{ItemID: "p", UserID: "", Liked: true}),
		schemas.AppendLike(nil, schemas.Like{ItemID: "p", UserID: "u/2", Liked: true}),
		schemas.AppendLike(nil, schemas.Like{ItemID: "p", UserID: "u3", Liked: true}),
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("p"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	l := startLoader(t, conn, topic, "loader-poison", reg)
	defer stopLoader(t, l)
	setAside := fmt.Sprintf(`
		# HELP tally_dead_letters_total Records or rows set aside in the dead_letters table, by source (a replay writes its batch's again).
		# TYPE tally_dead_letters_total counter
		tally_dead_letters_total{source=%q} 3
	`, topic)
	testinfra.WaitFor(t, 20*time.Second, "every record handled", func() (bool, string) {
		n := testutil.ToFloat64(l.rows)
		err := testutil.GatherAndCompare(reg, strings.NewReader(setAside), "tally_dead_letters_total")
		return n == 2 && err == nil, fmt.Sprintf("%v inserted; dead letters: %v", n, err)
	})
	got, err := tableState(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[[2]string]bool{{"p", "u1"}: true, {"p", "u3"}: true}; sameState(got, want) != "" {
		t.Errorf("likes table: %s", sameState(got, want))
	}
	rows, err := conn.Query(ctx, "SELECT offset, reason FROM dead_letters FINAL WHERE source = ? AND partition = 0 ORDER BY offset", topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var dead []string
	for rows.Next() {
		var off int64
		var reason string
		if err := rows.Scan(&off, &reason); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, fmt.Sprintf("%d %s", off, reason))
	}
	want := []string{"1 decode like: not a tally record", "2 decode like: user_id: is required", "3 decode like: user_id: has character '/' at byte 1; allowed: letters, digits and _ . : @ -"}
	if fmt.Sprint(dead) != fmt.Sprint(want) {
		t.Errorf("got dead letters %q; want %q", dead, want)
	}
}
