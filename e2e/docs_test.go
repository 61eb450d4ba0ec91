package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/openapi"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// docFiles are the documents a user follows.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range append(paths, "../README.md", "../deploy/README.md", "../CONTRIBUTING.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(p, "../")] = string(b)
	}
	return out
}

// notCommands are backticked phrases that start with a binary's name but name something else:
// readiness checks of /readyz.
var notCommands = map[string]bool{"aggregator progress": true, "aggregator clickhouse": true, "collector kafka": true}

// Every command the documents name in backticks (`aggregator resume`, `collector keys new`,
// `pipeline infra`) is one the built binary knows: its --help answers 0. Every `go build` path
// they give is a command's folder, and every curl that sends a key sends it in the header the
// collector reads.
func TestDocumentedCommandsExist(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	bin := map[string]string{"pipeline": bins.pipeline, "collector": bins.collector, "aggregator": bins.aggregator, "batchjob": bins.batchjob}
	phraseRe := regexp.MustCompile("`((pipeline|collector|aggregator|batchjob)( [a-z][a-z-]*)+)")
	buildRe := regexp.MustCompile(`go build[^` + "`" + `\n]*?\./([a-z/]+/cmd/[a-z]+)`)
	keyRe := regexp.MustCompile(`-H ["']([A-Za-z-]+): \$[A-Z_]*KEY`)
	checked := map[string]bool{}
	for doc, text := range docFiles(t) {
		for _, m := range phraseRe.FindAllStringSubmatch(text, -1) {
			phrase := m[1]
			if notCommands[phrase] || checked[phrase] {
				continue
			}
			checked[phrase] = true
			words := strings.Fields(phrase)
			if out, err := exec.Command(bin[words[0]], append(words[1:], "--help")...).CombinedOutput(); err != nil {
				t.Errorf("%s names `%s`; `%s --help` answers %v:\n%.300s", doc, phrase, phrase, err, out)
			}
		}
		for _, m := range buildRe.FindAllStringSubmatch(text, -1) {
			if st, err := os.Stat(filepath.Join("..", m[1])); err != nil || !st.IsDir() {
				t.Errorf("%s builds ./%s, which is not a folder of the tree", doc, m[1])
			}
		}
		for _, m := range keyRe.FindAllStringSubmatch(text, -1) {
			if m[1] != auth.KeyHeader {
				t.Errorf("%s sends an API key as %s; the collector reads %s", doc, m[1], auth.KeyHeader)
			}
		}
	}
	if len(checked) < 5 {
		t.Errorf("got %d documented commands; want the documents' commands found (the pattern is broken)", len(checked))
	}
}

// Every relative link of the documents resolves, and so does every repository path they give in
// backticks (`aggregator/views/flush.go`, `docs/API.md`, `scripts/bench-ab`) and every
// document they name (`SECURITY.md`, "DESIGN.md's"): a newcomer following them finds what they
// name.
func TestDocumentedPathsExist(t *testing.T) {
	linkRe := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	pathRe := regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?)`")
	docRe := regexp.MustCompile(`\b([A-Z][A-Z_]+\.md)\b`)
	symbolRe := regexp.MustCompile(`^[a-z0-9_]+\.[A-Z]\w*$`)
	top, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	topLevel := map[string]bool{}
	for _, e := range top {
		topLevel[e.Name()] = true
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	n := 0
	for doc, text := range docFiles(t) {
		dir := filepath.Dir(filepath.Join("..", doc))
		for _, m := range linkRe.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			if !exists(filepath.Join(dir, target)) {
				t.Errorf("%s links %s, which does not exist", doc, m[1])
			}
		}
		for _, m := range pathRe.FindAllStringSubmatch(text, -1) {
			p := m[1]
			if i := strings.LastIndex(p, "/"); symbolRe.MatchString(p[i+1:]) {
				p = p[:i+1] + strings.SplitN(p[i+1:], ".", 2)[0] // a package's symbol: the package
			}
			if !topLevel[strings.SplitN(p, "/", 2)[0]] {
				continue // a path inside a package, a URL path, a topic: not the tree's
			}
			n++
			if !exists(filepath.Join("..", p)) {
				t.Errorf("%s names `%s`, which is not in the tree", doc, p)
			}
		}
		for _, m := range docRe.FindAllStringSubmatch(text, -1) {
			n++
			if !exists(filepath.Join("..", "docs", m[1])) && !exists(filepath.Join("..", m[1])) && !exists(filepath.Join(dir, m[1])) {
				t.Errorf("%s names %s, which is neither in docs/ nor at the root", doc, m[1])
			}
		}
	}
	if n < 50 {
		t.Errorf("got %d links and paths checked; want the documents' (the patterns are broken)", n)
	}
}

// shellLines returns the lines of text's fenced blocks that hold shell commands: blocks opened
// with sh, bash, shell, console or no language at all.
func shellLines(text string) []string {
	var out []string
	in, shell := false, false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence, ok := strings.CutPrefix(trimmed, "```"); ok {
			if in = !in; in {
				shell = slices.Contains([]string{"", "sh", "bash", "shell", "console"}, strings.TrimSpace(fence))
			}
			continue
		}
		if in && shell {
			out = append(out, line)
		}
	}
	return out
}

