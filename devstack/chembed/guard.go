package chembed

import (
	"fmt"
	"net/http"
	"strings"
)

// The guard keeps outside (dashboards) queries inside the engine. Most of
// the work is the engine's own: outside queries run under readonly=1, which
// refuses writes, DDL, setting changes and table functions, and under
// limits the caller cannot raise (auth.go). What readonly=1 leaves open is
// a scalar function that reads files (file()) and INTO OUTFILE, which
// writes one; chDB has no users or grants to close them.
//
// So the guard asks the engine's own parser what a statement is, rather
// than reading SQL with a second lexer that would read quoting, escapes and
// Unicode spaces differently: formatQuery() proves the text is exactly one
// statement and gives it back in the engine's canonical form, EXPLAIN AST
// gives its tree. The canonical text is what then runs, so what was checked
// is what executes. The pipeline user is the engine's administrator and is
// not guarded: its password is readable only by the data directory's owner,
// who can read every file anyway.

// safeTableFunctions read only what the query names inside the engine.
var safeTableFunctions = []string{
	"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateSeries",
	"values", "null", "generateRandom", "merge", "view", "viewIfPermitted", "viewExplain",
	"format", "dictionary", "mergeTreeIndex", "mergeTreeParts", "mergeTreeProjection",
}

// refusedScalars reach outside the engine without being table functions.
var refusedScalars = []string{"file"}

// readRoots are the EXPLAIN AST root nodes of statements an outside user
// may run: queries and the statements that describe the schema. Anything
// else (SET, USE, INSERT, DDL, SYSTEM...) is refused before it runs.
var readRoots = []string{"SelectWithUnionQuery", "SelectIntersectExceptQuery", "Show", "Describe", "Exists", "Explain"}

type guard struct {
	refused map[string]bool // lower-case function names an outside query may not call
}

// newGuard refuses every table function of the engine's list that is not
// known to stay inside the engine, so a chDB upgrade that adds a new way
// out is refused by default.
func newGuard(tableFunctions []string) *guard {
	g := &guard{refused: map[string]bool{}}
	safe := map[string]bool{}
	for _, f := range safeTableFunctions {
		safe[strings.ToLower(f)] = true
	}
	for _, f := range append(tableFunctions, refusedScalars...) {
		if !safe[strings.ToLower(f)] {
			g.refused[strings.ToLower(f)] = true
		}
	}
	return g
}

func accessDenied(format string, args ...any) *chError {
	return newError(http.StatusForbidden, codeAccessDenied, format, args...)
}

// vet returns the canonical text of sql, or why an outside user may not
// run it. It needs the engine held, with the request's query parameters
// set (EXPLAIN AST substitutes them) and none of its output settings or
// limits yet: a result limit must not cut the tree short.
func (e *engine) vet(sql string) (string, error) {
	out, err := e.query("SELECT formatQuery(" + quoteString(sql) + ")")
	if err != nil {
		return "", err
	}
	canonical := strings.TrimSuffix(out, "\n")
	if e := refuseOutfile(canonical); e != nil {
		return "", e
	}
	tree, err := e.query("EXPLAIN AST " + canonical)
	if err != nil {
		return "", err
	}
	if e := e.guard.inspect(tree); e != nil {
		return "", e
	}
	return canonical, nil
}

// query runs sql and returns its output as raw text.
func (e *engine) query(sql string) (string, error) {
	res, err := e.session.Query(sql, "TabSeparatedRaw")
	if err != nil {
		e.drain()
		return "", engineError(err)
	}
	defer res.Free()
	return string(res.Buf()), nil
}

// refuseOutfile refuses INTO OUTFILE, which the formatter writes at the
// start of a line in upper case (a string literal's line breaks are
// escaped in canonical text, so no literal can fake it).
func refuseOutfile(canonical string) *chError {
	for line := range strings.SplitSeq(canonical, "\n") {
		if strings.HasPrefix(line, "INTO OUTFILE") {
			return accessDenied("INTO OUTFILE is not allowed for this user: it writes a file on the server")
		}
	}
	return nil
}

// inspect reads an EXPLAIN AST dump: one node a line, indented, the node's
// kind first ("Function file (children 1)"). Literals and aliases print
// escaped, so only a real call starts a line with "Function".
func (g *guard) inspect(tree string) *chError {
	lines := strings.Split(strings.TrimSpace(tree), "\n")
	root := strings.TrimSpace(lines[0])
	if !hasAnyPrefix(root, readRoots) {
		kind, _, _ := strings.Cut(root, " ")
		return newError(http.StatusForbidden, codeReadonly, "%s: Cannot execute query in readonly mode (only SELECT, SHOW, DESCRIBE, EXISTS and EXPLAIN)", kind)
	}
	for _, line := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "Function ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " (")
		if g.refused[strings.ToLower(strings.TrimSpace(name))] {
			return accessDenied("%s(...) is not allowed for this user: it reaches files, the network or programs outside the engine", name)
		}
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// loadGuard asks the engine for every table function it has.
func (e *engine) loadGuard() (*guard, error) {
	out, err := e.query("SELECT name FROM system.table_functions")
	if err != nil {
		return nil, fmt.Errorf("list table functions: %w", err)
	}
	names := strings.Fields(out)
	if len(names) == 0 {
		return nil, fmt.Errorf("list table functions: got none")
	}
	return newGuard(names), nil
}
