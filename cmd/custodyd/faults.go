//go:build !faultinject

package main

// faultHook is nil in production builds: no fault can be injected.
func faultHook() func(stage string) { return nil }
