package sink

import (
	"bytes"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSmallBatchesGoUncompressed: record batches below minCompressBytes are sent as
// they are (one or a few records at live rates, where the codec's set-up costs more
// than it saves); larger ones get the configured codec.
func TestSmallBatchesGoUncompressed(t *testing.T) {
	json := func(n int) []byte {
		return []byte(strings.Repeat(`{"order_id": 42, "status": "paid"}`, n/34+1)[:n])
	}
	for _, tc := range []struct {
		name, codec string
		size        int
		want        kgo.CompressionCodecType
	}{
		{"one record zstd", "zstd", 300, kgo.CodecNone},
		{"just below zstd", "zstd", minCompressBytes - 1, kgo.CodecNone},
		{"at threshold zstd", "zstd", minCompressBytes, kgo.CodecZstd},
		{"large lz4", "lz4", 64 << 10, kgo.CodecLz4},
		{"small lz4", "lz4", 200, kgo.CodecNone},
		{"large none", "none", 64 << 10, kgo.CodecNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := codec(tc.codec)
			if err != nil {
				t.Fatal(err)
			}
			inner, err := kgo.DefaultCompressor(c)
			if err != nil {
				t.Fatal(err)
			}
			src := json(tc.size)
			var dst bytes.Buffer
			out, got := smallBatchesRaw{inner}.Compress(&dst, src)
			if got != tc.want {
				t.Fatalf("%d bytes with %s: codec %v, want %v", tc.size, tc.codec, got, tc.want)
			}
			if got == kgo.CodecNone && !bytes.Equal(out, src) {
				t.Fatalf("uncompressed batch changed")
			}
			if got != kgo.CodecNone && len(out) >= len(src) {
				t.Fatalf("compressed %d bytes into %d", len(src), len(out))
			}
		})
	}
}

// TestClientUsesSmallBatchesRaw: the producer's compressor is the wrapper.
func TestClientUsesSmallBatchesRaw(t *testing.T) {
	s, err := New(Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.client.OptValue(kgo.WithCompressor).(smallBatchesRaw); !ok {
		t.Fatalf("compressor is %T, want smallBatchesRaw", s.client.OptValue(kgo.WithCompressor))
	}
}
