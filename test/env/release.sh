#!/usr/bin/env bash
# `make release`: the release artefacts in dist/ (wiped first), built without network access
# but for the Go module proxy (the SBOM tool and the helm CLI are installed through it once,
# then cached):
#
#   walrelay_<v>_<os>_<arch>.tar.gz          the static binary (CGO_ENABLED=0, -trimpath,
#                                            stripped, the version stamped), LICENSE,
#                                            README.md, CHANGELOG.md
#   walrelay_<v>_<os>_<arch>.sbom.cdx.json   CycloneDX SBOM of that binary (cyclonedx-gomod bin:
#                                            the modules linked into it, with their hashes)
#   walrelay_<v>_image.oci.tar               the image for every linux platform, one OCI index
#   walrelay-<chart version>.tgz             the Helm chart, appVersion = VERSION
#   SHA256SUMS                               sha256sum -c SHA256SUMS checks all of the above
#
# <v> is VERSION without its leading v (v1.2.3 -> 1.2.3). The image is also left in the local
# buildah storage as IMAGE:VERSION (a manifest list of IMAGE:VERSION-<arch>); push it with
#   buildah manifest push --all IMAGE:VERSION docker://<registry>/walrelay/walrelay:VERSION
# Binaries, archives and SBOMs are reproducible: the same commit and Go give the same bytes.
#
# Set by the Makefile (one place for the platforms and the version flags):
#   VERSION, REVISION, LDFLAGS (the -X flags of make build), PLATFORMS (os/arch list)
# Knobs: DIST (default dist), IMAGE (default walrelay/walrelay), RELEASE_IMAGE=0 (no image:
# no root or buildah needed), BUILDAH_ROOT (as in image.sh), WALRELAY_CACHE (tool cache,
# default ~/.cache/walrelay).
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WALRELAY_LOG_TAG=release
cd "$WALRELAY_ROOT"

: "${VERSION:?VERSION is set by make release (git describe)}"
: "${PLATFORMS:?PLATFORMS is set by make release (RELEASE_PLATFORMS)}"
: "${LDFLAGS:?LDFLAGS is set by make release}"
DIST="$(abs_path "${DIST:-dist}")"
IMAGE="${IMAGE:-walrelay/walrelay}"
CYCLONEDX_VERSION=v1.10.0
# The helm CLI of the version deploy/validate renders the chart with.
HELM_VERSION="$(cd deploy/validate && go list -m -f '{{.Version}}' helm.sh/helm/v4)"
TOOLS="$(abs_path "${WALRELAY_CACHE:-$HOME/.cache/walrelay}")/tools"

