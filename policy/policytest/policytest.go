// Package policytest holds the operator policy text that tests and the
// bench load: the example policy's phase ceilings and defaults, which most
// test policies carry, so that each policy states only what it is about.
package policytest

// Limits are the phase ceilings and defaults of examples/policy.yaml, as
// YAML at the top level of a policy (a test checks they are the example's).
const Limits = `ceilings:
  memory: 512Mi
  pids: 256
  cpu: 2
  wallTime: 10m
  outputBytes: 256Mi
  tmpBytes: 128Mi
  inputBytes: 1Gi
defaults:
  cpu: 1
  outputBytes: 32Mi
  tmpBytes: 16Mi
`

// Header opens a policy document.
const Header = "apiVersion: custody.dev/v1alpha1\nkind: Policy\n"
