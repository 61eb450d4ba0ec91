package counters

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/engineproc"
)

// TestClickHouseKilledWhileWriting kill -9s the ClickHouse the command writes its report to
// (the embedded engine of `pipeline infra`, a process of its own) at a random moment of the
// write, then starts it again on its data. After each kill: the report view shows the last
// complete version, never a part of the interrupted one; the command has failed saying which
// write it lost (or ended well, if the kill came after its last statement); a rerun writes a
// newer complete version and says so. It fails if the version row is written before the rows,
// or a lost statement goes unreported.
func TestClickHouseKilledWhileWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eng := engineproc.Start(t)
	f := &fixture{db: "tally", conn: eng.Open(t, ctx)}
	if _, err := migrate.Apply(ctx, f.conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	f.clickhouse = eng.Flags
	f.ns = f.namespace(t, ctx, "chkill", "eventual")
	day := base.AddDate(0, 0, 4) // a day of its own: the other tests' records are not read
	f.seed(t, ctx, day, killCounters)
	args := []string{"--namespace", f.ns, "--batchjob.lock_ttl", "3s"}
	_, writeTook := f.timeRun(t, ctx, day, args)
	seen := f.complete(t, ctx, day, "after the first run")

	for i := range 2 {
		delay := time.Duration(rand.Int64N(int64(writeTook)))
		t.Run(fmt.Sprintf("kill %d", i), func(t *testing.T) {
			eng.KillDuring(t, exec.CommandContext(ctx, bin, f.argv(day, args...)...), writing, delay, "counter report")
			eng.Start(t)
			f.conn = eng.Open(t, ctx)
			t.Logf("engine killed %v into the write (a write took %v): %d rows beyond version %d", delay, writeTook, f.beyond(t, ctx, day, seen), seen)
			if v := f.complete(t, ctx, day, "after the engine's restart"); v < seen {
				t.Fatalf("after the engine's restart: got version %d; want %d or newer", v, seen)
			}
			seen = f.rerun(t, ctx, day, args, seen)
		})
	}
}
