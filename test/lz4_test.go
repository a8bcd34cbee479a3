package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The verifier reads tens of thousands of records that walrelay wrote in small batches,
// zstd by default and lz4 in some of TestCrashKill9's runs. franz-go's lz4 reader takes a 4 MiB block buffer from a sync.Pool per batch,
// and under -race sync.Pool deliberately drops items, so every few batches allocate
// (and the race runtime shadows) 4 MiB: reading a crash test's topics cost a minute of
// CPU. testDecompressor decodes lz4 frames into one growing buffer instead and leaves
// the other codecs to franz-go. Values are compared byte for byte with the database, so
// a decoding mistake could not pass unnoticed.

type testDecompressor struct{ def kgo.Decompressor }

func newTestDecompressor() kgo.Decompressor {
	return testDecompressor{def: kgo.DefaultDecompressor()}
}

func (d testDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec != kgo.CodecLz4 {
		return d.def.Decompress(src, codec)
	}
	return lz4Frames(src)
}

var errLZ4 = errors.New("malformed lz4 data")

// lz4Frames decodes one or more concatenated LZ4 frames.
func lz4Frames(src []byte) ([]byte, error) {
	var out []byte
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, fmt.Errorf("%w: short frame", errLZ4)
		}
		magic := binary.LittleEndian.Uint32(src)
		if magic&0xFFFFFFF0 == 0x184D2A50 { // skippable frame
			if len(src) < 8 {
				return nil, fmt.Errorf("%w: short skippable frame", errLZ4)
			}
			n := 8 + int(binary.LittleEndian.Uint32(src[4:]))
			if n > len(src) {
				return nil, fmt.Errorf("%w: short skippable frame", errLZ4)
			}
			src = src[n:]
			continue
		}
		if magic != 0x184D2204 || len(src) < 7 {
			return nil, fmt.Errorf("%w: bad frame header", errLZ4)
		}
		flg := src[4]
		i := 6 // magic, FLG, BD
		if flg&0x08 != 0 {
			i += 8 // content size
		}
		if flg&0x01 != 0 {
			i += 4 // dictionary id
		}
		i++ // header checksum
		frameStart := len(out)
		for {
			if i+4 > len(src) {
				return nil, fmt.Errorf("%w: truncated block size", errLZ4)
			}
			bs := binary.LittleEndian.Uint32(src[i:])
			i += 4
			if bs == 0 { // end mark
				break
			}
			n := int(bs & 0x7FFFFFFF)
			if i+n > len(src) {
				return nil, fmt.Errorf("%w: truncated block", errLZ4)
			}
			var err error
			if bs&0x80000000 != 0 {
				out = append(out, src[i:i+n]...)
			} else if out, err = lz4Block(out, src[i:i+n], frameStart); err != nil {
				return nil, err
			}
			i += n
			if flg&0x10 != 0 {
				i += 4 // block checksum
			}
		}
		if flg&0x04 != 0 {
			i += 4 // content checksum
		}
		if i > len(src) {
			return nil, fmt.Errorf("%w: truncated checksum", errLZ4)
		}
		src = src[i:]
	}
	return out, nil
}

// lz4Block appends the decoded LZ4 block src to dst. Matches may reach back into earlier
// blocks of the same frame (dst[floor:]), as linked blocks do.
func lz4Block(dst, src []byte, floor int) ([]byte, error) {
	length := func(i, n int) (int, int, error) {
		if n != 15 {
			return i, n, nil
		}
		for {
			if i >= len(src) {
				return 0, 0, fmt.Errorf("%w: truncated length", errLZ4)
			}
			b := src[i]
			i++
			n += int(b)
			if b != 255 {
				return i, n, nil
			}
		}
	}
	for i := 0; i < len(src); {
		token := src[i]
		i++
		var lit int
		var err error
		if i, lit, err = length(i, int(token>>4)); err != nil {
			return nil, err
		}
		if i+lit > len(src) {
			return nil, fmt.Errorf("%w: literals past the end", errLZ4)
		}
		dst = append(dst, src[i:i+lit]...)
		i += lit
		if i == len(src) {
			break // the last sequence has literals only
		}
		if i+2 > len(src) {
			return nil, fmt.Errorf("%w: truncated offset", errLZ4)
		}
		off := int(src[i]) | int(src[i+1])<<8
		i += 2
		var ml int
		if i, ml, err = length(i, int(token&15)); err != nil {
			return nil, err
		}
		ml += 4
		start := len(dst) - off
		if off == 0 || start < floor {
			return nil, fmt.Errorf("%w: offset %d out of range", errLZ4, off)
		}
		if off >= ml {
			dst = append(dst, dst[start:start+ml]...)
			continue
		}
		for k := range ml { // overlapping match: byte by byte
			dst = append(dst, dst[start+k])
		}
	}
	return dst, nil
}

// TestLZ4Decoder checks testDecompressor against franz-go's own lz4 compressor. It needs
// no services.
func TestLZ4Decoder(t *testing.T) {
	comp, err := kgo.DefaultCompressor(kgo.Lz4Compression())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{
		{},
		[]byte("a"),
		bytes.Repeat([]byte("ab"), 100_000),
		bytes.Repeat([]byte{0}, 5<<20), // more than one 4 MiB block
	}
	var mixed bytes.Buffer
	for mixed.Len() < 300_000 {
		fmt.Fprintf(&mixed, `{"seq": %d, "note": "café %s"}`, r.IntN(1000), bytes.Repeat([]byte{byte('a' + r.IntN(26))}, r.IntN(40)))
		if r.IntN(10) == 0 {
			b := make([]byte, r.IntN(300))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			mixed.Write(b)
		}
	}
	inputs = append(inputs, mixed.Bytes())
	d := newTestDecompressor()
	for _, in := range inputs {
		var buf bytes.Buffer
		frame, codec := comp.Compress(&buf, in)
		if codec != kgo.CodecLz4 {
			t.Fatalf("compressor used codec %d", codec)
		}
		got, err := d.Decompress(frame, kgo.CodecLz4)
		if err != nil {
			t.Fatalf("decode %d bytes: %v", len(in), err)
		}
		if !bytes.Equal(got, in) {
			t.Fatalf("decode %d bytes: got %d bytes, mismatch", len(in), len(got))
		}
	}
}