// Every command line in the documents' shell blocks runs something that exists: a script of the
// tree, a `go run|build|test` of a folder of the tree (a benchmark it names is declared there),
// or a binary whose subcommand answers --help and knows every flag the line gives it.
func TestFencedCommandsExist(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	load, err := testinfra.Build(binDir, module+"/loadgen/cmd/load")
	if err != nil {
		t.Fatal(err)
	}
	c := commands{bin: map[string]string{"pipeline": bins.pipeline, "collector": bins.collector, "aggregator": bins.aggregator,
		"batchjob": bins.batchjob, "load": load}, help: map[string]helpAnswer{}}
	n := 0
	for doc, text := range docFiles(t) {
		for _, line := range shellLines(text) {
			for _, cmd := range shellCommands(line) {
				n++
				if msg := c.check(cmd); msg != "" {
					t.Errorf("%s: `%s`: %s", doc, strings.Join(cmd, " "), msg)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("got %d fenced commands checked; want the documents' (the pattern is broken)", n)
	}
}

// The patterns of the fenced-command checks.
var (
	shellSep   = regexp.MustCompile(`&&|;|\|`)
	envAssign  = regexp.MustCompile(`^[A-Z_]+=`)
	subcommand = regexp.MustCompile(`^[a-z][a-z-]*$`)
	benchName  = regexp.MustCompile(`^Benchmark\w+$`)
)

// shellCommands splits one line of a shell block into its commands' words: the prompt, comments,
// environment assignments, parentheses and quotes are dropped; && ; | split commands. A `cd dir`
// makes the line's later `./` paths relative to dir.
func shellCommands(line string) [][]string {
	line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	var out [][]string
	dir := ""
	for _, part := range shellSep.Split(line, -1) {
		words := strings.Fields(strings.NewReplacer(`'`, "", `"`, "", "(", "", ")", "").Replace(part))
		for len(words) > 0 && envAssign.MatchString(words[0]) {
			words = words[1:]
		}
		switch {
		case len(words) == 2 && words[0] == "cd":
			dir = strings.TrimSuffix(strings.TrimPrefix(words[1], "./"), "/") + "/"
		case len(words) > 0 && !strings.HasPrefix(words[0], "#"):
			for i, w := range words {
				if strings.HasPrefix(w, "./") && dir != "" {
					words[i] = "./" + dir + w[2:]
				}
			}
			out = append(out, words)
		}
	}
	return out
}

// commands checks documented commands against the built binaries (bin, by command name), asking
// each binary's subcommand for its --help once (help, by binary and subcommand).
type commands struct {
	bin  map[string]string
	help map[string]helpAnswer
}

type helpAnswer struct {
	out []byte
	err error
}

// check says what is wrong with one documented command, or "" when it is one the tree has.
// Commands of other programs (curl, docker, kubectl, …) are not the tree's and pass.
func (c commands) check(words []string) string {
	name := strings.TrimPrefix(words[0], "./")
	switch {
	case strings.HasPrefix(name, "scripts/"):
		if st, err := os.Stat(filepath.Join("..", name)); err != nil || st.Mode()&0o111 == 0 {
			return "no executable " + name
		}
		if name == "scripts/bench-ab" && len(words) > 2 {
			return c.flags(c.bin["load"], nil, words[2:])
		}
	case name == "go" && len(words) > 1 && (words[1] == "run" || words[1] == "build" || words[1] == "test"):
		return c.goCommand(words)
	case c.bin[name] != "":
		var sub []string
		for _, w := range words[1:] {
			if strings.HasPrefix(w, "-") || !subcommand.MatchString(w) {
				break
			}
			sub = append(sub, w)
		}
		return c.flags(c.bin[name], sub, words[1+len(sub):])
	}
	return ""
}

// goCommand checks a go run|build|test line: its folders exist, a benchmark it names is declared
// in them, and `go run ./loadgen/cmd/load` is given only flags the load command knows.
func (c commands) goCommand(words []string) string {
	var dirs []string
	bench := ""
	for i, w := range words[2:] {
		switch {
		case w == "-bench" && i+3 < len(words):
			bench = strings.Trim(words[i+3], "^$")
		case strings.HasPrefix(w, "./"):
			dir := strings.TrimSuffix(strings.TrimSuffix(w, "..."), "/")
			if st, err := os.Stat(filepath.Join("..", dir)); err != nil || !st.IsDir() {
				return dir + " is not a folder of the tree"
			}
			if words[1] == "run" && dir == "./loadgen/cmd/load" {
				return c.flags(c.bin["load"], nil, words[3+i:])
			}
			dirs = append(dirs, dir)
		}
	}
	if !benchName.MatchString(bench) {
		return ""
	}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join("..", dir, "*_test.go"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && regexp.MustCompile(`func (\(\w+ \*?\w+\) )?`+bench+`\(`).Match(b) {
				return ""
			}
		}
	}
	return fmt.Sprintf("no func %s in %v", bench, dirs)
}

// flags checks that `bin sub... --help` answers 0 and lists every --flag of args.
func (c commands) flags(bin string, sub, args []string) string {
	key := strings.Join(append([]string{bin}, sub...), " ")
	h, ok := c.help[key]
	if !ok {
		h.out, h.err = exec.Command(bin, append(sub, "--help")...).CombinedOutput()
		c.help[key] = h
	}
	out, err := h.out, h.err
	if err != nil {
		return fmt.Sprintf("`%s --help` answers %v: %.300s", strings.Join(sub, " "), err, out)
	}
	for _, a := range args {
		flag, _, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(flag, "-") || flag == "--help" {
			continue
		}
		if !regexp.MustCompile(`(?m)(?:^|[\s\[])-{1,2}` + regexp.QuoteMeta(strings.TrimLeft(flag, "-")) + `(?:[\s=,\]]|$)`).Match(out) {
			return fmt.Sprintf("%s is not a flag of `%s`", flag, strings.Join(append([]string{filepath.Base(bin)}, sub...), " "))
		}
	}
	return ""
}

// docs/API.md's route list is the OpenAPI document's (collector/openapi/openapi.json, which
// TestOpenAPIContract holds to the served routes): every operation of the document is named in
// it ("METHOD /path", or "METHOD …/tail" under its parent's heading), and every route it names
// is in the document, but the admin server's.
func TestAPIDocNamesTheDocumentsRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			if slices.Contains([]string{"get", "put", "post", "delete", "patch"}, method) {
				ops[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	text := docFiles(t)["docs/API.md"]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(GET|POST|PUT|DELETE|PATCH) ((?:/|…/)[^\s`+"`"+`?)]*)`).FindAllStringSubmatch(text, -1) {
		named[m[1]+" "+strings.TrimRight(m[2], ".,:;")] = true
	}
	for op := range ops {
		method, path, _ := strings.Cut(op, " ")
		found := named[op]
		for n := range named {
			m, p, _ := strings.Cut(n, " ")
			found = found || m == method && strings.HasPrefix(p, "…/") && strings.HasSuffix(path, p[len("…"):])
		}
		if !found {
			t.Errorf("docs/API.md does not name %s, an operation of openapi.json", op)
		}
	}
	adminServer := map[string]bool{"GET /metrics": true, "GET /debug/pprof/": true}
	for n := range named {
		if !ops[n] && !adminServer[n] && !strings.Contains(n, "…") {
			t.Errorf("docs/API.md names %s, which openapi.json does not have", n)
		}
	}
	if len(ops) < 20 || len(named) < 20 {
		t.Errorf("got %d operations and %d named routes; want the documents' (the patterns are broken)", len(ops), len(named))
	}
}
