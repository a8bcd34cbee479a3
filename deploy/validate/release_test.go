package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReleasePlatforms: the platforms of make release live in one place, RELEASE_PLATFORMS
// in the Makefile (test/env/release.sh takes them from it), and the README's Install
// section and docs/deployment.md name exactly those.
func TestReleasePlatforms(t *testing.T) {
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m := regexp.MustCompile(`(?m)^RELEASE_PLATFORMS :?= *(.+)$`).FindStringSubmatch(read("Makefile"))
	if m == nil {
		t.Fatal("Makefile has no RELEASE_PLATFORMS")
	}
	platforms := strings.Fields(m[1])
	if script := read("test/env/release.sh"); !strings.Contains(script, `"${PLATFORMS:?`) {
		t.Error("test/env/release.sh must take PLATFORMS from make release, not list its own")
	}
	platform := regexp.MustCompile(`\b(linux|darwin|windows|freebsd)/(amd64|arm64|386|arm|ppc64le|s390x|riscv64)\b`)
	for file, section := range map[string]string{"README.md": "## Install", "docs/deployment.md": "## Release artefacts"} {
		text := read(file)
		i := strings.Index(text, section+"\n")
		if i < 0 {
			t.Errorf("%s has no %q section", file, section)
			continue
		}
		text = text[i+len(section):]
		if j := strings.Index(text, "\n## "); j >= 0 {
			text = text[:j]
		}
		named := map[string]bool{}
		for _, p := range platform.FindAllString(text, -1) {
			named[p] = true
		}
		for _, p := range platforms {
			if !named[p] {
				t.Errorf("%s %s does not name %s (RELEASE_PLATFORMS)", file, section, p)
			}
			delete(named, p)
		}
		for p := range named {
			t.Errorf("%s %s names %s, which RELEASE_PLATFORMS does not build", file, section, p)
		}
	}
}
