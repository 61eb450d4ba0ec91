package migrate

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Target is where the migrations run. The zero value is one server: the migrations' own
// statements, as the embedded engine runs them. With Cluster set (a cluster of the servers'
// remote_servers), every statement is rewritten for that cluster by ForCluster: DDL runs ON
// CLUSTER, MergeTree engines become their Replicated variants, and each replicated table gets a
// Distributed table <name>_dist for reads. The rewrite is derived from the same files, so the two
// shapes cannot drift apart.
type Target struct {
	Cluster string
}

// clusterComment marks schema_migrations of a database migrated ON CLUSTER, so that a later
// start (Apply, Repair) finds the shape the database was made with and refuses the other one.
const clusterComment = "tally migrations on cluster "

// ReplicaPath is where a replicated table keeps its replication state in Keeper: one path per
// shard, database and table; {shard} and {replica} are each server's macros.
const ReplicaPath = "/clickhouse/tables/{shard}/{database}/{table}"

var (
	onClusterCreateRe = regexp.MustCompile(`(?is)^(CREATE\s+(?:MATERIALIZED\s+VIEW|VIEW|TABLE)\s+IF\s+NOT\s+EXISTS\s+[A-Za-z_][A-Za-z0-9_]*)\b`)
	onClusterDropRe   = regexp.MustCompile(`(?is)^(DROP\s+(VIEW|TABLE)\s+IF\s+EXISTS\s+[A-Za-z_][A-Za-z0-9_]*)\b`)
	onClusterAlterRe  = regexp.MustCompile(`(?is)^(ALTER\s+TABLE\s+[A-Za-z_][A-Za-z0-9_]*)\s+(.*)$`)
	renameFullRe      = regexp.MustCompile(`(?is)^RENAME\s+TABLE\s+(IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)\s+TO\s+([A-Za-z_][A-Za-z0-9_]*)\s*$`)
	createTableRe     = regexp.MustCompile(`(?is)^CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+([A-Za-z_][A-Za-z0-9_]*)\b`)
	// engineRe matches a MergeTree-family engine and its own arguments (none of tally's contain
	// parentheses).
	engineRe      = regexp.MustCompile(`(?is)ENGINE\s*=\s*(Replacing|Summing|Aggregating|Collapsing|VersionedCollapsing)?MergeTree\b(\s*\(([^()]*)\))?`)
	columnAlterRe = regexp.MustCompile(`(?is)^(ADD|MODIFY|DROP)\s+COLUMN\b`)
)

