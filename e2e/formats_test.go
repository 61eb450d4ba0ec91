package e2e_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tallypipeline/tally/allinone/allinonetest"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestTopicsDecodeWithTheShippedSchema reads the records of every Protobuf topic as a team
// outside tally would, with nothing of tally but schemas/proto/tally.proto: kcat fetches them
// from the embedded broker and protoc decodes each, and ClickHouse reads the views topic's records through its Protobuf
// format.
func TestTopicsDecodeWithTheShippedSchema(t *testing.T) {
	for _, tool := range []string{"kcat", "protoc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/setup.sh installs it): %v", tool, err)
		}
	}
	r := allinonetest.Start(t)
	api, now := r.API, time.Now()
	for _, p := range []struct{ path, body string }{
		{"/v1/views", `{"item_id":"fmt-item","viewer_id":"fmt-viewer","event_id":"fmt-event"}`},
		{"/v1/view-counts", fmt.Sprintf(`{"item_id":"fmt-item","second":%d,"count":5,"source_id":"fmt-edge","seq":1}`, now.Unix())},
		{"/v1/clicks", `{"click_id":"fmt-click","ad_id":"fmt-ad","campaign_id":"fmt-campaign","user_hash":"u","ip_hash":"h","device":"ios","fraud_score":0.5}`},
		{"/v1/fraud-verdicts", fmt.Sprintf(`{"click_id":"fmt-click","ad_id":"fmt-ad","verdict":"fraud","reason":"bot","decided_at":%d}`, now.UnixMilli())},
	} {
		if code := post(t, api+p.path, p.body); code != 202 {
			t.Fatalf("POST %s: got %d; want 202", p.path, code)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, api+"/v1/items/fmt-item/likes/fmt-user", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT like: got %v, %v; want 200", resp, err)
	}

	proto := func() string { dir, _ := filepath.Abs("../schemas/proto"); return dir }()
	wants := map[string][]string{
		schemas.TopicViews:         {`item_id: "fmt-item"`, `event_id: "fmt-event"`, `view_count {`, `source_id: "fmt-edge"`},
		schemas.TopicLikes:         {`user_id: "fmt-user"`, `liked: true`},
		schemas.TopicClicks:        {`click_id: "fmt-click"`, `campaign_id: "fmt-campaign"`, `fraud_score: 0.5`},
		schemas.TopicFraudVerdicts: {`verdict: VERDICT_FRAUD`, `reason: "bot"`},
		schemas.TopicCounted:       {`kind: COUNT_KIND_ITEMS`, `key: "fmt-item"`, `kind: COUNT_KIND_ADS`, `key: "fmt-ad"`},
	}
	var views [][]byte
	for topic, want := range wants {
		var text string
		waitFor(t, time.Minute, "kcat and protoc read "+topic, func() bool {
			records := kcatRecords(t, r, topic)
			text = protocDecode(t, proto, records)
			if topic == schemas.TopicViews {
				views = records
			}
			return containsAll(text, want)
		})
		t.Logf("%s: %d bytes of protoc text", topic, len(text))
	}
	readViewsWithClickHouse(t, r, proto, views)
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// kcatRecords fetches every record of topic from the all-in-one's broker with kcat, logged in
// as its SASL user, each value prefixed with its length.
func kcatRecords(t *testing.T, r *allinonetest.Running, topic string) [][]byte {
	t.Helper()
	sec := r.Config.Kafka.Security()
	cmd := exec.Command("kcat", "-C", "-b", strings.Join(r.Config.Kafka.Brokers, ","), "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", "%R%s", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms="+sec.SASLMechanism,
		"-X", "sasl.username="+sec.Username, "-X", "sasl.password="+sec.Password)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat %s: %v: %s", topic, err, stderr.String())
	}
	var records [][]byte
	for len(out) >= 4 {
		n := int(binary.BigEndian.Uint32(out))
		if len(out) < 4+n {
			t.Fatalf("kcat %s: a record of %d bytes cut at %d", topic, n, len(out)-4)
		}
		records = append(records, out[4:4+n])
		out = out[4+n:]
	}
	return records
}

