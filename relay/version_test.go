package relay

import (
	"fmt"
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	vcs := func(rev string, modified bool) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: fmt.Sprint(modified)}}
	}
	const rev = "5ac03b4eb9204c1f6b0a2f8a4b1d0e3c9a8b7c6d"
	for _, tc := range []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		wantV, wantR      string
	}{
		{"make build (-X both)", "v1.2.3-4-gabc", "abc", &debug.BuildInfo{Settings: vcs(rev, false)}, "v1.2.3-4-gabc", "abc"},
		{"go install module@version", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", "unknown"},
		{"go build in a checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, false)}, rev[:12], rev},
		{"go build in a modified checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, true)}, rev[:12] + "-dirty", rev},
		{"nothing known", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "unknown"},
		{"no build info", "", "", nil, "dev", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := buildVersion(tc.version, tc.revision, tc.bi)
			if v != tc.wantV || r != tc.wantR {
				t.Errorf("buildVersion = %q, %q; want %q, %q", v, r, tc.wantV, tc.wantR)
			}
		})
	}
}