// ForCluster returns ms rewritten for cluster: the same versions, names and checksums (a
// migration is the same migration in both shapes), with these statements:
//   - CREATE, DROP, ALTER and RENAME run ON CLUSTER, so every server gets them;
//   - a MergeTree-family engine becomes its Replicated variant at ReplicaPath, replica
//     {replica}; the engine's own arguments (a version column) follow the two paths;
//   - each such table gets <name>_dist, a Distributed table over the cluster for reads; it
//     follows its table's column ALTERs, and is dropped with it or before a rename;
//   - INSERT ... SELECT and other data statements stay as they are: they run on the server
//     the migration runs on, and replication carries their rows to the other replicas.
//
// Materialized views stay per server, so an insert into a Null input table on any replica
// fills that replica's replicated rollups, which replicate like any other insert.
func ForCluster(ms []Migration, cluster string) ([]Migration, error) {
	if !identifierRe.MatchString(cluster) {
		return nil, fmt.Errorf("cluster name %q: want letters, digits and underscores", cluster)
	}
	dist := map[string]bool{} // tables that have a _dist table by now
	out := make([]Migration, len(ms))
	for i, m := range ms {
		var stmts []string
		for _, s := range m.Statements {
			rewritten, err := clusterStatement(s, cluster, dist)
			if err != nil {
				return nil, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
			stmts = append(stmts, rewritten...)
		}
		out[i] = m
		out[i].Statements = stmts
	}
	return out, nil
}

var identifierRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// clusterStatement rewrites one statement (see ForCluster); dist tracks which tables have a
// Distributed table.
func clusterStatement(s, cluster string, dist map[string]bool) ([]string, error) {
	on := " ON CLUSTER " + cluster
	distOf := func(table string) string {
		return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s_dist%s AS %s ENGINE = Distributed(%s, currentDatabase(), %s)", table, on, table, cluster, table)
	}
	dropDist := func(table string) string {
		return fmt.Sprintf("DROP TABLE IF EXISTS %s_dist%s", table, on)
	}
	switch {
	case onClusterCreateRe.MatchString(s):
		out := onClusterCreateRe.ReplaceAllString(s, "${1}"+on)
		g := createTableRe.FindStringSubmatch(s)
		if g == nil || !engineRe.MatchString(s) {
			return []string{out}, nil // a view, or a Null or Memory table: one per server
		}
		out = engineRe.ReplaceAllStringFunc(out, func(e string) string {
			sub := engineRe.FindStringSubmatch(e)
			args := []string{"'" + ReplicaPath + "'", "'{replica}'"}
			if a := strings.TrimSpace(sub[3]); a != "" {
				args = append(args, a)
			}
			return fmt.Sprintf("ENGINE = Replicated%sMergeTree(%s)", sub[1], strings.Join(args, ", "))
		})
		dist[g[1]] = true
		return []string{out, distOf(g[1])}, nil
	case onClusterDropRe.MatchString(s):
		g := onClusterDropRe.FindStringSubmatch(s)
		name := strings.Fields(g[1])[len(strings.Fields(g[1]))-1]
		out := []string{}
		if dist[name] {
			out = append(out, dropDist(name))
			delete(dist, name)
		}
		return append(out, onClusterDropRe.ReplaceAllString(s, "${1}"+on)), nil
	case onClusterAlterRe.MatchString(s):
		g := onClusterAlterRe.FindStringSubmatch(s)
		out := []string{g[1] + on + " " + g[2]}
		name := strings.Fields(g[1])[2]
		if dist[name] && columnAlterRe.MatchString(g[2]) {
			out = append(out, "ALTER TABLE "+name+"_dist"+on+" "+g[2])
		}
		return out, nil
	case renameFullRe.MatchString(s):
		g := renameFullRe.FindStringSubmatch(s)
		var out []string
		if dist[g[2]] {
			out = append(out, dropDist(g[2]))
			delete(dist, g[2])
		}
		return append(out, strings.TrimSpace(s)+on), nil
	case renameRe.MatchString(s):
		return nil, fmt.Errorf("statement %.60q: only RENAME TABLE a TO b of one table can run on a cluster", s)
	default:
		return []string{s}, nil
	}
}

// migrationsTable is the statement creating schema_migrations for t.
func (t Target) migrationsTable() string {
	if t.Cluster == "" {
		return `CREATE TABLE IF NOT EXISTS schema_migrations
		(version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
		ENGINE = ReplacingMergeTree ORDER BY version`
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS schema_migrations ON CLUSTER %s
		(version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
		ENGINE = ReplicatedReplacingMergeTree('%s', '{replica}') ORDER BY version
		COMMENT '%s%s'`, t.Cluster, ReplicaPath, clusterComment, t.Cluster)
}

// migrations returns the migrations as t runs them.
func (t Target) migrations() ([]Migration, error) {
	ms, err := Load()
	if err != nil || t.Cluster == "" {
		return ms, err
	}
	return ForCluster(ms, t.Cluster)
}

// recordedTarget returns the shape the database was migrated in, from the comment on its
// schema_migrations (none: one server); ok is false when nothing was migrated yet.
func recordedTarget(ctx context.Context, conn driver.Conn) (t Target, ok bool, err error) {
	rows, err := conn.Query(ctx, "SELECT comment FROM system.tables WHERE database = currentDatabase() AND name = 'schema_migrations'")
	if err != nil {
		return Target{}, false, fmt.Errorf("read schema_migrations' shape: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return Target{}, false, fmt.Errorf("read schema_migrations' shape: %w", err)
		}
		ok = true
		t.Cluster, _ = strings.CutPrefix(c, clusterComment)
		if t.Cluster == c {
			t.Cluster = ""
		}
	}
	if err := rows.Err(); err != nil {
		return Target{}, false, fmt.Errorf("read schema_migrations' shape: %w", err)
	}
	return t, ok, nil
}

// describe names t for messages.
func (t Target) describe() string {
	if t.Cluster == "" {
		return "one server (clickhouse.cluster empty)"
	}
	return "cluster " + t.Cluster + " (clickhouse.cluster)"
}
