package membership

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// Balanced: no member above 1.25 × the mean; every environment assigned to
// a member; the same answer whatever order the inputs come in.
func TestAssignIsBalancedAndDeterministic(t *testing.T) {
	for _, tc := range []struct{ envs, members int }{{200, 3}, {1000, 3}, {1000, 7}, {5000, 10}, {10, 3}, {3, 5}} {
		envs, members := ids("env", tc.envs), ids("gw", tc.members)
		got := Assign(envs, members, nil)
		if len(got) != tc.envs {
			t.Fatalf("%v: %d of %d environments assigned", tc, len(got), tc.envs)
		}
		load := map[string]int{}
		for _, m := range got {
			if !slices.Contains(members, m) {
				t.Fatalf("%v: assigned to %s, not a member", tc, m)
			}
			load[m]++
		}
		mean := float64(tc.envs) / float64(tc.members)
		for m, n := range load {
			if float64(n) > 1.25*mean && n > tc.envs/tc.members+1 {
				t.Errorf("%v: %s owns %d, mean %.1f", tc, m, n, mean)
			}
		}
		slices.Reverse(envs)
		slices.Reverse(members)
		if again := Assign(envs, members, nil); !maps.Equal(got, again) {
			t.Errorf("%v: the answer depends on the order of the inputs", tc)
		}
	}
}

// Adding or removing one member moves at most 1/N + 5 % of the
// environments (N the larger membership).
func TestAssignMovesLittle(t *testing.T) {
	for _, tc := range []struct{ envs, from, to int }{{1000, 2, 3}, {1000, 3, 2}, {200, 3, 4}, {1000, 5, 6}, {5000, 10, 9}, {1000, 1, 2}} {
		envs := ids("env", tc.envs)
		before, after := Assign(envs, ids("gw", tc.from), nil), Assign(envs, ids("gw", tc.to), nil)
		moved := 0
		for _, e := range envs {
			if before[e] != after[e] {
				moved++
			}
		}
		bound := 1/float64(max(tc.from, tc.to)) + 0.05
		if frac := float64(moved) / float64(tc.envs); frac > bound {
			t.Errorf("%d environments, %d → %d members: %.1f%% moved, bound %.1f%%", tc.envs, tc.from, tc.to, 100*frac, 100*bound)
		} else {
			t.Logf("%d environments, %d → %d members: %.1f%% moved (bound %.1f%%)", tc.envs, tc.from, tc.to, 100*frac, 100*bound)
		}
	}
}

// A pinned environment goes to its member while that member is live, and
// is assigned as any other while it is not; pins move nothing else much.
func TestAssignHonoursPins(t *testing.T) {
	envs, members := ids("env", 300), ids("gw", 3)
	free := Assign(envs, members, nil)
	pins := map[string]string{}
	for _, env := range envs[:30] {
		pins[env] = "gw-0002"
	}
	pins["env-0299"] = "gone"
	got := Assign(envs, members, pins)
	moved := 0
	for _, env := range envs {
		switch want, pinned := pins[env]; {
		case pinned && want != "gone" && got[env] != want:
			t.Errorf("%s pinned to %s went to %s", env, want, got[env])
		case pinned && want == "gone" && got[env] == "":
			t.Errorf("%s, pinned to a member that is not live, has no owner", env)
		case !pinned && got[env] != free[env]:
			moved++
		}
	}
	if moved > 30 {
		t.Errorf("30 pins moved %d other environments", moved)
	}
}
