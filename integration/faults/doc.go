// Package faults holds the crash-consistency tests: a fault-injection
// build of custodyd dies abruptly (SIGKILL) at each stage boundary of a
// launch, and a restarted custodyd must recover to an explicit state with
// nothing leaked. It has no code of its own.
package faults
