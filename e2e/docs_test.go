package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/collector/auth"
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
