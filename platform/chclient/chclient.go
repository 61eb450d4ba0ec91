// Package chclient opens tally's connection to ClickHouse: clickhouse-go/v2 over the HTTP
// interface, the same way for the embedded engine and for a real server, with each batch
// INSERT's column types learned once (columns.go). The returned conn is safe for concurrent use
// and owned by the caller, who must Close it.
package chclient

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/retry"
	"github.com/tallypipeline/tally/platform/tlsconf"
)

// Options says where ClickHouse is, which database tally uses, and how to authenticate and
// protect the link (TLS turns the HTTP interface into HTTPS; ClickHouse's default HTTPS port is
// 8443).
type Options struct {
	Addr     string
	Database string
	Username string
	Password string
	TLS      tlsconf.Files
	// Cluster, when set, is the cluster (remote_servers) the database is created on, ON
	// CLUSTER; the connection itself still talks to Addr only.
	Cluster string
	// Quorum makes every statement of the connection wait for, and read, what a majority of
	// the replicas hold (QuorumSettings), so that a process may move to another replica at any
	// time (docs/EXACTLY_ONCE.md, "Replicas").
	Quorum bool
}

// QuorumSettings are a replicated database's connection settings under Options.Quorum: an
// INSERT returns once a majority of the replicas have its part (insert_quorum auto), quorum
// inserts into a table are ordered (insert_quorum_parallel 0, which select_sequential_consistency
// needs), and a SELECT on a replica that misses a part written with quorum fails rather than
// answer from an older state (select_sequential_consistency 1). Tables that are not replicated
// ignore them.
func QuorumSettings() clickhouse.Settings {
	return clickhouse.Settings{"insert_quorum": "auto", "insert_quorum_parallel": 0, "select_sequential_consistency": 1}
}

// Open connects to opts.Addr, creates opts.Database if missing, and returns a connection whose
// default database is opts.Database. It retries until ctx ends, so a component may start before
// its ClickHouse.
func Open(ctx context.Context, opts Options) (driver.Conn, error) {
	boot, err := dial(ctx, opts, "default")
	if err != nil {
		return nil, err
	}
	create := "CREATE DATABASE IF NOT EXISTS " + opts.Database
	if opts.Cluster != "" {
		create += " ON CLUSTER " + opts.Cluster
	}
	err = boot.Exec(ctx, create)
	boot.Close()
	if err != nil {
		return nil, fmt.Errorf("create database %s on %s: %w", opts.Database, opts.Addr, err)
	}
	return dial(ctx, opts, opts.Database)
}

func dial(ctx context.Context, opts Options, database string) (driver.Conn, error) {
	tc, err := opts.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s TLS: %w", opts.Addr, err)
	}
	settings := clickhouse.Settings{}
	if opts.Quorum {
		settings = QuorumSettings()
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		TLS:          tc,
		Protocol:     clickhouse.HTTP,
		Addr:         []string{opts.Addr},
		Auth:         clickhouse.Auth{Database: database, Username: opts.Username, Password: opts.Password},
		DialTimeout:  5 * time.Second,
		ReadTimeout:  60 * time.Second,
		Settings:     settings,
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
	return &columnsConn{Conn: conn, known: map[string][]clickhouse.ColumnNameAndType{}}, nil
}

// MaxListItems bounds the strings one query inlines as an IN list; callers with more split them
// over several queries, so that a query's text and the engine's work stay bounded.
const MaxListItems = 10000

// FitList returns ctx with ClickHouse's max_query_size (256 KiB by default) raised where needed
// to fit a query that inlines list copies times: clickhouse-go binds parameters into the query
// text, so a list of many or long ids can outgrow the default and fail to parse.
func FitList(ctx context.Context, list []string, copies int) context.Context {
	size := 4096
	for _, s := range list {
		size += copies * (len(s) + 4) // quotes, comma, space
	}
	if size <= 256<<10 {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_query_size": size}))
}
