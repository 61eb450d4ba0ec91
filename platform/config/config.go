// Package config loads the settings of every tally binary from, in rising order of precedence,
// built-in defaults, a YAML file (--config), TALLY_* environment variables and command-line
// flags. Every setting is declared once in the table in settings.go, so --help, the example
// file and the environment names cannot drift apart. Loading is pure: no globals, no init().
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is prepended to every setting's environment name: kafka.brokers is TALLY_KAFKA_BROKERS.
const EnvPrefix = "TALLY"

// Load parses args (without the program name) for the binary called name and returns the
// validated configuration. When --help is given it prints the usage to stdout and returns
// pflag.ErrHelp, which callers treat as a clean exit.
func Load(name string, args []string) (Config, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	configFile := fs.String("config", "", "YAML config file (see config.example.yaml); env TALLY_CONFIG")
	for _, s := range settings() {
		s.addFlag(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(os.Stdout, "Usage: %s [flags]\n\nEvery setting can also be given in the YAML file (same dotted key, nested)\nor as an environment variable (TALLY_ + key upper-cased, dots as underscores).\nPrecedence: flag > environment > file > default.\n\n", name)
		fmt.Fprint(os.Stdout, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}

	v := viper.New()
	for _, s := range settings() {
		v.SetDefault(s.key, s.def)
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	for _, s := range settings() {
		if err := v.BindPFlag(s.key, fs.Lookup(s.key)); err != nil {
			return Config{}, fmt.Errorf("config: bind flag %s: %w", s.key, err)
		}
	}
	path := *configFile
	if path == "" {
		path = os.Getenv(EnvPrefix + "_CONFIG")
	}
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config: read %s: %w", path, err)
		}
		if err := checkFileKeys(v.AllSettings(), ""); err != nil {
			return Config{}, fmt.Errorf("config: %s: %w", path, err)
		}
	}

	var cfg Config
	decode := func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			apiKeyHook,
		)
	}
	if err := v.Unmarshal(&cfg, decode); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg.Kafka.Brokers = dropEmpty(cfg.Kafka.Brokers)
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// checkFileKeys rejects keys in the YAML file that no setting declares, so a typo is an error
// instead of a silently ignored line. prefix is the dotted path walked so far.
func checkFileKeys(m map[string]any, prefix string) error {
	for k, val := range m {
		key := prefix + k
		if sub, ok := val.(map[string]any); ok && !isSetting(key) {
			if err := checkFileKeys(sub, key+"."); err != nil {
				return err
			}
			continue
		}
		if !isSetting(key) {
			return fmt.Errorf("unknown key %q", key)
		}
	}
	return nil
}

func isSetting(key string) bool {
	for _, s := range settings() {
		if s.key == key {
			return true
		}
	}
	return false
}

func dropEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (s setting) addFlag(fs *pflag.FlagSet) {
	help := s.help + " (env " + EnvName(s.key) + ")"
	switch d := s.def.(type) {
	case string:
		fs.String(s.key, d, help)
	case int:
		fs.Int(s.key, d, help)
	case bool:
		fs.Bool(s.key, d, help)
	case float64:
		fs.Float64(s.key, d, help)
	case time.Duration:
		fs.Duration(s.key, d, help)
	case []string:
		fs.StringSlice(s.key, d, help)
	default:
		panic(fmt.Sprintf("config: setting %s has unsupported default type %s", s.key, reflect.TypeOf(d)))
	}
}

// EnvName is the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}
