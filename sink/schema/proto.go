package schema

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/parser"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoCodec maps JSON to one message of a compiled .proto (the proto3 JSON
// mapping: field names as in the .proto or lowerCamelCase, 64-bit integers
// as numbers or strings, enums by name or number, well-known types in their
// JSON forms). Safe for concurrent use.
type protoCodec struct {
	msg   protoreflect.MessageDescriptor
	index []int // the message's path among the file's messages
}

// protoMain is the file name the schema's own text compiles under; its
// references keep their names (the import paths the text uses).
const protoMain = "walrelay-schema.proto"

// compileProto compiles text with the files it imports (deps, by import
// path; Google's well-known types need none) and picks message (a full
// name; "" for the file's first message).
func compileProto(ctx context.Context, text string, deps []namedSchema, message string) (*protoCodec, error) {
	srcs := map[string]string{protoMain: text}
	for _, d := range deps {
		if formatOf(d.Type) != FormatProtobuf {
			return nil, fmt.Errorf("%w: reference %q is %v, not Protobuf", ErrInvalidSchema, d.name, d.Type)
		}
		srcs[d.name] = d.Schema.Schema
	}
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)}),
	}
	files, err := comp.Compile(ctx, protoMain)
	if err != nil {
		return nil, fmt.Errorf("%w: Protobuf: %w", ErrInvalidSchema, err)
	}
	fd := files[0]
	if fd.Messages().Len() == 0 {
		return nil, fmt.Errorf("%w: Protobuf: the schema defines no message", ErrInvalidSchema)
	}
	md := fd.Messages().Get(0)
	if message != "" {
		m, ok := fd.FindDescriptorByName(protoreflect.FullName(message)).(protoreflect.MessageDescriptor)
		if !ok {
			return nil, fmt.Errorf("%w: Protobuf: the schema defines no message %q (give its full name, package included)", ErrInvalidSchema, message)
		}
		md = m
	}
	return &protoCodec{msg: md, index: messageIndex(md)}, nil
}

// messageIndex is md's path: its index among its parent's messages, after
// its parent's own path (Confluent's message indexes).
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var rev []int
	for d := protoreflect.Descriptor(md); ; {
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		rev = append(rev, m.Index())
		d = m.Parent()
	}
	idx := make([]int, len(rev))
	for i, v := range rev {
		idx[len(rev)-1-i] = v
	}
	return idx
}

func (c *protoCodec) encode(dst, data []byte) ([]byte, error) {
	m := dynamicpb.NewMessage(c.msg)
	if err := protojson.Unmarshal(data, m); err != nil {
		msg := err.Error()
		if rest, ok := strings.CutPrefix(msg, "proto:"); ok { // protobuf-go varies the space after it
			msg = strings.TrimLeft(rest, " \u00a0")
		}
		return nil, mismatch("%s: %s%s", c.msg.FullName(), msg, syntaxErrorField(msg, data))
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
	if err != nil {
		return nil, mismatch("%s: %v", c.msg.FullName(), err)
	}
	return out, nil
}

// protojsonSyntax is where protojson's syntax error is, and the key just
// before a position of the JSON text.
var (
	protojsonSyntax = regexp.MustCompile(`syntax error \(line (\d+):(\d+)\)`)
	keyBefore       = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"\s*:\s*$`)
)

// syntaxErrorField names the field whose value a protojson syntax error
// (msg) is in, as " (the value of field "b")", or "" when msg is no syntax
// error or the position follows no key.
func syntaxErrorField(msg string, data []byte) string {
	m := protojsonSyntax.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	off := 0
	for l := 1; l < line && off < len(data); l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return ""
		}
		off += i + 1
	}
	off += col - 1
	if off < 0 || off > len(data) {
		return ""
	}
	if k := keyBefore.FindSubmatch(data[:off]); k != nil {
		return fmt.Sprintf(" (the value of field %q)", k[1])
	}
	return ""
}

// protoRecordName is the full name of message in text, or of its first
// message, read without resolving imports.
func protoRecordName(text, message string) (string, error) {
	if message != "" {
		return message, nil
	}
	h := reporter.NewHandler(nil)
	file, err := parser.Parse(protoMain, strings.NewReader(text), h)
	if err != nil {
		return "", fmt.Errorf("%w: Protobuf: %w", ErrInvalidSchema, err)
	}
	res, err := parser.ResultFromAST(file, false, h)
	if err != nil {
		return "", fmt.Errorf("%w: Protobuf: %w", ErrInvalidSchema, err)
	}
	fdp := res.FileDescriptorProto()
	if len(fdp.GetMessageType()) == 0 {
		return "", fmt.Errorf("%w: Protobuf: the schema defines no message", ErrInvalidSchema)
	}
	name := fdp.GetMessageType()[0].GetName()
	if pkg := fdp.GetPackage(); pkg != "" {
		name = pkg + "." + name
	}
	return name, nil
}
