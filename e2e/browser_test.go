package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// checkLivePage opens the collector's page in headless Chromium (Debian's chromium, installed by
// scripts/setup.sh), posts views for an item and clicks for an ad the page shows, and waits for
// the page's counts to rise to them without a reload (the clicks marked provisional), with the
// top lists filled. It writes a screenshot under the test's artifact directory (go test
// -artifacts keeps it; scripts/test passes it).
func checkLivePage(t *testing.T, api string) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/setup.sh installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(420, 900), // a phone's width
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	if err := chromedp.Do(ctx); err != nil { // starts the browser and its tab
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var jsErrors []string
	console := chromedp.Console(ctx) // subscribed from here on
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException { // not network errors: /v1/top answers 404 without topk
				mu.Lock()
				jsErrors = append(jsErrors, m.Text)
				mu.Unlock()
			}
		}
	}()

	const item, ad = "page-item", "page-ad"
	cellCSS := `#item-table tr[data-item="` + item + `"] td.views`
	clicksCSS := `#ad-table tr[data-ad="` + ad + `"] td:nth-child(2)`
	cellSel, clicksSel := chromedp.CSS(cellCSS), chromedp.CSS(clicksCSS)
	// text reads an element's text in one evaluation in the page: the page redraws its tables
	// every 1.5 s, and a node found by one call can be gone by the next ("No node with given id
	// found"), which a query and a separate read of the node run into.
	text := func(css string) (string, error) {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[*string](fmt.Sprintf(`(e => e ? e.innerText : null)(document.querySelector(%q))`, css)))
		if err != nil {
			return "", err
		}
		if got == nil {
			return "", fmt.Errorf("no element %s", css)
		}
		return *got, nil
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(api+"/?items="+item+",page-other&ads="+ad), chromedp.WaitVisible(cellSel), chromedp.WaitVisible(clicksSel)); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	before, err := text(cellCSS)
	if err != nil {
		t.Fatalf("read the count: %v", err)
	}
	if before != "0" {
		t.Fatalf("views before posting: got %q; want 0", before)
	}
	if clicks, err := text(clicksCSS); err != nil || clicks != "0" {
		t.Fatalf("clicks before posting: got %q, %v; want 0", clicks, err)
	}
	var lines strings.Builder
	for i := range 7 {
		fmt.Fprintf(&lines, `{"type":"view","item_id":%q,"viewer_id":"pv%d"}`+"\n", item, i)
	}
	for i := range 3 {
		fmt.Fprintf(&lines, `{"type":"click","click_id":"page-click-%d","ad_id":%q,"campaign_id":"c1","user_hash":"u%d","ip_hash":"h1","device":"web"}`+"\n", i, ad, i)
	}
	if code := post(t, api+"/v1/events", lines.String()); code != 202 {
		t.Fatalf("POST /v1/events: got %d; want 202", code)
	}
	var after, clicks string
	deadline := time.Now().Add(30 * time.Second)
	for (after != "7" || clicks != "3") && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if after, err = text(cellCSS); err != nil {
			t.Fatalf("read the count: %v", err)
		}
		if clicks, err = text(clicksCSS); err != nil {
			t.Fatalf("read the clicks: %v", err)
		}
	}
	if after != "7" {
		t.Errorf("views shown after posting 7: got %q; want 7 (the page updates without a reload)", after)
	}
	if clicks != "3" {
		t.Errorf("clicks of %s shown after posting 3: got %q; want 3", ad, clicks)
	}
	if badge, err := text(`#ad-table tr[data-ad="` + ad + `"] .badge`); err != nil || badge != "provisional" {
		t.Errorf("clicks of %s marked: got %q, %v; want provisional (no nightly report yet)", ad, badge, err)
	}
	// The 1-minute list, whose window ends at the last complete 5 seconds (the 1-hour one may be
	// empty for the test's first minute).
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#top-window"), "1m")); err != nil {
		t.Fatalf("choose the 1m top lists: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("top-window").dispatchEvent(new Event("change"))`)); err != nil {
		t.Fatalf("choose the 1m top lists: %v", err)
	}
	var top int
	for deadline := time.Now().Add(20 * time.Second); top == 0 && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if top, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#top-items li").length`)); err != nil {
			t.Fatalf("read the top list: %v", err)
		}
	}
	if top == 0 {
		t.Errorf("top items over 1m listed: got none; want some (topk runs in the all-in-one)")
	}
	status, err := text("#status")
	if err != nil {
		t.Fatal(err)
	}
	// The chart reads the rollups, which receive the batches once every
	// aggregator.sketch_interval (5 s), and the page redraws it every 1.5 s.
	var chartTotal string
	for deadline := time.Now().Add(15 * time.Second); chartTotal != "7" && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		chart, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#chart"), "data-total"))
		if err != nil {
			t.Fatal(err)
		}
		chartTotal = chart.Value
	}
	if !strings.HasPrefix(status, "updated") {
		t.Errorf("status line: got %q; want \"updated ...\" (no API error)", status)
	}
	if chartTotal != "7" {
		t.Errorf("per-minute chart of %s: total %q; want 7", item, chartTotal)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "live-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	mu.Lock()
	defer mu.Unlock()
	if len(jsErrors) > 0 {
		t.Errorf("script errors on the page: %v", jsErrors)
	}
}