v="${VERSION#v}"
if [[ ! "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	log "VERSION $VERSION is no release tag (vX.Y.Z): building a snapshot"
fi
# A chart version is SemVer 2: the release's, or 0.0.0-<VERSION> for a snapshot.
if [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	chart_version="$v"
else
	chart_version="0.0.0-$v"
fi
if [ "${RELEASE_IMAGE:-1}" != 0 ] && ! is_root; then
	die "the image needs root (buildah); run as root or with RELEASE_IMAGE=0"
fi

# tool NAME MODULE@VERSION: install a Go tool once into the cache, print its path.
tool() {
	local dir="$TOOLS/$1-${2##*@}"
	if [ ! -x "$dir/$1" ]; then
		# The first release on a machine builds the tool from source (a few minutes on 2
		# cores, helm most); later ones reuse it.
		log "go install $2: building $1 from source once (a few minutes on 2 cores; kept in $dir)"
		GOBIN="$dir" GOOS= GOARCH= CGO_ENABLED=0 go install "$2" >&2 &
		local pid=$! start=$SECONDS next=$((SECONDS + 15))
		while kill -0 "$pid" 2>/dev/null; do
			sleep 1
			if [ "$SECONDS" -ge "$next" ]; then
				log "still building $1 ($((SECONDS - start)) s)"
				next=$((SECONDS + 15))
			fi
		done
		wait "$pid" || die "go install $2 failed"
		log "built $1 in $((SECONDS - start)) s"
	fi
	echo "$dir/$1"
}
cyclonedx="$(tool cyclonedx-gomod "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$CYCLONEDX_VERSION")"
helm="$(tool helm "helm.sh/helm/v4/cmd/helm@$HELM_VERSION")"

rm -rf "$DIST"
mkdir -p "$DIST/build"
# Archive entries and image layers carry the commit's time, not the build's.
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct HEAD)"
export SOURCE_DATE_EPOCH
host="$(go env GOOS)/$(go env GOARCH)"
linux_arches=()

for p in $PLATFORMS; do
	os="${p%/*}" arch="${p#*/}"
	name="walrelay_${v}_${os}_${arch}"
	dir="$DIST/build/$name"
	mkdir -p "$dir"
	log "go build $p"
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -ldflags "-s -w $LDFLAGS" -o "$dir/walrelay" ./cmd/walrelay
	# What Go recorded about the build: static, trimmed, this platform (with -trimpath it
	# records no -ldflags: the binary of this machine's platform is run for its version).
	info="$(go version -m "$dir/walrelay")"
	for want in "CGO_ENABLED=0" "-trimpath=true" "GOOS=$os" "GOARCH=$arch"; do
		grep -qF -- "$want" <<<"$info" || die "$name: go version -m does not show $want:"$'\n'"$info"
	done
	grep -qaF -- "$VERSION" "$dir/walrelay" || die "$name: the binary does not hold the version $VERSION"
	if [ "$p" = "$host" ]; then
		got="$("$dir/walrelay" version | awk '{print $2}')"
		[ "$got" = "$VERSION" ] || die "$name: walrelay version says $got, want $VERSION"
	fi
	cp LICENSE README.md CHANGELOG.md "$dir/"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$dir" -cf - walrelay LICENSE README.md CHANGELOG.md | gzip -9n >"$DIST/$name.tar.gz"
	GOOS="$os" GOARCH="$arch" "$cyclonedx" bin -json -std -noserial -notimestamp -version "$VERSION" \
		-output "$DIST/$name.sbom.cdx.json" "$dir/walrelay"
	[ "$os" = linux ] && linux_arches+=("$arch")
done

if [ "${RELEASE_IMAGE:-1}" != 0 ] && [ "${#linux_arches[@]}" -gt 0 ]; then
	buildah=(buildah)
	if [ -n "${BUILDAH_ROOT:-}" ]; then
		buildah+=(--root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run")
	fi
	for arch in "${linux_arches[@]}"; do
		BINARY="$DIST/build/walrelay_${v}_linux_${arch}/walrelay" ARCH="$arch" IMAGE="$IMAGE" VERSION="$VERSION" \
			IMAGE_ID_FILE="$DIST/build/image-$arch" bash "$WALRELAY_ENV_DIR/image.sh"
	done
	# A list or an image left under the name by an earlier run or make image goes first.
	"${buildah[@]}" manifest rm "$IMAGE:$VERSION" >/dev/null 2>&1 || "${buildah[@]}" rmi "$IMAGE:$VERSION" >/dev/null 2>&1 || true
	"${buildah[@]}" manifest create "$IMAGE:$VERSION" >/dev/null
	for arch in "${linux_arches[@]}"; do
		"${buildah[@]}" manifest add "$IMAGE:$VERSION" "containers-storage:$(cat "$DIST/build/image-$arch")" >/dev/null
	done
	got="$("${buildah[@]}" manifest inspect "$IMAGE:$VERSION" | grep -o '"architecture": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/' | sort | paste -sd ' ')"
	want="$(printf '%s\n' "${linux_arches[@]}" | sort | paste -sd ' ')"
	[ "$got" = "$want" ] || die "manifest list $IMAGE:$VERSION has architectures '$got', want '$want'"
	# An OCI layout, archived with fixed times and owners (buildah's oci-archive writes the
	# time of the push into the tar): the same commit gives the same archive.
	"${buildah[@]}" manifest push --all --format oci --quiet "$IMAGE:$VERSION" "oci:$DIST/build/oci:$VERSION" >/dev/null
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$DIST/build/oci" -cf "$DIST/walrelay_${v}_image.oci.tar" oci-layout index.json blobs
	log "image $IMAGE:$VERSION ($want) in the local buildah storage and dist/walrelay_${v}_image.oci.tar"
fi

log "helm package (version $chart_version, appVersion $VERSION)"
"$helm" package deploy/helm/walrelay --version "$chart_version" --app-version "$VERSION" -d "$DIST" >/dev/null
"$helm" lint --strict "$DIST/walrelay-$chart_version.tgz" >/dev/null

rm -rf "$DIST/build"
(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum >SHA256SUMS)
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
log "release $VERSION in $DIST:"
(cd "$DIST" && ls -l --time-style=+ | awk 'NR > 1 {print "  " $5 "\t" $NF}' && echo && cat SHA256SUMS) >&2
