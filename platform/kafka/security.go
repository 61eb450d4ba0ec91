package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"tally/platform/tlsconf"
)

// SASL mechanisms tally's clients speak. SCRAM never sends the password itself, so it is safe
// even on a link without TLS (though the records still travel in clear text).
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Security is how every client authenticates to the brokers and protects the link. The zero
// value is a plain, unauthenticated connection (the embedded broker's).
type Security struct {
	SASLMechanism string // "", ScramSHA256 or ScramSHA512
	Username      string
	Password      string
	TLS           tlsconf.Files
}

// Options are the client options for s: kgo.SASL and kgo.DialTLSConfig as configured, to be
// appended to ClientOptions. An error names what is wrong.
func (s Security) Options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	auth := scram.Auth{User: s.Username, Pass: s.Password}
	switch s.SASLMechanism {
	case "":
		if s.Username != "" || s.Password != "" {
			return nil, fmt.Errorf("kafka SASL: a username or password is set but no mechanism (want %s or %s)", ScramSHA256, ScramSHA512)
		}
	case ScramSHA256, ScramSHA512:
		if s.Username == "" || s.Password == "" {
			return nil, fmt.Errorf("kafka SASL %s: needs a username and a password", s.SASLMechanism)
		}
		if s.SASLMechanism == ScramSHA256 {
			opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
		} else {
			opts = append(opts, kgo.SASL(auth.AsSha512Mechanism()))
		}
	default:
		return nil, fmt.Errorf("kafka SASL: mechanism %q; want %s or %s", s.SASLMechanism, ScramSHA256, ScramSHA512)
	}
	tc, err := s.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("kafka TLS: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}
