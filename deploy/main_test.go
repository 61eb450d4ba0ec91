package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/tallypipeline/tally/devstack/chembed"
)

// engine is the embedded ClickHouse the SQL checks share: chDB allows one engine per process.
var engine *chembed.Server

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// adminPassword is the test engine's administrator password.
const adminPassword = "deploy-test-admin"

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tally-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	engine, err = chembed.Start(chembed.Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pipeline: chembed.User{Password: adminPassword}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded clickhouse:", err)
		return 1
	}
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := engine.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "stop embedded clickhouse:", err)
		return 1
	}
	return code
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