// protocDecode decodes each record as a tally.v1.Record with protoc and returns the texts.
func protocDecode(t *testing.T, protoDir string, records [][]byte) string {
	t.Helper()
	var text strings.Builder
	for _, rec := range records {
		cmd := exec.Command("protoc", "--proto_path="+protoDir, "--decode=tally.v1.Record", "tally.proto")
		cmd.Stdin = bytes.NewReader(rec)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("protoc --decode %x: %v: %s", rec, err, out)
		}
		text.Write(out)
	}
	return text.String()
}

// readViewsWithClickHouse has the engine read the views topic's records, length-delimited in a
// file, through its Protobuf format and the shipped schema, as the Kafka engine would
// (kafka_format = 'ProtobufSingle', one record per message).
func readViewsWithClickHouse(t *testing.T, r *allinonetest.Running, protoDir string, records [][]byte) {
	t.Helper()
	var file []byte
	for _, rec := range records {
		file = protowire.AppendBytes(file, rec)
	}
	path := filepath.Join(t.TempDir(), "views.bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := chclient.Open(ctx, chclient.Options{Addr: r.Config.ClickHouse.Addr, Database: "tally", Username: r.Config.ClickHouse.Username, Password: r.Config.ClickHouse.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := fmt.Sprintf(`SELECT view.item_id, view.event_id, view_count.source_id, view_count.count
		FROM file('%s', 'Protobuf', 'view Tuple(item_id String, viewer_id String, event_id String, ts_ms Int64),
			view_count Tuple(item_id String, second Int64, count UInt64, source_id String, seq UInt64)')
		WHERE view.item_id = 'fmt-item' OR view_count.item_id = 'fmt-item'
		ORDER BY view_count.count
		SETTINGS format_schema = '%s/tally.proto:Record'`, path, protoDir)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatalf("read the views records through the Protobuf format: %v", err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var item, event, source string
		var count uint64
		if err := rows.Scan(&item, &event, &source, &count); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s/%s/%d", item, event, source, count))
	}
	if want := []string{"fmt-item/fmt-event//0", "//fmt-edge/5"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got rows %q; want %q", got, want)
	}
	// One record alone, as the Kafka engine hands each message to ProtobufSingle.
	for _, rec := range records {
		if schemas.RecordKind(rec) != schemas.KindView {
			continue
		}
		single := filepath.Join(t.TempDir(), "view.bin")
		if err := os.WriteFile(single, rec, 0o644); err != nil {
			t.Fatal(err)
		}
		var item string
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT view.item_id FROM file('%s', 'ProtobufSingle', 'view Tuple(item_id String, viewer_id String, event_id String, ts_ms Int64)')
			SETTINGS format_schema = '%s/tally.proto:Record'`, single, protoDir)).Scan(&item)
		if err != nil || item != "fmt-item" {
			t.Errorf("one record through ProtobufSingle: got %q, %v; want fmt-item", item, err)
		}
		break
	}
}

