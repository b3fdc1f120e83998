package workspace_test

import (
	"testing"
)

// sidecarPack joins client to web's network namespace, as sidecar samples
// do, and web's pid namespace.
func sidecarPack(key string) string {
	return `name: sidecar
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo web-ok & wait"]
    networks: [front]
  client:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    ` + key + `: "service:web"
` + func() string {
		if key == "network_mode" {
			return ""
		}
		return "    networks: [front]\n"
	}() + `networks:
  front:
    internal: true
`
}

// TestServiceNamespaceRefusedAtAdmission: up cannot join another
// service's namespace (the engine takes a container ID, which up does not
// bind), so admission refuses network_mode, pid and ipc service:NAME with
// that reason rather than granting what up then refuses.
func TestServiceNamespaceRefusedAtAdmission(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	for _, key := range []string{"network_mode", "pid", "ipc"} {
		_, err := e.m.Admit(ctx, []byte(sidecarPack(key)), e.dir, actor)
		if !refusedAs(err, "services.client."+key, "namespace-service-unrealized") {
			t.Errorf("%s: service:web: %v, want services.client.%s refused as namespace-service-unrealized", key, err, key)
		}
	}
}
