//go:build !faultinject

package daemon

// faultHook is nil in production builds: no fault can be injected.
func faultHook() func(stage string) { return nil }
