package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
)

// Finding is the outcome of one check of Check.
type Finding struct {
	Check string // "schema-registry" or "schema"
	OK    bool
	Note  string // what was found, or the problem and its fix
}

// Check is doctor's look at the registry; it registers nothing. One finding
// for the registry (reachable, credentials accepted, global compatibility),
// then one per binding whose subject is known before any event: a looked-up
// subject exists at its version and compiles, a file is registered or the
// registry would accept it (its compatibility check), with the subject's
// compatibility level. The error is only for a registry that cannot be
// reached or refuses the credentials (ErrUnavailable, ErrNotAuthorized).
func (e *Encoder) Check(ctx context.Context, topicOf TopicOf) ([]Finding, error) {
	var global sr.CompatibilityResult
	err := e.cl.call(ctx, "read the global compatibility", func(ctx context.Context) error {
		global = e.cl.sr.Compatibility(ctx)[0]
		return global.Err
	})
	if errors.Is(err, ErrSubjectMissing) { // GET /config is in every registry's API
		return nil, fmt.Errorf("schema registry: no registry API at the URL (HTTP 404 for its global configuration): check the URL, e.g. http://host:8081 for Confluent's or .../apis/ccompat/v7 for Apicurio's: %w", err)
	}
	if err != nil {
		return nil, err
	}
	out := []Finding{{Check: "schema-registry", OK: true,
		Note: fmt.Sprintf("reachable, credentials accepted; global compatibility %s", global.Level)}}
	for _, r := range e.order {
		for _, b := range r.bindings() {
			topic, ok := e.knownTopic(r, b, topicOf)
			if !ok {
				out = append(out, Finding{Check: "schema", OK: true, Note: fmt.Sprintf(
					"%s: subject %s depends on the event's topic; each topic's subject is resolved on its first event", b.what, b.subject("<topic>"))})
				continue
			}
			f, err := e.checkBinding(ctx, b, topic)
			if err != nil {
				return out, err
			}
			out = append(out, f)
		}
	}
	return out, nil
}

func (e *Encoder) checkBinding(ctx context.Context, b *binding, topic string) (Finding, error) {
	subject := b.subject(topic)
	fail := func(err error) (Finding, error) {
		if IsRetryable(err) || errors.Is(err, ErrNotAuthorized) {
			return Finding{}, err
		}
		return Finding{Check: "schema", Note: fmt.Sprintf("%s: %v", b.what, err)}, nil
	}
	compat := e.compatibility(ctx, subject)
	if b.cfg.File == "" {
		ss, err := e.cl.lookup(ctx, subject, b.cfg.Version)
		if err != nil {
			if errors.Is(err, ErrSubjectMissing) {
				err = fmt.Errorf("%w (register it, or fix the rule's subject)", err)
			}
			return fail(err)
		}
		if got := formatOf(ss.Type); b.format != "" && got != b.format {
			return fail(fmt.Errorf("%w: subject %q version %d is %s, the rule expects %s", ErrInvalidSchema, subject, ss.Version, got, b.format))
		}
		if _, err := e.codec(ctx, ss.ID, formatOf(ss.Type), ss.Schema.Schema, ss.References, b); err != nil {
			return fail(fmt.Errorf("subject %q version %d: %w", subject, ss.Version, err))
		}
		return Finding{Check: "schema", OK: true, Note: fmt.Sprintf("%s: subject %q version %d, schema id %d (%s); compatibility %s",
			b.what, subject, ss.Version, ss.ID, formatOf(ss.Type), compat)}, nil
	}
	s := sr.Schema{Schema: b.text, Type: srType(b.format), References: b.refs}
	var ss sr.SubjectSchema
	err := e.cl.call(ctx, fmt.Sprintf("look up %s in subject %q", b.cfg.File, subject), func(ctx context.Context) error {
		var err error
		ss, err = e.cl.sr.LookupSchema(ctx, subject, s)
		return err
	})
	if err == nil {
		return Finding{Check: "schema", OK: true, Note: fmt.Sprintf("%s: %s is registered as subject %q version %d, schema id %d; compatibility %s",
			b.what, b.cfg.File, subject, ss.Version, ss.ID, compat)}, nil
	}
	if !errors.Is(err, ErrSubjectMissing) {
		return fail(err)
	}
	var res sr.CheckCompatibilityResult
	err = e.cl.call(ctx, fmt.Sprintf("check %s against subject %q", b.cfg.File, subject), func(ctx context.Context) error {
		var err error
		res, err = e.cl.sr.CheckCompatibility(ctx, subject, -1, s)
		return err
	})
	switch {
	case errors.Is(err, ErrSubjectMissing):
		return Finding{Check: "schema", OK: true, Note: fmt.Sprintf("%s: subject %q does not exist yet; walrelay run registers %s as its first version (compatibility %s)",
			b.what, subject, b.cfg.File, compat)}, nil
	case err != nil && errors.Is(err, ErrRefused) && len(b.refs) > 0:
		// Apicurio's compatibility check does not resolve references (422).
		return Finding{Check: "schema", OK: true, Note: fmt.Sprintf("%s: %s is not registered in subject %q yet and the registry could not check it (%v); walrelay run registers it",
			b.what, b.cfg.File, subject, err)}, nil
	case err != nil:
		return fail(err)
	case !res.Is:
		return Finding{Check: "schema", Note: fmt.Sprintf("%s: %s is incompatible with the latest version of subject %q under compatibility %s: walrelay run would be refused: %s",
			b.what, b.cfg.File, subject, compat, strings.Join(res.Messages, "; "))}, nil
	}
	return Finding{Check: "schema", OK: true, Note: fmt.Sprintf("%s: %s is not registered in subject %q yet; the registry accepts it as a new version (compatibility %s); walrelay run registers it",
		b.what, b.cfg.File, subject, compat)}, nil
}

// compatibility is subject's compatibility level, the global one when it
// has none of its own, or why it could not be read.
func (e *Encoder) compatibility(ctx context.Context, subject string) string {
	var c sr.CompatibilityResult
	err := e.cl.call(ctx, fmt.Sprintf("read the compatibility of subject %q", subject), func(ctx context.Context) error {
		c = e.cl.sr.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject)[0]
		return c.Err
	})
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	return c.Level.String()
}
