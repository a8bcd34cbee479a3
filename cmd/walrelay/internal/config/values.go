package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

type stringVal struct{ p *string }

func (v stringVal) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v stringVal) Set(s string) error { *v.p = s; return nil }

type listVal struct{ p *[]string }

func (v listVal) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}
func (v listVal) Set(s string) error {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	*v.p = out
	return nil
}

type intVal struct{ p *int }

func (v intVal) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}
func (v intVal) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v.p = n
	return nil
}

// sizeVal is a byte size: plain bytes (67108864) or a number with a unit,
// KiB/MiB/GiB (powers of 1024) or KB/MB/GB (powers of 1000); B is bytes.
// Flags, env and YAML all parse through it, and String prints the form the
// docs/configuration.md shows (64MiB).
type sizeVal struct{ p *int }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first, so "MiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

func (v sizeVal) String() string {
	if v.p == nil {
		return ""
	}
	return formatSize(int64(*v.p))
}

func (v sizeVal) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}

// formatSize prints n with the largest binary unit that divides it exactly.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseSize reads a non-negative byte size such as 64MiB, 512KiB, 1MB or
// 67108864; a result that does not fit in an int is an error.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return 0, fmt.Errorf("%q is not a size (bytes, or a whole number with KiB, MiB, GiB, KB, MB or GB, e.g. 64MiB)", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if n > int64(math.MaxInt)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

type boolVal struct{ p *bool }

func (v boolVal) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatBool(*v.p)
}
func (v boolVal) IsBoolFlag() bool { return true }
func (v boolVal) Set(s string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v.p = b
	return nil
}

type mapVal struct {
	m   map[string]string
	key string
}

func (v mapVal) String() string {
	if v.m == nil {
		return ""
	}
	return v.m[v.key]
}
func (v mapVal) Set(s string) error {
	v.m[v.key] = strings.TrimSpace(s)
	return nil
}

type durVal struct{ p *time.Duration }

func (v durVal) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}
func (v durVal) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "0" {
		*v.p = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration like 10s or 500ms", s)
	}
	*v.p = d
	return nil
}

// ageVal is a duration in Go syntax (90m, 72h) or with a leading number of
// days (3d, 1d12h).
type ageVal struct{ p *time.Duration }

func (v ageVal) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return v.p.String()
}

func (v ageVal) Set(s string) error {
	d, err := parseAge(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}

func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("%q is not a duration like 90m, 72h or 3d", s)
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	n, err := strconv.ParseUint(days, 10, 32)
	if err != nil || n > 36500 {
		return 0, bad
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 {
			return 0, bad
		}
		d += r
	}
	return d, nil
}

// lsnVal is a WAL position in Postgres' form, 0/1A2B3C4.
type lsnVal struct{ p *pglogrepl.LSN }

func (v lsnVal) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return v.p.String()
}
func (v lsnVal) Set(s string) error {
	l, err := pglogrepl.ParseLSN(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an LSN like 0/1A2B3C4", s)
	}
	*v.p = l
	return nil
}
