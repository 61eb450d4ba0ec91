package views

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// While every ClickHouse write fails the aggregator's progress check says so, naming the step
// and the error; once the database is back (here re-created empty, its tables re-created by the
// schema check that failed writes run), the pending batch is written and the check passes.
func TestProgressCheckAndRepairWhileWritesFail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := "views_progress_test"
	conn := openMigrated(t, ctx, db)
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 1000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(a, ctx, []int32{2}); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx); err != nil {
		t.Fatalf("check before any failure: got %v; want nil", err)
	}
	if err := conn.Exec(ctx, "DROP DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	processAt(a, 2, []int64{0, 1}, [][]byte{view("prog", "a", time.Now().UnixMilli()), view("prog", "b", time.Now().UnixMilli())})
	flushed := make(chan error, 1)
	go func() {
		_, err := flushViews(a, ctx)
		flushed <- err
	}()
	testinfra.WaitFor(t, 20*time.Second, "progress check down", func() (bool, string) {
		err := a.Check(ctx)
		return err != nil && strings.Contains(err.Error(), "failed in a row") && strings.Contains(err.Error(), "write dedupe state"), errString(err)
	})
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("flush after the database came back: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("flush still retrying 60 s after the database came back")
	}
	if err := a.Check(ctx); err != nil {
		t.Errorf("check after recovery: got %v; want nil", err)
	}
	var total uint64
	if err := conn.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = 'prog'").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 2 {
		t.Errorf("got all-time total %d; want 2", total)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
