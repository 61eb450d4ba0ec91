package chembed

import (
	"net/http"
	"strings"
)

// The guard keeps outside clients inside the engine. chDB runs with the
// rights of this process, so anything that names a file, a URL, another
// server or a program would reach them: table functions (file, url, s3,
// remote, mysql, executable, input...), table and database engines (File,
// URL, Filesystem, Kafka...), dictionary sources, dynamic disks, the
// scalar file(), INTO OUTFILE / FROM INFILE, INSERT INTO FUNCTION and
// settings that name files. The engine's own access control cannot do it
// here: chDB has no users, and readonly=1 stops neither file() as a scalar
// nor writes of every kind for the pipeline, which must create tables.
//
// Lists are built from the engine's system tables, so whatever a newer
// chDB adds is refused until it is added to the allowlists below.

// safeTableFunctions read only what the query names inside the engine.
var safeTableFunctions = []string{
	"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateSeries",
	"values", "null", "generateRandom", "merge", "view", "viewIfPermitted", "viewExplain",
	"format", "dictionary", "mergeTreeIndex", "mergeTreeParts", "mergeTreeProjection",
}

// safeEngines keep their data under the data directory, in memory, or
// read other tables of the engine.
var safeEngines = []string{
	"MergeTree", "ReplacingMergeTree", "SummingMergeTree", "AggregatingMergeTree",
	"CollapsingMergeTree", "VersionedCollapsingMergeTree", "GraphiteMergeTree", "CoalescingMergeTree",
	"Memory", "Null", "Set", "Join", "Buffer", "Log", "TinyLog", "StripeLog", "Merge",
	"GenerateRandom", "Dictionary", "View", "MaterializedView",
	"Atomic", "Ordinary", "Lazy",
}

// extraRefusedCalls are ways out that are not table functions or engines:
// the scalar file(), dictionary sources and dynamic disks.
var extraRefusedCalls = []string{
	"file", "disk", "http", "https", "clickhouse", "cassandra", "executable_pool",
	"yamlregexptree", "regexp_tree", "catboostEvaluate",
}

// refusedKinds are statements no outside client runs: SYSTEM reaches
// the process (caches, reloads, failpoints), BACKUP, RESTORE and ATTACH
// ... FROM 'path' read or write files.
const refusedKinds = " SYSTEM BACKUP RESTORE ATTACH "

// definingKinds are the statements where ENGINE names an engine rather
// than, say, the column of system.tables.
const definingKinds = " CREATE REPLACE ALTER "

// fileSettings name files the engine would read or write.
var fileSettings = []string{"format_schema", "format_template_resultset", "format_template_row", "output_format_schema", "format_schema_source"}

type guard struct {
	refusedCalls map[string]bool // lower-case names refused before '('
	engines      map[string]bool // lower-case engine names allowed after ENGINE
	allEngines   map[string]bool // lower-case names of every engine the engine has
}

// newGuard refuses every table function and engine of the engine's lists
// that is not in the allowlists.
func newGuard(functions, engines []string) *guard {
	g := &guard{refusedCalls: map[string]bool{}, engines: map[string]bool{}}
	safeFn := lowerSet(safeTableFunctions)
	for _, f := range functions {
		if !safeFn[strings.ToLower(f)] {
			g.refusedCalls[strings.ToLower(f)] = true
		}
	}
	g.engines = lowerSet(safeEngines)
	g.allEngines = lowerSet(engines)
	for _, e := range engines {
		if !g.engines[strings.ToLower(e)] {
			g.refusedCalls[strings.ToLower(e)] = true
		}
	}
	for _, f := range extraRefusedCalls {
		g.refusedCalls[strings.ToLower(f)] = true
	}
	return g
}

func lowerSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[strings.ToLower(n)] = true
	}
	return m
}

func accessDenied(format string, args ...any) *chError {
	return newError(http.StatusForbidden, codeAccessDenied, format, args...)
}

// check refuses SQL that reaches outside the engine. sql is the statement
// up to the data of an INSERT; values, if not nil, is that data when the
// engine will parse it as the Values format, which evaluates expressions.
func (g *guard) check(sql string, st statement) *chError {
	return g.checkReading(sql, st, nil)
}

