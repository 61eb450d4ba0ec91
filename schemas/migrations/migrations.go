// Package migrations holds tally's ClickHouse DDL as numbered SQL files (NNN_name.sql), applied
// in order by package migrate. An applied file must never change: add a new one instead.
// Statements are idempotent (IF NOT EXISTS) so a crash in the middle of one re-runs safely.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
