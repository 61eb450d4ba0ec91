package loadgen

import (
	"bytes"
	"math/rand/v2"
)

// clickIDDigits is the width of the random part of a load click id.
const clickIDDigits = 16

// clickBatch is one poster's reusable NDJSON body of n click lines (unsigned ids: the
// collector under test must have no clicks.signing_key).
type clickBatch struct {
	buf                           []byte
	lineLen                       int
	idOff, adOff, uh, cmpOff, dev int // offsets of the click id, ad, user, campaign and device digits within a line
	n                             int
}

// Load clicks spread over campaignCount campaigns (by ad) and deviceCount devices (by click), so
// that the per-campaign and per-device counts cost what they would with real traffic.
const (
	campaignCount = 1000
	deviceCount   = 4
)

func newClickBatch(prefix string, n int) lineBatch {
	var line bytes.Buffer
	line.WriteString(`{"type":"click","click_id":"`)
	line.WriteString(prefix)
	line.WriteString("-c")
	idOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, clickIDDigits))
	line.WriteString(`","ad_id":"`)
	line.WriteString(prefix)
	line.WriteString("-a")
	adOff := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, itemDigits))
	line.WriteString(`","campaign_id":"cmp-`)
	cmpOff := line.Len()
	line.WriteString(`000","user_hash":"u`)
	uh := line.Len()
	line.Write(bytes.Repeat([]byte{'0'}, viewerDigits))
	line.WriteString(`","ip_hash":"load","device":"dev-`)
	dev := line.Len()
	line.WriteString(`0"}` + "\n")
	return &clickBatch{buf: bytes.Repeat(line.Bytes(), n), lineLen: line.Len(), idOff: idOff, adOff: adOff, uh: uh, cmpOff: cmpOff, dev: dev, n: n}
}

// fill draws every line afresh: a random click id (distinct with overwhelming probability, so
// nothing is deduplicated), the hot ad (ad 0) with probability hot, else one of ads others
// uniformly, the ad's campaign, a device uniformly, and a user uniformly from users.
func (b *clickBatch) fill(rng *rand.Rand, hot float64, ads, users int) {
	for i := range b.n {
		line := b.buf[i*b.lineLen : (i+1)*b.lineLen]
		ad := 0
		if rng.Float64() >= hot {
			ad = 1 + rng.IntN(ads)
		}
		putDigits(line[b.idOff:b.idOff+clickIDDigits], rng.Uint64N(1e16))
		putDigits(line[b.adOff:b.adOff+itemDigits], uint64(ad))
		putDigits(line[b.cmpOff:b.cmpOff+3], uint64(ad%campaignCount))
		putDigits(line[b.dev:b.dev+1], rng.Uint64N(deviceCount))
		putDigits(line[b.uh:b.uh+viewerDigits], uint64(rng.IntN(users)))
	}
}

func (b *clickBatch) body() []byte { return b.buf }

func clicksStream(c Config) eventStream {
	return eventStream{name: "clicks", rate: c.ClickRate, batch: c.ClickBatch, conc: c.ClickConcurrency, hot: c.HotShare, items: c.Items, ids: c.Viewers, newBatch: newClickBatch,
		topic: clicksTopic, group: c.ClickGroup, metrics: "tally_clicks_", probe: clickProbe, send: postEvents(c.ClickBatch)}
}