// checkReading is check that also lets file('path'...) through when the
// path is a plain literal under one of readDirs (the pipeline user reading
// the sink's Parquet files).
func (g *guard) checkReading(sql string, st statement, readDirs []string) *chError {
	if strings.Contains(refusedKinds, " "+st.kind+" ") {
		return accessDenied("%s is not allowed through the embedded server's HTTP interface", st.kind)
	}
	return g.scanReading(sql, strings.Contains(definingKinds, " "+st.kind+" "), readDirs)
}

// scan walks every token; it needs no grammar because what it refuses is
// refused wherever it appears. engines says whether ENGINE clauses can
// occur, to check the engine they name.
func (g *guard) scan(src string, engines bool) *chError {
	return g.scanReading(src, engines, nil)
}

// readableFile reports whether the call starting after "file(" names, as
// its first argument, a plain string literal (no escapes) holding an
// absolute path under one of dirs with no ".." anywhere (globs stay inside
// the directory: ClickHouse's *, ?, ** and {a,b} never climb without "..").
func readableFile(l *lexer, dirs []string) bool {
	if len(dirs) == 0 {
		return false
	}
	probe := *l
	probe.next() // (
	lit := probe.next()
	if lit.kind != tokString {
		return false
	}
	text := l.text(lit)
	if len(text) < 2 || text[0] != '\'' || text[len(text)-1] != '\'' {
		return false
	}
	p := text[1 : len(text)-1]
	if strings.ContainsAny(p, "\\'") || strings.Contains(p, "..") || !strings.HasPrefix(p, "/") {
		return false
	}
	if after := probe.next(); !l.isPunct(after, ',') && !l.isPunct(after, ')') {
		return false
	}
	for _, d := range dirs {
		if d != "" && strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

func (g *guard) scanReading(src string, engines bool, readDirs []string) *chError {
	l := &lexer{src: src}
	var prev token
	for t := l.next(); t.kind != tokEOF; prev, t = t, l.next() {
		if t.kind != tokWord && t.kind != tokQuoted {
			continue
		}
		name := strings.ToLower(unquoteIdent(l.text(t)))
		interesting := g.refusedCalls[name] || name == "infile" || name == "outfile" || name == "function" || name == "engine" || isFileSetting(name)
		if !interesting {
			continue
		}
		probe := *l
		next := probe.next()
		switch {
		case l.isPunct(next, '(') && name == "file" && t.kind == tokWord && readableFile(l, readDirs):
			continue
		case l.isPunct(next, '(') && g.refusedCalls[name]:
			return accessDenied("%s(...) is not allowed through the embedded server's HTTP interface: it reaches files, the network or programs outside the engine", unquoteIdent(l.text(t)))
		case t.kind == tokWord && (name == "infile" || name == "outfile"):
			return accessDenied("%s is not allowed through the embedded server's HTTP interface", strings.ToUpper(name))
		case t.kind == tokWord && name == "function" && (l.isWord(prev, "INTO") || l.isWord(prev, "TABLE")):
			return accessDenied("INSERT INTO FUNCTION is not allowed through the embedded server's HTTP interface")
		case engines && t.kind == tokWord && name == "engine":
			e, named := next, false
			if l.isPunct(e, '=') {
				e, named = probe.next(), true
			}
			if e.kind == tokWord || e.kind == tokQuoted {
				en := unquoteIdent(l.text(e))
				if (named || g.allEngines[strings.ToLower(en)]) && !g.engines[strings.ToLower(en)] {
					return accessDenied("ENGINE %s is not allowed through the embedded server's HTTP interface; use a MergeTree engine, Memory, Null, Buffer, Merge or a Log engine", en)
				}
			}
		case isFileSetting(name):
			return accessDenied("setting %s is not allowed through the embedded server's HTTP interface: it names a file", name)
		}
	}
	return nil
}

func isFileSetting(name string) bool {
	for _, s := range fileSettings {
		if strings.HasPrefix(name, s) {
			return true
		}
	}
	return false
}
