#!/usr/bin/env bash
# The image step of `make test`: builds the image exactly as `make image` does (test/env/image.sh),
# in a buildah storage of its own, and checks it without running a container (podman/crun
# cannot set rlimits in some sandboxes): the config buildah recorded (entrypoint, cmd, user,
# exposed port, OCI labels), the files in the image (nothing but the binary, the CA bundle and
# passwd/group), and the image's own entrypoint + cmd executed with chroot in the image's root
# filesystem as user 65532 — which proves the binary is static and prints the labelled version.
# Fails (never skips) when buildah is missing and cannot be installed.
#
#   WALRELAY_TEST_DIR  buildah storage goes to $WALRELAY_TEST_DIR/buildah (removed afterwards)
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=image-test
cd "$WALRELAY_ROOT"
is_root || die "the image test needs root (buildah storage, mount and chroot)"

IMAGE=walrelay/walrelay-test
VERSION="0.0.0-test.$(git rev-parse --short HEAD)"
export IMAGE VERSION
export BUILDAH_ROOT="$(abs_path "$WALRELAY_TEST_DIR")/buildah"
buildah=(buildah --root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run")
work="$(mktemp -d "${TMPDIR:-/tmp}/walrelay-image-test.XXXXXX")"
ctr=""
cleanup() {
	if [ -n "$ctr" ]; then
		"${buildah[@]}" umount "$ctr" >/dev/null 2>&1 || true
		"${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true
	fi
	"${buildah[@]}" rmi --all --force >/dev/null 2>&1 || true
	rm -rf "$work" "$BUILDAH_ROOT"
}
trap cleanup EXIT

passed=0
failed=0
check() { # check NAME GOT WANT
	if [ "$2" = "$3" ]; then
		passed=$((passed + 1))
		log "ok   $1: $2"
	else
		failed=$((failed + 1))
		log "FAIL $1: got '$2', want '$3'"
	fi
}

export IMAGE_ID_FILE="$work/id"
bash "$WALRELAY_ENV_DIR/image.sh"
id="$(cat "$IMAGE_ID_FILE")"

fmt() { "${buildah[@]}" inspect --type image --format "$1" "$id"; }
label_version="$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')"
# image.sh builds its own binary (bin/ is left alone); the copied-out binary below must
# report the labelled version.
check "label version = VERSION given to make build" "$label_version" "$VERSION"
check "label revision" "$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}')" "$(git rev-parse HEAD)"
check "label title" "$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.title"}}')" "walrelay"
# (buildah 1.28's templates have no json function: one element per line, then joined.)
list() { fmt "{{range $1}}{{println .}}{{end}}" | paste -sd '|'; }
check "entrypoint" "$(list .OCIv1.Config.Entrypoint)" "/walrelay"
check "cmd" "$(list .OCIv1.Config.Cmd)" "run"
check "user" "$(fmt '{{.OCIv1.Config.User}}')" "65532:65532"
check "exposed ports" "$(fmt '{{range $p, $_ := .OCIv1.Config.ExposedPorts}}{{println $p}}{{end}}' | paste -sd '|')" "9187/tcp"
check "tags" "$("${buildah[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' --filter "id=$id" | sort | tr '\n' ' ')" \
	"localhost/$IMAGE:$label_version localhost/$IMAGE:latest "

ctr="$("${buildah[@]}" from --pull-never "$id")"
mnt="$("${buildah[@]}" mount "$ctr")"
check "files in the image" "$(cd "$mnt" && find . -type f -o -type l | sort | tr '\n' ' ')" \
	"./etc/group ./etc/passwd ./etc/ssl/certs/ca-certificates.crt ./walrelay "
check "CA bundle = host's" "$(cmp -s "$mnt/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt && echo same)" same
check "passwd names user 65532" "$(awk -F: '$3 == 65532 {print $1 ":" $4}' "$mnt/etc/passwd")" "walrelay:65532"
check "binary mode" "$(stat -c '%a %u' "$mnt/walrelay")" "755 0"

# The binary copied out of the image.
cp "$mnt/walrelay" "$work/walrelay"
check "copied-out binary: version" "$("$work/walrelay" version | awk '{print $1, $2}')" "walrelay $label_version"

# The image's own entrypoint and cmd, run inside its root filesystem (nothing else there: a
# dynamically linked binary would not start) as the image's user, with an empty environment.
mapfile -t entry < <(fmt '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}')
mapfile -t cmd < <(fmt '{{range .OCIv1.Config.Cmd}}{{println .}}{{end}}')
user="$(fmt '{{.OCIv1.Config.User}}')"
chroot="$(command -v chroot)" || die "chroot is missing (coreutils)"
check "in-image version" "$(env -i "$chroot" --userspec="$user" "$mnt" "${entry[@]}" version | awk '{print $1, $2}')" "walrelay $label_version"
set +e
out="$(env -i "$chroot" --userspec="$user" "$mnt" "${entry[@]}" "${cmd[@]}" 2>&1)"
rc=$?
set -e
# No DSN configured: `walrelay run` must refuse with the config exit code and name the key.
check "in-image entrypoint+cmd without config: exit code" "$rc" 2
check "in-image entrypoint+cmd without config: names postgres-dsn" \
	"$(grep -c 'postgres-dsn: required' <<<"$out")" 1

echo "image: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
