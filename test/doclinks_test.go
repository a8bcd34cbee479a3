package e2e

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation checks need no services: they run in every `go test ./...`.

// TestDocLinks: every link from a Markdown file of the repository (README.md, docs/,
// deploy/, ...) to a local file or directory exists, and every #anchor names a heading of
// its target page (GitHub's heading ids). Links to http(s) and mailto are not followed.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	problems, checked, err := checkDocLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// README.md and docs/ link to each other dozens of times; far fewer means the
	// parser stopped seeing links, not that the docs lost them.
	if checked < 50 {
		t.Errorf("only %d local links found; the link parser is broken", checked)
	}
	t.Logf("%d local links checked", checked)
}

// TestDocLinksFindsBrokenOnes: the checker reports a missing file, a missing anchor in
// another page and in the same page, and accepts what GitHub accepts.
func TestDocLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\nSee [a](docs/a.md#one-function-walrelayemit), [b](docs/b.md), "+
		"[c](docs/a.md#nope), [d](#top), [e](#missing), [f](https://example.com/x.md), "+
		"[g](docs/a.md#section-1), `[h](inline/code.md)`.\n\n```\n[i](in/fence.md)\n# not a heading\n```\n")
	write("docs/a.md", "# A\n\n## One function: `walrelay.emit`\n\n## Section\n\n## Section\n\n[back](../README.md#top)\n")
	problems, checked, err := checkDocLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md: link docs/b.md: no such file",
		"README.md: link docs/a.md#nope: no heading with id \"nope\"",
		"README.md: link #missing: no heading with id \"missing\"",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if checked != 7 {
		t.Errorf("checked %d local links, want 7", checked)
	}
}

func TestHeadingID(t *testing.T) {
	for in, want := range map[string]string{
		"Tableless outbox (no table, no bloat; opt-in)":      "tableless-outbox-no-table-no-bloat-opt-in",
		"One function for every language: `walrelay.emit`":   "one-function-for-every-language-walrelayemit",
		"Exactly-once vs at-least-once":                      "exactly-once-vs-at-least-once",
		"UPDATE, DELETE, TRUNCATE":                           "update-delete-truncate",
		"Way A: `walrelay cutover` (Debezium keeps running)": "way-a-walrelay-cutover-debezium-keeps-running",
		"max_in_flight and Größe":                            "max_in_flight-and-größe",
	} {
		if got := headingID(in); got != want {
			t.Errorf("headingID(%q) = %q, want %q", in, got, want)
		}
	}
}

var (
	mdLink     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	skipDirs   = map[string]bool{".git": true, "node_modules": true, "bin": true}
	remoteLink = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkDocLinks walks root for *.md files and returns one line per broken local link,
// and how many local links it checked.
func checkDocLinks(root string) (problems []string, checked int, err error) {
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	ids := map[string]map[string]bool{} // file -> heading ids, parsed on demand
	idsOf := func(p string) (map[string]bool, error) {
		if m, ok := ids[p]; ok {
			return m, nil
		}
		_, heads, err := parseMarkdown(p)
		if err != nil {
			return nil, err
		}
		ids[p] = heads
		return heads, nil
	}
	for _, f := range files {
		links, _, err := parseMarkdown(f)
		if err != nil {
			return nil, 0, err
		}
		rel, _ := filepath.Rel(root, f)
		for _, l := range links {
			if remoteLink.MatchString(l) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if _, err := os.Stat(target); err != nil {
					problems = append(problems, fmt.Sprintf("%s: link %s: no such file", rel, l))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			heads, err := idsOf(target)
			if err != nil {
				return nil, 0, err
			}
			if !heads[anchor] {
				problems = append(problems, fmt.Sprintf("%s: link %s: no heading with id %q", rel, l, anchor))
			}
		}
	}
	return problems, checked, nil
}

// parseMarkdown returns the link targets of a Markdown file (outside fenced code blocks
// and code spans) and the ids GitHub gives its headings.
func parseMarkdown(path string) (links []string, ids map[string]bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	ids = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil {
			id := headingID(m[1])
			if n := seen[id]; n > 0 {
				ids[fmt.Sprintf("%s-%d", id, n)] = true
			} else {
				ids[id] = true
			}
			seen[id]++
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			links = append(links, m[1])
		}
	}
	return links, ids, sc.Err()
}

// headingID is GitHub's id for a heading: lower case, letters, digits, '-' and '_' kept,
// spaces become '-', everything else (punctuation, backticks) dropped.
func headingID(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestReadmeIsAFrontDoor: the README stays what a newcomer reads in five minutes (what
// it is, install, quick start, setup, guarantees and settings in short, the docs index);
// the manual lives in docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 12*1024 {
		t.Errorf("README.md is %d bytes, want at most 12 KiB: move the detail to docs/", len(b))
	}
	for _, h := range []string{"## Install", "## Quick start", "## Writing an event", "## Postgres setup", "## Guarantees in short", "## Configuration in short", "## Documentation"} {
		if !strings.Contains(string(b), "\n"+h+"\n") {
			t.Errorf("README.md has no %q section", h)
		}
	}
	if strings.Contains(string(b), "releases/download") {
		t.Error("README.md shows downloads of a release, and none is published yet")
	}
}
