package main_test

import (
	"bufio"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// forged is what a hostile API server puts in its error messages: a line
// that looks like one of the gateway's audit records, and a terminal escape.
const forged = "boom\n{\"time\":\"2026-01-01T00:00:00Z\",\"level\":\"INFO\",\"msg\":\"audit\",\"audit\":true,\"action\":\"deleteEnvironment\",\"subject\":\"forged-admin\"}\n\x1b[2J"

// listKinds are the lists the gateway's informers make, by resource.
var listKinds = map[string]string{
	"persistentvolumeclaims": "v1/PersistentVolumeClaimList", "events": "v1/EventList",
	"storageclasses": "storage.k8s.io/v1/StorageClassList", "csidrivers": "storage.k8s.io/v1/CSIDriverList",
	"csistoragecapacities": "storage.k8s.io/v1/CSIStorageCapacityList",
}

// hostileCluster grants every permission the probe asks about and answers
// lists with nothing; every watch it accepts ends at once with an error
// event whose message is forged — which client-go's reflector logs through
// klog as "watch ended with error".
func hostileCluster(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		resource := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/version":
			_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
		case r.URL.Path == "/readyz":
			_, _ = w.Write([]byte("ok"))
		case resource == "selfsubjectrulesreviews":
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectRulesReview","apiVersion":"authorization.k8s.io/v1","status":{"resourceRules":[{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]}}`))
		case resource == "selfsubjectaccessreviews":
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":true}}`))
		case q.Get("sendInitialEvents") == "true":
			// No streaming lists here: the reflector falls back to list + watch.
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`))
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			w.WriteHeader(http.StatusOK)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": map[string]any{"kind": "Status", "apiVersion": "v1",
				"status": "Failure", "message": forged, "reason": "BadRequest", "code": 400}})
		case listKinds[resource] != "":
			kind := listKinds[resource]
			i := strings.LastIndexByte(kind, '/')
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": kind[i+1:], "apiVersion": kind[:i],
				"metadata": map[string]any{"resourceVersion": "1"}, "items": []any{}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAHostileClusterCannotForgeLogLines: client-go reports the errors of its
// watches through klog with the API server's message in them. Routed through
// the gateway's handler, every line stays one JSON object of the gateway's,
// the server's text stays inside a string value, stripped of control
// characters, and the cluster's token appears nowhere.
func TestAHostileClusterCannotForgeLogLines(t *testing.T) {
	cluster := hostileCluster(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL, "SG_ALLOWED_CLUSTER_CIDRS": "127.0.0.0/8"})
	const token = "hostile-cluster-canary-token-7c1d"
	body, _ := json.Marshal(map[string]any{"namespace": "dcm", "credentials": map[string]any{
		"server": cluster.URL, "token": token,
		"certificate_authority_data": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cluster.Certificate().Raw}),
	}})
	if status, answer := g.request(t, http.MethodPost, "/api/v1alpha1/environments?id=hostile", g.Token(), body); status != http.StatusCreated {
		t.Fatalf("register the hostile cluster: %d %s", status, answer)
	}
	// A few reflector retries.
	poll.Until(t, 30*time.Second, "three lines of client-go's own", func() bool {
		return strings.Count(g.Logs(), `"source":"kubernetes-client"`) >= 3
	})

	logs := g.Logs()
	klogLines := 0
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("a log line is not the gateway's JSON: %q", line)
		}
		if entry["subject"] == "forged-admin" || entry["action"] == "deleteEnvironment" {
			t.Fatalf("a forged line reached the log as its own record: %s", line)
		}
		if entry["source"] == "kubernetes-client" {
			klogLines++
		}
	}
	if klogLines == 0 || !strings.Contains(logs, "forged-admin") {
		t.Fatalf("the watch errors were not logged through the gateway's handler (%d lines):\n%s", klogLines, logs)
	}
	if strings.ContainsRune(logs, '\x1b') || strings.Contains(logs, `\u001b`) || strings.Contains(logs, token) {
		t.Fatal("an escape sequence or the cluster token reached the log")
	}
}

// TestSlowAndIdleConnectionsAreClosed: a client that trickles its body, or
// keeps an idle keep-alive connection, loses it after the configured
// timeouts instead of holding it forever.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL,
		"SG_HTTP_READ_TIMEOUT": "2s", "SG_HTTP_IDLE_TIMEOUT": "2s"})
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	// closedWithin waits for the server to close conn, reading (and
	// discarding) whatever it answers first.
	closedWithin := func(conn net.Conn, d time.Duration) bool {
		_ = conn.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		return err == nil || !errors.As(err, &ne) || !ne.Timeout()
	}

	const slow = 50
	var wg sync.WaitGroup
	closed := make([]bool, slow)
	for i := range slow {
		conn := dial()
		fmt.Fprintf(conn, "POST /api/v1alpha1/environments?id=slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", g.Token())
		wg.Go(func() {
			stop := time.After(8 * time.Second)
			done := make(chan bool, 1)
			go func() { done <- closedWithin(conn, 8*time.Second) }()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case c := <-done:
					closed[i] = c
					return
				case <-tick.C:
					_, _ = conn.Write([]byte(" ")) // a byte now and then
				case <-stop:
					return
				}
			}
		})
	}
	wg.Wait()
	for i, c := range closed {
		if !c {
			t.Fatalf("slow-body connection %d was still open after 8s (read timeout 2s)", i)
		}
	}

	idle := dial()
	fmt.Fprint(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v", err)
	}
	_ = resp.Body.Close()
	start := time.Now()
	if !closedWithin(idle, 8*time.Second) {
		t.Fatal("an idle keep-alive connection was still open after 8s (idle timeout 2s)")
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("the idle connection was closed after %s, before its timeout", took)
	}
}
