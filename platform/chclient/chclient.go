// Package chclient opens tally's connection to ClickHouse: clickhouse-go/v2 over the HTTP
// interface, the same way for the embedded engine and for a real server. The returned conn is
// safe for concurrent use and owned by the caller, who must Close it.
package chclient

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"tally/platform/retry"
)

// Options says where ClickHouse is and which database tally uses.
type Options struct {
	Addr     string
	Database string
	Username string
	Password string
}

// Open connects to opts.Addr, creates opts.Database if missing, and returns a connection whose
// default database is opts.Database. It retries until ctx ends, so a component may start before
// its ClickHouse.
func Open(ctx context.Context, opts Options) (driver.Conn, error) {
	boot, err := dial(ctx, opts, "default")
	if err != nil {
		return nil, err
	}
	err = boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+opts.Database)
	boot.Close()
	if err != nil {
		return nil, fmt.Errorf("create database %s on %s: %w", opts.Database, opts.Addr, err)
	}
	return dial(ctx, opts, opts.Database)
}

func dial(ctx context.Context, opts Options, database string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:     clickhouse.HTTP,
		Addr:         []string{opts.Addr},
		Auth:         clickhouse.Auth{Database: database, Username: opts.Username, Password: opts.Password},
		DialTimeout:  5 * time.Second,
		ReadTimeout:  60 * time.Second,
		Settings:     clickhouse.Settings{},
		MaxOpenConns: 16,
		MaxIdleConns: 8,
	})
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %s: %w", opts.Addr, err)
	}
	if err := retry.Do(ctx, time.Second, func() error { return conn.Ping(ctx) }, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to clickhouse %s: %w", opts.Addr, err)
	}
	return conn, nil
}
