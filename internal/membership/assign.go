package membership

import (
	"cmp"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// maxLoadFactor bounds any member's share: no member owns more than 1.25 ×
// the mean, whatever the hashes say.
const maxLoadFactor = 1.25

// PinLabel is the environment label that pins an environment to a member
// (its SG_MEMBER_ID): it goes to that member whenever the member is live,
// whatever the hashes and the load bound say, and is assigned as any other
// while it is not.
const PinLabel = "storage-gateway.dcm-project.io/member"

// Assign gives each environment to one of members by rendezvous
// (highest-random-weight) hashing with bounded loads: an environment goes
// to the member with the highest weight for it that still has room.
// Environments pinned (pins: environment → member) to a live member go
// there first and count towards its load. Every replica computes the same
// answer from the same ids, whatever their order. With plain rendezvous,
// adding or removing one of N members moves only the environments that
// member gains or loses (1/N of them); the load bound moves a few more,
// measured in assign_test.go.
func Assign(environments, members []string, pins map[string]string) map[string]string {
	out := make(map[string]string, len(environments))
	if len(members) == 0 {
		return out
	}
	members = slices.Sorted(slices.Values(members))
	envs := slices.Sorted(slices.Values(environments))
	mean := float64(len(envs)) / float64(len(members))
	// Never below the least that fits everyone (a few environments on many
	// members).
	limit := max(int(math.Floor(maxLoadFactor*mean)), int(math.Ceil(mean)))
	load := make(map[string]int, len(members))
	for _, env := range envs {
		if m, ok := pins[env]; ok && slices.Contains(members, m) {
			out[env] = m
			load[m]++
		}
	}
	type ranked struct {
		member string
		weight uint64
	}
	ranking := make([]ranked, len(members))
	for _, env := range envs {
		if _, pinned := out[env]; pinned {
			continue
		}
		for i, m := range members {
			ranking[i] = ranked{m, weight(env, m)}
		}
		slices.SortFunc(ranking, func(a, b ranked) int {
			return cmp.Or(cmp.Compare(b.weight, a.weight), cmp.Compare(a.member, b.member))
		})
		for _, r := range ranking {
			if load[r.member] < limit {
				out[env] = r.member
				load[r.member]++
				break
			}
		}
	}
	return out
}

// weight is the rendezvous weight of member for env.
func weight(env, member string) uint64 {
	var d xxhash.Digest
	_, _ = d.WriteString(env)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(member)
	return d.Sum64()
}
