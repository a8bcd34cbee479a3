package schema

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonCodec validates JSON against a JSON Schema; the body is the JSON as
// given. Safe for concurrent use.
type jsonCodec struct {
	schema *jsonschema.Schema
}

// jsonBase is the virtual location of the schema and of the references it
// names relatively: nothing is ever loaded from it.
const jsonBase = "file:///walrelay-schemas/"

// noLoader refuses every location that is neither the schema nor one of its
// references: a $ref never reads a file or the network.
type noLoader struct{}

func (noLoader) Load(loc string) (any, error) {
	return nil, fmt.Errorf("%s is not a reference of the schema (add it to the schema's references)", loc)
}

// compileJSON compiles text with its references (deps, by the names its
// $refs use). A schema without "$schema" is read as draft-07, as Confluent's
// serializers do.
func compileJSON(text string, deps []namedSchema) (*jsonCodec, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(noLoader{})
	add := func(name, text string) error {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return fmt.Errorf("%w: JSON Schema %s: %w", ErrInvalidSchema, name, err)
		}
		if err := c.AddResource(jsonLocation(name), doc); err != nil {
			return fmt.Errorf("%w: JSON Schema %s: %w", ErrInvalidSchema, name, err)
		}
		return nil
	}
	for _, d := range deps {
		if formatOf(d.Type) != FormatJSON {
			return nil, fmt.Errorf("%w: reference %q is %v, not JSON Schema", ErrInvalidSchema, d.name, d.Type)
		}
		if err := add(d.name, d.Schema.Schema); err != nil {
			return nil, err
		}
	}
	const main = "walrelay-schema.json"
	if err := add(main, text); err != nil {
		return nil, err
	}
	s, err := c.Compile(jsonLocation(main))
	if err != nil {
		return nil, fmt.Errorf("%w: JSON Schema: %w", ErrInvalidSchema, err)
	}
	return &jsonCodec{schema: s}, nil
}

// jsonLocation is where a schema named name lives: name itself when it is an
// absolute URL, else under jsonBase.
func jsonLocation(name string) string {
	if u, err := url.Parse(name); err == nil && u.IsAbs() {
		return name
	}
	return jsonBase + name
}

func (c *jsonCodec) encode(dst, data []byte) ([]byte, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	if err := c.schema.Validate(v); err != nil {
		return nil, mismatch("%s", bareNil.ReplaceAllString(oneLine(err.Error()), "${1}null"))
	}
	return append(dst, data...), nil
}

// bareNil is Go's <nil> where the validator prints a JSON null (an enum's
// values, a const), not inside a quoted string.
var bareNil = regexp.MustCompile(`(^|[ ,(\[])<nil>`)

// oneLine joins a validator's multi-line message into one line (it goes in a
// header and a log attribute).
func oneLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	if len(lines) > 1 && strings.HasPrefix(lines[0], "jsonschema validation failed") {
		lines = lines[1:] // names walrelay's virtual location of the schema only
	}
	for i, l := range lines {
		lines[i] = strings.TrimLeft(strings.TrimSpace(l), "- ")
	}
	return strings.Join(lines, "; ")
}

// jsonRecordName is the schema's "title", the record name of Confluent's
// JSON Schema serializers.
func jsonRecordName(text string) (string, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return "", fmt.Errorf("%w: JSON Schema: %w", ErrInvalidSchema, err)
	}
	obj, _ := doc.(map[string]any)
	title, _ := obj["title"].(string)
	if title == "" {
		return "", fmt.Errorf("%w: JSON Schema: the record strategies need the schema's \"title\"", ErrInvalidSchema)
	}
	return title, nil
}