// TestUpgradeFromVersion1Records runs the all-in-one on one data directory three times: first
// writing records in the format before Protobuf (kafka.record_format v1, as a release before it
// did), then in Protobuf, then in Protobuf framed for a schema registry (kafka.schema_id).
// Counting goes on across the changes, and every record of the log still decodes.
func TestUpgradeFromVersion1Records(t *testing.T) {
	dir := t.TempDir()
	run := func(format, viewers, liker, click string, flags ...string) *allinonetest.Running {
		r := allinonetest.Start(t, append([]string{"--data_dir", dir, "--kafka.record_format", format}, flags...)...)
		var lines strings.Builder
		for _, v := range strings.Split(viewers, ",") {
			fmt.Fprintf(&lines, `{"type":"view","item_id":"up-item","viewer_id":%q}`+"\n", v)
		}
		fmt.Fprintf(&lines, `{"type":"click","click_id":%q,"ad_id":"up-ad","campaign_id":"c","user_hash":"u","ip_hash":"h","device":"ios"}`+"\n", click)
		if code := post(t, r.API+"/v1/events", lines.String()); code != 202 {
			t.Fatalf("%s: POST /v1/events: got %d; want 202", format, code)
		}
		// Right after a restart the like state may still be rebuilt from the log (503): a like
		// sent again is the same like.
		testinfra.WaitFor(t, time.Minute, format+": like accepted", func() (bool, string) {
			req, _ := http.NewRequest(http.MethodPut, r.API+"/v1/items/up-item/likes/"+liker, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		})
		return r
	}
	waitCounts := func(r *allinonetest.Running, views, likes int) {
		t.Helper()
		var got struct {
			Views uint64 `json:"views"`
			Likes int64  `json:"likes"`
		}
		testinfra.WaitFor(t, time.Minute, "up-item counts", func() (bool, string) {
			resp, err := http.Get(r.API + "/v1/items/up-item/counts")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			err = json.NewDecoder(resp.Body).Decode(&got)
			return err == nil && got.Views == uint64(views) && got.Likes == int64(likes), fmt.Sprintf("%+v, %v", got, err)
		})
	}
	r := run("v1", "a,b,c", "u1", "k1")
	waitCounts(r, 3, 1)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	r = run("protobuf", "d,e", "u2", "k2")
	waitCounts(r, 5, 2)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	r = run("protobuf", "f", "u3", "k3", "--kafka.schema_id", "42")
	waitCounts(r, 6, 3)

	formats := map[string]int{}
	kc := kafkaConn{addr: r.Config.Kafka.Brokers[0], sec: r.Config.Kafka.Security()}
	for _, topic := range []string{schemas.TopicViews, schemas.TopicLikes, schemas.TopicClicks} {
		for _, v := range topicValues(t, kc, topic) {
			format := "protobuf"
			switch {
			case v[0] == 1:
				format = "v1"
			case bytes.HasPrefix(v, []byte{0, 0, 0, 0, 42, 0}):
				format = "registry"
			}
			formats[topic+" "+format]++
			var err error
			switch topic {
			case schemas.TopicViews:
				_, err = schemas.DecodeView(v)
			case schemas.TopicLikes:
				_, err = schemas.DecodeLike(v)
			case schemas.TopicClicks:
				_, err = schemas.DecodeClick(v)
			}
			if err != nil {
				t.Errorf("%s record %x: %v", topic, v, err)
			}
		}
	}
	want := map[string]int{"views v1": 3, "views protobuf": 2, "views registry": 1, "likes v1": 1, "likes protobuf": 1, "likes registry": 1,
		"clicks v1": 1, "clicks protobuf": 1, "clicks registry": 1}
	if fmt.Sprint(formats) != fmt.Sprint(want) {
		t.Errorf("records by topic and format: got %v; want %v", formats, want)
	}
	conn, err := chclient.Open(context.Background(), r.Config.ClickHouse.Options())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testinfra.WaitFor(t, time.Minute, "the three clicks counted", func() (bool, string) {
		var n int64
		err := conn.QueryRow(context.Background(), "SELECT sum(clicks) FROM click_deltas WHERE ad_id = 'up-ad'").Scan(&n)
		return err == nil && n == 3, fmt.Sprint(n, err)
	})
}

// topicValues reads every record value topic holds now.
func topicValues(t *testing.T, kc kafkaConn, topic string) [][]byte {
	t.Helper()
	cl, err := kc.client(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := int64(0)
	ends.Each(func(o kadm.ListedOffset) { left += o.Offset })
	cl.AddConsumeTopics(topic)
	var out [][]byte
	for left > 0 {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(fctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !kerr.IsRetriable(fe.Err) { // the topic's metadata may still be loading
				t.Fatalf("read %s: %v", topic, fe.Err)
			}
		}
		fs.EachRecord(func(rec *kgo.Record) {
			left--
			out = append(out, rec.Value)
		})
	}
	return out
}
