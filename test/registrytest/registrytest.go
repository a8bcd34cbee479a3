// Package registrytest gives the schema registry tests (the sink's and the
// end-to-end suite's) the independent consumer, test/registry/consumer.sh
// (Apicurio's Kafka deserializers, not walrelay's code), and an exact
// comparison of JSON values.
package registrytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"
)

// Record is one record the consumer read.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	SchemaID  int `json:"schemaId"` // from the frame
	Format    string
	Value     json.RawMessage // decoded by the deserializer; null for a tombstone
	Error     string          // the deserializer's failure instead of Value
}

// Consume reads count records of topics (topic → avro, protobuf or json)
// with test/registry/consumer.sh from the Kafka and registry of the
// environment (WALRELAY_TEST_KAFKA, WALRELAY_TEST_SCHEMA_REGISTRY), as a
// read_committed consumer, and logs each line. It fails t when the consumer
// fails or reads fewer than count records within a minute of quiet.
func Consume(ctx context.Context, t testing.TB, topics map[string]string, count int) []Record {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	began := time.Now()
	args := []string{filepath.Join(filepath.Dir(self), "..", "registry", "consumer.sh"), "--count", fmt.Sprint(count), "--timeout-ms", "60000"}
	for topic, format := range topics {
		args = append(args, "--topic", topic+"="+format)
	}
	cmd := exec.CommandContext(ctx, "bash", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out []Record
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		t.Logf("consumer: %s", sc.Text())
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consumer line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if runErr != nil {
		t.Fatalf("test/registry/consumer.sh: %v\n%s", runErr, stderr.String())
	}
	t.Logf("the consumer read %d records in %s", len(out), time.Since(began).Round(100*time.Millisecond))
	return out
}

// SameJSON reports whether a and b hold the same JSON value, numbers
// compared by their exact value (12.50 is 12.5; 9007199254740993 is not
// 9007199254740992). A text that is not JSON fails t.
func SameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	norm := func(s []byte) any {
		d := json.NewDecoder(bytes.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Errorf("%s: %v", s, err)
			return nil
		}
		return exactNumbers(v)
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func exactNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		r, _ := new(big.Rat).SetString(x.String())
		return r.RatString()
	case []any:
		for i := range x {
			x[i] = exactNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = exactNumbers(x[k])
		}
	}
	return v
}
