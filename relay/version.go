package relay

import "runtime/debug"

// Version is set at build time by `make build`:
// -ldflags "-X github.com/walrelay/walrelay/relay.Version=$(git describe --tags --always --dirty)".
// Left at "dev", walrelay reports the VCS revision Go embedded instead.
var Version = "dev"

// Revision is the VCS revision, set by `make build` like Version (-X ...relay.Revision=$(git rev-parse HEAD)).
// Left empty, walrelay uses the revision Go embedded, if any.
var Revision = ""

// BuildVersion returns the version set at build time (Version, see the
// Makefile's build target), else the module version Go recorded (a binary
// made by `go install <module>@<version>`), else the VCS revision Go
// embedded (a plain `go build` in a checkout); and the revision (Revision,
// else Go's, else "unknown").
func BuildVersion() (version, revision string) {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(Version, Revision, bi)
}

func buildVersion(version, revision string, bi *debug.BuildInfo) (string, string) {
	dirty := false
	if bi != nil {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && revision == "":
				revision = s.Value
			case s.Key == "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if version == "" || version == "dev" {
		switch {
		case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
			version = bi.Main.Version
		case revision != "":
			version = revision[:min(len(revision), 12)]
			if dirty {
				version += "-dirty"
			}
		default:
			version = "dev"
		}
	}
	if revision == "" {
		revision = "unknown"
	}
	return version, revision
}
