package schema

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walrelay/walrelay/internal/tlsfiles"
)

// client is franz-go's registry client with walrelay's time limit and error
// sorting. Safe for concurrent use.
type client struct {
	sr      *sr.Client
	timeout time.Duration
}

func newClient(c Config, log *slog.Logger) (*client, error) {
	opts := []sr.ClientOpt{
		sr.URLs(slices.Clone(c.URLs)...), // sr.URLs edits the slice it is given
		sr.UserAgent("walrelay"),
		sr.HTTPClient(&http.Client{Timeout: c.Timeout}),
	}
	tc, err := buildTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		if tc.InsecureSkipVerify {
			log.Warn("schema registry TLS certificate verification is disabled: anyone between walrelay and the registry "+
				"can read and change the traffic; set the registry's CA file instead", "fields", []string{"TLS.InsecureSkipVerify", "TLS.CAFile"})
		}
		opts = append(opts, sr.DialTLSConfig(tc))
	}
	plain := false
	for _, u := range c.URLs {
		plain = plain || strings.HasPrefix(u, "http://")
	}
	switch {
	case c.Username != "":
		opts = append(opts, sr.BasicAuth(c.Username, c.Password))
	case c.BearerToken != "":
		opts = append(opts, sr.BearerToken(c.BearerToken))
	case c.BearerTokenFile != "":
		path := c.BearerTokenFile
		if _, err := readToken(path); err != nil {
			return nil, err
		}
		opts = append(opts, sr.PreReq(func(req *http.Request) error {
			tok, err := readToken(path)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			return nil
		}))
	default:
		plain = false
	}
	if plain {
		log.Warn("schema registry credentials over http:// travel in clear text; use an https:// URL", "fields", []string{"URLs"})
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w", err)
	}
	return &client{sr: cl, timeout: c.Timeout}, nil
}

// readToken reads a bearer token file; surrounding white space is not part
// of the token.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", settingErr("BearerTokenFile", "read token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", settingErr("BearerTokenFile", "%s is empty", path)
	}
	return tok, nil
}

// buildTLS returns the TLS configuration for https URLs, nil when c asks for
// nothing beyond Go's defaults (system roots).
func buildTLS(c TLSConfig) (*tls.Config, error) {
	if c == (TLSConfig{}) {
		return nil, nil
	}
	tc, err := tlsfiles.Client(tlsfiles.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile,
		ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify})
	var fe *tlsfiles.Error
	if errors.As(err, &fe) {
		if fe.CA {
			return nil, settingErr("TLS.CAFile", "%w", fe.Err)
		}
		return nil, settingErr("TLS.CertFile", "%w", fe.Err)
	}
	return tc, err
}

// call runs fn with the request time limit, sorting its error for op.
func (c *client) call(ctx context.Context, op string, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := fn(cctx); err != nil {
		return registryError(ctx, op, err)
	}
	return nil
}

// lookup returns subject's schema at version (0 or -1: the latest).
func (c *client) lookup(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	if version <= 0 {
		version = -1
	}
	var ss sr.SubjectSchema
	err := c.call(ctx, fmt.Sprintf("look up subject %q version %s", subject, versionName(version)), func(ctx context.Context) error {
		var err error
		ss, err = c.sr.SchemaByVersion(ctx, subject, version)
		return err
	})
	return ss, err
}

func versionName(v int) string {
	if v <= 0 {
		return "latest"
	}
	return fmt.Sprint(v)
}

// register registers s under subject, or finds it registered, and returns
// its id. The registry adds no version when the text is already the
// subject's.
func (c *client) register(ctx context.Context, subject string, s sr.Schema) (int, error) {
	var id int
	err := c.call(ctx, fmt.Sprintf("register under subject %q", subject), func(ctx context.Context) error {
		var err error
		id, err = c.sr.RegisterSchema(ctx, subject, s, -1, -1)
		return err
	})
	if errors.Is(err, ErrSubjectMissing) { // registering creates the subject: the URL is wrong
		return 0, fmt.Errorf("schema registry: register under subject %q: HTTP 404: no registry API at the URL (check it: e.g. http://host:8081 for Confluent's, .../apis/ccompat/v7 for Apicurio's)", subject)
	}
	return id, err
}

// namedSchema is a referenced schema: the name its user refers to it by.
type namedSchema struct {
	name string
	sr.SubjectSchema
}

// references fetches refs and, recursively, what they reference; each
// schema comes after those it references.
func (c *client) references(ctx context.Context, refs []sr.SchemaReference) ([]namedSchema, error) {
	var out []namedSchema
	seen := map[string]bool{}
	var walk func(refs []sr.SchemaReference, depth int) error
	walk = func(refs []sr.SchemaReference, depth int) error {
		if depth > 32 {
			return fmt.Errorf("%w: references nested deeper than 32", ErrInvalidSchema)
		}
		for _, r := range refs {
			key := fmt.Sprintf("%s\x00%s\x00%d", r.Name, r.Subject, r.Version)
			if seen[key] {
				continue
			}
			seen[key] = true
			ss, err := c.lookup(ctx, r.Subject, r.Version)
			if err != nil {
				return fmt.Errorf("reference %q: %w", r.Name, err)
			}
			if err := walk(ss.References, depth+1); err != nil {
				return err
			}
			out = append(out, namedSchema{name: r.Name, SubjectSchema: ss})
		}
		return nil
	}
	return out, walk(refs, 0)
}

// srType is the registry's name of format f.
func srType(f Format) sr.SchemaType {
	switch f {
	case FormatProtobuf:
		return sr.TypeProtobuf
	case FormatJSON:
		return sr.TypeJSON
	}
	return sr.TypeAvro
}

// formatOf is the format of the registry's type t.
func formatOf(t sr.SchemaType) Format {
	switch t {
	case sr.TypeProtobuf:
		return FormatProtobuf
	case sr.TypeJSON:
		return FormatJSON
	}
	return FormatAvro
}

func srRefs(refs []Reference) []sr.SchemaReference {
	out := make([]sr.SchemaReference, 0, len(refs))
	for _, r := range refs {
		out = append(out, sr.SchemaReference{Name: r.Name, Subject: r.Subject, Version: r.Version})
	}
	return out
}
