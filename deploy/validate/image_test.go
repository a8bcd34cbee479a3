package validate

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dockerfileStage returns the instructions of the last stage of deploy/<name> (from its
// FROM on), one per line with continuations joined and comments dropped.
func dockerfileStage(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var (
		lines []string
		cur   string
	)
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			cur += strings.TrimSpace(c) + " "
			continue
		}
		lines = append(lines, strings.Join(strings.Fields(cur+l), " "))
		cur = ""
	}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	if last < 0 {
		t.Fatalf("deploy/%s has no FROM", name)
	}
	return lines[last:]
}

// TestImageDefinitionsAgree: deploy/Dockerfile (from source, with network) and
// deploy/Containerfile (make image, offline) must produce the same final image.
func TestImageDefinitionsAgree(t *testing.T) {
	docker := dockerfileStage(t, "Dockerfile")
	container := dockerfileStage(t, "Containerfile")
	// The only difference allowed: where the root filesystem is copied from.
	i := slices.Index(docker, "COPY --from=rootfs /rootfs/ /")
	j := slices.Index(container, "COPY rootfs/ /")
	if i < 0 || j < 0 {
		t.Fatalf("final stages must copy the root filesystem with COPY --from=rootfs /rootfs/ / (Dockerfile) and COPY rootfs/ / (Containerfile):\n%q\n%q", docker, container)
	}
	docker[i], container[j] = "COPY <rootfs>", "COPY <rootfs>"
	if !slices.Equal(docker, container) {
		t.Errorf("final stages differ:\nDockerfile:    %q\nContainerfile: %q", docker, container)
	}
	for _, want := range []string{"FROM scratch", "USER 65532:65532", "EXPOSE 9187", `ENTRYPOINT ["/walrelay"]`, `CMD ["run"]`} {
		if !slices.Contains(container, want) {
			t.Errorf("deploy/Containerfile lacks %s", want)
		}
	}
	// Both root filesystems hold the same user entry and CA bundle path.
	script, err := os.ReadFile(filepath.Join(repoRoot, "test", "env", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"walrelay:x:65532:65532:walrelay:/:/sbin/nologin", "walrelay:x:65532:", "/etc/ssl/certs/ca-certificates.crt", "make build VERSION="} {
		if !strings.Contains(string(script), want) || !strings.Contains(string(dockerfile), want) {
			t.Errorf("test/env/image.sh and deploy/Dockerfile must both contain %q", want)
		}
	}
}

// TestImageBuildLeavesBinWalrelay runs test/env/image.sh (make image) with a stand-in
// buildah that keeps the binary of the build context: the image gets a binary stamped with
// the VERSION given, and bin/walrelay (make build's output, the developer's) is left alone.
func TestImageBuildLeavesBinWalrelay(t *testing.T) {
	stub, out := t.TempDir(), t.TempDir()
	buildah := `#!/bin/sh
# Stand-in for buildah: bud keeps the context's binary, inspect prints an image id.
case "$1" in
bud) for last; do :; done; cp "$last/rootfs/walrelay" "$STUB_OUT/walrelay" ;;
inspect) echo stub-image-id ;;
esac
`
	if err := os.WriteFile(filepath.Join(stub, "buildah"), []byte(buildah), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(repoRoot, "bin", "walrelay")
	before := fileDigest(t, bin)
	cmd := exec.Command("bash", filepath.Join(repoRoot, "test", "env", "image.sh"))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "PATH="+stub+":"+os.Getenv("PATH"), "STUB_OUT="+out, "TMPDIR="+t.TempDir(),
		"VERSION=0.0.0-validate", "IMAGE=walrelay/walrelay-validate")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("image.sh: %v\n%s", err, b)
	}
	if after := fileDigest(t, bin); after != before {
		t.Errorf("make image changed bin/walrelay (%s before, %s after): the image build must use its own output path", before, after)
	}
	v, err := exec.Command(filepath.Join(out, "walrelay"), "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "walrelay 0.0.0-validate ") {
		t.Errorf("the image's binary prints %q (%v), want walrelay 0.0.0-validate", v, err)
	}
}

// fileDigest is the SHA-256 of a file, or "absent".
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
