package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/internal/volumes"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// TestRetierVolumes moves a volume between performance tiers through the
// gateway, on the harness's CSI plugin behind the real external-resizer:
// onto a tier; one the driver refuses is refused naming the field, with
// the driver's reason, and the volume asks for its tier again; each other
// refusal names its field too. Each tier state reaches the tiers' stream
// once, and none DCM's.
func TestRetierVolumes(t *testing.T) {
	natsServer := natstest.Start(t)
	dcm := natsServer.DCMStream()
	events := natsServer.Stream("tiers", volumes.TierEventSubject)
	g := gatewaytest.Start(t, gatewaytest.Options{NATSURL: natsServer.URL})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID := east.Spec.Environment.ID
	vol := c.runningVolume(envID, "snapshots")
	plain := c.runningVolume(envID, "standard")
	retier := func(c client, id, tier string) (int, map[string]any) {
		return c.do(http.MethodPost, volumesPath(envID)+"/"+id+":retier", map[string]any{"tier": tier})
	}
	// reported waits until the last tier event of the volume satisfies ok.
	reported := func(what string, ok func(e natstest.Event) bool) natstest.Event {
		var last natstest.Event
		c.eventually(time.Minute, "reported: "+what, func() bool {
			for _, e := range events.Events() {
				if e.Data.ID == vol {
					last = e
				}
			}
			return last.Type == volumes.TierEventType && ok(last)
		})
		return last
	}
	// waitTier polls the volume until its tier satisfies ok.
	waitTier := func(what string, ok func(tier map[string]any) bool) map[string]any {
		var tier map[string]any
		c.eventually(time.Minute, what, func() bool {
			_, v := c.do(http.MethodGet, volumesPath(envID)+"/"+vol, nil)
			tier, _ = v["tier"].(map[string]any)
			return tier != nil && ok(tier)
		})
		return tier
	}

	t.Run("refusals name the tier", func(t *testing.T) {
		for _, tt := range []struct {
			name, volume, tier string
			status             int
			mention            []string
		}{
			{"a tier the cluster does not have", vol, "standard-tier", 422, []string{"tier", "does not exist", "gold, platinum, silver"}},
			{"a volume whose driver has no tiers", plain, "gold", 422, []string{"tier", "gold is for driver snap.csi.local.dev", "the driver has none"}},
			{"not a name", vol, "Gold!", 400, []string{"tier"}},
			{"an unknown volume", uuid.NewString(), "gold", 404, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := client{t: t, base: g.URL, token: g.Tokens.Admin}
				code, body := retier(c, tt.volume, tt.tier)
				c.want(tt.status, code, body, tt.mention...)
			})
		}
		viewer := client{t: t, base: g.URL, token: g.Tokens.Viewer}
		code, body := retier(viewer, vol, "gold")
		viewer.want(http.StatusForbidden, code, body)
		if n := fmt.Sprint(field(c.waitStatus(envID, vol, "RUNNING", time.Second), "tier")); n != "<nil>" {
			t.Fatalf("refused changes left the volume with tier %s", n)
		}
	})

	t.Run("onto a tier", func(t *testing.T) {
		_, before := c.do(http.MethodGet, volumesPath(envID)+"/"+vol, nil)
		code, body := retier(c, vol, "gold")
		c.want(http.StatusOK, code, body)
		// A change of tier is a change of the volume: update_time moves,
		// in the answer and in what is read after.
		_, after := c.do(http.MethodGet, volumesPath(envID)+"/"+vol, nil)
		at := func(v map[string]any) time.Time {
			t.Helper()
			ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v["update_time"]))
			if err != nil {
				t.Fatalf("update_time of %v: %v", v, err)
			}
			return ts
		}
		for _, v := range []map[string]any{body, after} {
			if !at(v).After(at(before)) {
				t.Fatalf("update_time %v after the tier change, %v before", v["update_time"], before["update_time"])
			}
		}
		waitTier("volume on gold", func(tier map[string]any) bool { return tier["current"] == "gold" && tier["status"] == nil })
		e := reported("on gold", func(e natstest.Event) bool {
			return e.Data.Requested == "gold" && e.Data.Current == "gold" && e.Data.Status == ""
		})
		if e.Subject != volumes.TierEventSubject || e.EnvironmentID != envID || e.MsgID != e.ID {
			t.Fatalf("tier event %+v", e)
		}
	})

	t.Run("a tier the driver refuses is refused, and the volume asks for its tier again", func(t *testing.T) {
		code, body := retier(c, vol, "platinum")
		c.want(http.StatusUnprocessableEntity, code, body, "tier", "the driver refused platinum", `tier "platinum" is not one of`)
		tier := waitTier("asking for gold again", func(tier map[string]any) bool { return tier["requested"] == "gold" })
		t.Logf("after the refusal: %v", tier)
		if tier["current"] != "gold" || tier["status"] != nil {
			t.Fatalf("after the refusal: %v; want on gold, asking for it", tier)
		}
		_, v := c.do(http.MethodGet, volumesPath(envID)+"/"+vol, nil)
		if v["status"] != "RUNNING" {
			t.Fatalf("a refused tier change turned the volume %v", v["status"])
		}
		// A volume that never asked for a tier cannot ask for none again:
		// it keeps asking, INFEASIBLE, and says so.
		fresh := c.runningVolume(envID, "snapshots")
		code, body = retier(c, fresh, "platinum")
		c.want(http.StatusUnprocessableEntity, code, body, "tier", "the driver refused platinum", "until another tier is asked for")
		_, v = c.do(http.MethodGet, volumesPath(envID)+"/"+fresh, nil)
		if got := field(v, "tier", "status"); got != "INFEASIBLE" {
			t.Fatalf("a volume left asking for a refused tier shows %v", v["tier"])
		}
	})

	t.Run("back to the tier it is on", func(t *testing.T) {
		code, body := retier(c, vol, "gold")
		c.want(http.StatusOK, code, body)
		waitTier("on gold, the refusal forgotten", func(tier map[string]any) bool {
			return tier["requested"] == "gold" && tier["current"] == "gold" && tier["status"] == nil && tier["message"] == nil
		})
		reported("back on gold", func(e natstest.Event) bool {
			return e.Data.Requested == "gold" && e.Data.Current == "gold" && e.Data.Status == ""
		})
		// Each state once; DCM's stream holds volume events only.
		seen := map[string]bool{}
		for _, e := range events.Events() {
			key := e.Data.Requested + "/" + e.Data.Current + "/" + e.Data.Status + "/" + e.Data.Message
			if e.Data.ID == vol && seen[key] && key != "gold/gold//" {
				t.Errorf("tier state %s reported twice", key)
			}
			seen[key] = true
		}
		for _, e := range dcm.Events() {
			if e.Type != status.EventType {
				t.Errorf("DCM's stream holds a %s event", e.Type)
			}
		}
	})
}
