package allinone

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/platform/config"
)

// TestExampleFileMatchesSettings keeps config.example.yaml, which users copy, complete and
// loadable: the all-in-one reads every section, so every key is checked here.
func TestExampleFileMatchesSettings(t *testing.T) {
	example := filepath.Join("..", "config.example.yaml")
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var s Settings
	all := config.SharedSettings()
	for _, sec := range s.Sections() {
		all = append(all, sec.Settings()...)
	}
	for _, st := range all {
		leaf := st.Key[strings.LastIndex(st.Key, ".")+1:]
		if !strings.Contains(string(b), leaf+":") {
			t.Errorf("got no %s in config.example.yaml; want every setting documented", st.Key)
		}
	}
	if _, err := config.Load("test", []string{"--config", example}, s.Sections()...); err != nil {
		t.Errorf("load example: %v", err)
	}
}
