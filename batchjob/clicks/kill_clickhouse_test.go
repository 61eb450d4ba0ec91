package clicks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/engineproc"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestClickHouseKilledWhileWriting kill -9s the ClickHouse the job writes its report to (the
// embedded engine of `pipeline infra`, a process of its own) at a random moment between the
// job's last read and its end, twice, starting the engine again on its data each time. After
// each kill: billing sees the last complete version or none, never a part of the lost one; the
// run has failed naming the write it lost (or ended well, if the kill came after its last
// statement); a rerun writes a newer version that matches the oracle.
func TestClickHouseKilledWhileWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eng := engineproc.Start(t)
	// Day 35: between the days of the files before and after this one, as the tests' days
	// increase in file order (the Kafka source finds a day's stretch of the log by record time).
	f := newFixtureOn(t, ctx, eng.Open(t, ctx), 35, eng.Flags...)
	// Many ads, so that the write takes a while.
	produce(t, ctx, genDay(f.day, 100_000, 80_000, 5))
	want := oracle(t, ctx, f.day)
	args := append(f.args("clicks", "--date", f.day.Format(time.DateOnly)), "--batchjob.lock_ttl", "3s")
	const writing = "verdicts read" // the last line before the report is written

	// A whole run first: how long its write takes.
	cmd := exec.CommandContext(ctx, bin, args...)
	output := testinfra.StartUntil(t, cmd, writing)
	wrote := time.Now()
	out := output()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	writeTook := time.Since(wrote)
	seen := f.complete(t, want, "after the first run")

	for i := range 2 {
		delay := time.Duration(rand.Int64N(int64(writeTook)))
		t.Run(fmt.Sprintf("kill %d", i), func(t *testing.T) {
			eng.KillDuring(t, exec.CommandContext(ctx, bin, args...), writing, delay, "report")
			eng.Start(t)
			f.conn = eng.Open(t, ctx)
			f.serveReports(t)
			var partial uint64
			if err := f.conn.QueryRow(ctx, "SELECT count() FROM click_reports_daily WHERE date = ? AND version > ?", f.day, seen).Scan(&partial); err != nil {
				t.Fatal(err)
			}
			t.Logf("engine killed %v into the write (a write took %v): %d rows beyond version %d", delay, writeTook, partial, seen)
			if v := f.complete(t, want, "after the engine's restart"); v < seen {
				t.Fatalf("after the engine's restart: got version %d; want %d or newer", v, seen)
			}
			if code, _, stderr := command(t, ctx, args...); code != 0 {
				t.Fatalf("rerun: got exit %d; want 0:\n%s", code, stderr)
			}
			v := f.complete(t, want, "after the rerun")
			if v <= seen {
				t.Fatalf("after the rerun: got version %d; want newer than %d", v, seen)
			}
			seen = v
		})
	}
}

// complete checks that billing's latest version of f's day is complete, its rows the oracle's,
// and returns it.
func (f *fixture) complete(t *testing.T, want []Row, when string) uint32 {
	t.Helper()
	d, rows, code := f.report(t, 0)
	if code != http.StatusOK {
		t.Fatalf("%s: got status %d for the day's report; want 200", when, code)
	}
	if diff := diffRows(rows, want); diff != "" || d.Totals.Ads != uint64(len(want)) {
		t.Fatalf("%s: version %d (%d ads) against the oracle (%d ads): %s", when, d.Version, d.Totals.Ads, len(want), diff)
	}
	return d.Version
}
