#!/usr/bin/env bash
# `make image`: the walrelay container image, built without network access. buildah builds
# deploy/Containerfile (FROM scratch) from a context holding a static binary (built by
# `make build` into the context, never into bin/), the host's CA bundle and a passwd/group
# entry for the non-root user 65532. deploy/Dockerfile builds the same final image from
# source where the network is reachable.
#
#   VERSION       stamped into the binary (make build VERSION=...) and the image's
#                 org.opencontainers.image.version label; default: git describe
#   IMAGE         image name (default walrelay/walrelay); tagged IMAGE:VERSION and IMAGE:latest
#   BINARY, ARCH  optional (make release): put this prebuilt linux/ARCH binary, stamped with
#                 VERSION, into the image instead of building one, build the image for
#                 linux/ARCH and tag it IMAGE:VERSION-ARCH only
#   SOURCE_DATE_EPOCH  optional: the image's created time and file times (reproducible)
#   BUILDAH_ROOT  optional: keep buildah's storage under this directory instead of the
#                 system's (the image test uses its own, wiped with the test state)
#   IMAGE_ID_FILE optional: write the built image ID to this file
#
# Installs buildah with apt-get when it is missing (as root); fails when it cannot.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=image
cd "$WALRELAY_ROOT"

IMAGE="${IMAGE:-walrelay/walrelay}"
VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

if ! command -v buildah >/dev/null; then
	is_root || die "buildah is missing; install it (apt-get install buildah) or run as root"
	command -v apt-get >/dev/null || die "buildah is missing and there is no apt-get here; install it by hand"
	log "installing: buildah"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || log "apt-get update reported errors; trying the install anyway"
	apt-get install -y -qq --no-install-recommends buildah >/dev/null
fi
if [ ! -s "$CA_BUNDLE" ]; then
	is_root && command -v apt-get >/dev/null || die "$CA_BUNDLE is missing; install ca-certificates"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null
	[ -s "$CA_BUNDLE" ] || die "$CA_BUNDLE is still missing after installing ca-certificates"
fi

buildah=(buildah)
if [ -n "${BUILDAH_ROOT:-}" ]; then
	buildah+=(--root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run")
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/walrelay-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/etc/ssl/certs"
bud_args=()
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	bud_args+=(--timestamp "$SOURCE_DATE_EPOCH")
fi
tags=("$IMAGE:$VERSION" "$IMAGE:latest")
if [ -n "${BINARY:-}" ]; then
	[ -n "${ARCH:-}" ] || die "BINARY needs ARCH (the binary's linux architecture)"
	# A binary of another architecture cannot run here: the caller stamped it with VERSION.
	built="$VERSION"
	bud_args+=(--os linux --arch "$ARCH")
	tags=("$IMAGE:$VERSION-$ARCH")
	install -m 0755 "$BINARY" "$ctx/rootfs/walrelay"
else
	# The binary goes into the context, not bin/: make image leaves make build's output alone.
	log "make build VERSION=$VERSION"
	make -s build VERSION="$VERSION" BIN="$ctx/walrelay"
	# The label carries what the binary reports, so image and binary never disagree.
	built="$("$ctx/walrelay" version | awk '{print $2}')"
	[ -n "$built" ] || die "the built binary's version printed no version"
	if [ "$built" != "$VERSION" ]; then
		log "WARNING: the binary reports version '$built', not '$VERSION': make build does not stamp VERSION"
	fi
	tags=("$IMAGE:$built" "$IMAGE:latest")
	install -m 0755 "$ctx/walrelay" "$ctx/rootfs/walrelay"
fi
install -m 0644 "$CA_BUNDLE" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
echo 'walrelay:x:65532:65532:walrelay:/:/sbin/nologin' >"$ctx/rootfs/etc/passwd"
echo 'walrelay:x:65532:' >"$ctx/rootfs/etc/group"
chmod 0644 "$ctx/rootfs/etc/passwd" "$ctx/rootfs/etc/group"
cp deploy/Containerfile "$ctx/Containerfile"

log "buildah bud ${tags[*]}"
tag_args=()
for t in "${tags[@]}"; do tag_args+=(-t "$t"); done
"${buildah[@]}" bud --quiet --layers=false "${bud_args[@]}" -f "$ctx/Containerfile" \
	--build-arg VERSION="$built" --build-arg REVISION="$REVISION" \
	"${tag_args[@]}" "$ctx" >/dev/null
id="$("${buildah[@]}" inspect --type image --format '{{.FromImageID}}' "${tags[0]}")"
[ -n "${IMAGE_ID_FILE:-}" ] && echo "$id" >"$IMAGE_ID_FILE"
log "built ${tags[*]} ($id)"
