package e2e_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestAllInOneRobustness runs the all-in-one as a process with tight HTTP limits and checks
// them on its real listener, then starts a second all-in-one on the same data directory (with
// other ports), which must fail fast without touching the first one's Kafka files.
func TestAllInOneRobustness(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	dir, logs := t.TempDir(), t.TempDir()
	addr := func() string {
		a, err := testinfra.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ports := func() (args []string, collector string) {
		_, redisPort, _ := strings.Cut(addr(), ":")
		collector = addr()
		return []string{"--embedded.kafka_addr", addr(), "--embedded.clickhouse_addr", addr(), "--embedded.redis_port", redisPort,
			"--collector.addr", collector, "--aggregator.addr", addr()}, collector
	}
	firstPorts, apiAddr := ports()
	api := "http://" + apiAddr
	first := startProc(t, "first", bins.pipeline, logs, append([]string{"run", "--data_dir", dir, "--demo.enabled=false",
		"--kafka.partitions", "2", "--aggregator.flush_interval", "100ms",
		"--collector.read_timeout", "1s", "--collector.idle_timeout", "500ms", "--collector.read_header_timeout", "1s"}, firstPorts...)...)
	testinfra.WaitHTTP(t, 2*time.Minute, api+"/readyz")
	post, err := http.Post(api+"/v1/events", "application/x-ndjson", strings.NewReader(
		"{\"type\":\"view\",\"item_id\":\"r-1\",\"viewer_id\":\"v1\"}\n{\"type\":\"view\",\"item_id\":\"r-2\",\"viewer_id\":\"v2\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusAccepted {
		t.Fatalf("post views: got %d; want 202", post.StatusCode)
	}

	t.Run("http limits", func(t *testing.T) { checkHTTPLimits(t, apiAddr) })

	t.Run("second all-in-one on the same data directory", func(t *testing.T) {
		// The first is paused while the second tries (it keeps its lock): its own periodic writes
		// (topk publishes every 2 s, offset commits) must not pass for the second one's.
		time.Sleep(2 * time.Second)
		if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("pause the first all-in-one: %v", err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Errorf("resume the first all-in-one: %v", err)
				}
			}
		}
		defer resume()
		time.Sleep(200 * time.Millisecond) // writes already issued land before the snapshot
		before := snapshot(t, filepath.Join(dir, "kafka"))
		if len(before) == 0 {
			t.Fatal("got no Kafka files under the data directory; want the first all-in-one's")
		}
		t0 := time.Now()
		secondPorts, _ := ports()
		second := startProc(t, "second", bins.pipeline, logs, append([]string{"run", "--data_dir", dir, "--demo.enabled=false"}, secondPorts...)...)
		select {
		case <-second.done:
		case <-time.After(30 * time.Second):
			t.Fatal("second all-in-one still running after 30s; want it to refuse the data directory at once")
		}
		took := time.Since(t0)
		if code := second.cmd.ProcessState.ExitCode(); code == 0 {
			t.Errorf("second all-in-one exited %d; want non-zero", code)
		}
		if took > 10*time.Second {
			t.Errorf("second all-in-one took %s to fail; want under 10s", took)
		}
		out, _ := os.ReadFile(second.log)
		for _, want := range []string{"data directory " + dir + " is in use", "--data_dir"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("second all-in-one's output lacks %q:\n%s", want, out)
			}
		}
		after := snapshot(t, filepath.Join(dir, "kafka"))
		names := map[string]bool{}
		for name := range before {
			names[name] = true
		}
		for name := range after {
			names[name] = true
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			if before[name] != after[name] {
				t.Errorf("kafka/%s: got %q after the second all-in-one; want it untouched (%q)", name, after[name], before[name])
			}
		}
		resume()
		if first.exited() {
			t.Fatal("first all-in-one exited")
		}
		testinfra.WaitHTTP(t, 10*time.Second, api+"/readyz")
	})
}

// snapshot maps every file under dir to its size, modification time and content hash.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = fmt.Sprintf("%d bytes, mtime %s, sha256 %x", info.Size(), info.ModTime().Format(time.RFC3339Nano), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkHTTPLimits checks the configured limits (read 1s, idle 500ms) and the JSON errors on the
// collector at addr.
func checkHTTPLimits(t *testing.T, addr string) {
	api := "http://" + addr
	t.Run("slow body cut off", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: 4000\r\n\r\n", addr)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
					if _, err := conn.Write([]byte{' '}); err != nil {
						return
					}
				}
			}
		}()
		t0 := time.Now()
		_ = conn.SetReadDeadline(t0.Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("got %v after %s; want a 408 within the 1s read timeout", err, time.Since(t0))
		}
		resp.Body.Close()
		if d := time.Since(t0); resp.StatusCode != http.StatusRequestTimeout || d > 3*time.Second {
			t.Errorf("got %d after %s; want 408 within 3s", resp.StatusCode, d)
		}
	})
	t.Run("idle keep-alive closed", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t0 := time.Now()
		_ = conn.SetReadDeadline(t0.Add(5 * time.Second))
		_, err = br.ReadByte()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("idle connection still open after 5s; want it closed after the 500ms idle timeout")
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Errorf("idle connection closed after %s; want within 3s", d)
		}
	})
	tests := []struct {
		method, path string
		wantCode     int
		wantField    string
		wantAllow    string
	}{
		{"GET", "/v1/nope", 404, "", ""},
		{"GET", "/v1/views", 405, "", "POST"},
		{"DELETE", "/v1/counts?ids=a", 405, "", "GET, HEAD"},
		{"GET", "/v1/items/a/views?granularity=day&from=9999-12-01T00:00:00Z&to=9999-12-31T00:00:00Z", 400, "from", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, api+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Error, Field string }
			if resp.StatusCode != tt.wantCode || json.Unmarshal(b, &e) != nil || e.Error == "" || e.Field != tt.wantField || resp.Header.Get("Allow") != tt.wantAllow {
				t.Errorf("got %d (Allow %q) %s; want %d with a JSON error naming %q (Allow %q)", resp.StatusCode, resp.Header.Get("Allow"), b, tt.wantCode, tt.wantField, tt.wantAllow)
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
}
