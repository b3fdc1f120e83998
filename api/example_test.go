package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/custody-dev/custody/api"
)

// The examples run in go test against a real custodyd that TestMain
// starts. A client would use api.NewClient(api.DefaultSubmitSocket); here
// submitSocket is that daemon's submit socket, and grantFor stands for
// the operator handing the client a grant it issued (custody grant issue).

func submitSocket() string { return custodyd.SubmitSocket }

// grantFor is a grant the operator issued for a phase running script.
func grantFor(name, script string) []byte {
	g, err := issue(context.Background(), name, script)
	if err != nil {
		panic(err)
	}
	return g
}

// client is the examples' client: the submit socket, every exchange of
// which is also checked against the API's OpenAPI document.
func client() *api.Client { return api.NewClient(submitSocket(), api.WithTransport(contract.wrap)) }

// Ask the runner who it is and which API it speaks.
func ExampleClient_Status() {
	c := client() // api.NewClient(api.DefaultSubmitSocket)
	st, err := c.Status(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("API", st.APIVersion)
	fmt.Println("quarantined:", st.Quarantine.Quarantined)
	fmt.Println("policy loaded:", st.Policy.Error == "")
	// Output:
	// API 1.0
	// quarantined: false
	// policy loaded: true
}

// Dry-run admission of a phase: nothing is minted or run, and every
// requirement comes back with its verdict.
func ExampleClient_Admit() {
	c := client()
	// A phase that asks for more memory than the operator's ceiling.
	yaml := bytes.Replace(phaseYAML("too-big", "make"), []byte("memory: 64Mi"), []byte("memory: 64Gi"), 1)
	adm, err := c.Admit(context.Background(), api.AdmitRequest{PhaseSource: api.PhaseSource{YAML: yaml, BaseDir: "/"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("admitted:", adm.Admitted)
	for _, ch := range adm.Checks {
		if ch.Verdict != "satisfied" {
			fmt.Printf("%s: %s (%s)\n", ch.Requirement, ch.Verdict, ch.Code)
		}
	}
	// Output:
	// admitted: false
	// resources.memory: not-granted (ceiling-exceeded)
}

// Run a phase under a hand-issued grant and stream its events.
func ExampleClient_Events() {
	c := client()
	grant := grantFor("hello", "echo hello; echo done > /out/result.txt")
	for ev, err := range c.Events(context.Background(), api.RunRequest{Grant: grant}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Type {
		case api.EventStarted:
			fmt.Println("started")
		case api.EventStdout:
			os.Stdout.Write(ev.Data)
		case api.EventReceipt:
			fmt.Println("receipt signed")
		case api.EventResult:
			fmt.Println("status:", ev.Result.Status, "exit:", ev.Result.ExitCode)
			for _, f := range ev.Result.Output.Files {
				fmt.Println("output:", f.Path, f.Size, "bytes")
			}
		}
	}
	// Output:
	// started
	// hello
	// receipt signed
	// status: ok exit: 0
	// output: result.txt 5 bytes
}

// Fetch a finished run's recorded result and its signed receipt.
func ExampleClient_GetReceipt() {
	c := client()
	ctx := context.Background()
	res, _, err := c.Submit(ctx, api.RunRequest{Grant: grantFor("fetched", "true")}, api.RunOutput{})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, err := c.GetRun(ctx, res.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	rcpt, err := c.GetReceipt(ctx, res.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	var env struct{ PayloadType string }
	if err := json.Unmarshal(rcpt.Envelope, &env); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("result:", rec.Status, "cleanup verified:", rec.Cleanup.Verified)
	fmt.Println("receipt:", env.PayloadType)
	// Output:
	// result: ok cleanup verified: true
	// receipt: application/vnd.in-toto+json
}

// Cancel a run while it streams: its result still arrives, cancelled,
// with its evidence.
func ExampleClient_Cancel() {
	c := client()
	ctx := context.Background()
	var runID string
	for ev, err := range c.Events(ctx, api.RunRequest{Grant: grantFor("long", "echo up; sleep 600")}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Type {
		case api.EventStarted:
			runID = ev.RunID
		case api.EventStdout: // the workload is up
			if err := c.Cancel(ctx, runID); err != nil {
				fmt.Println(err)
				return
			}
		case api.EventResult:
			fmt.Println("status:", ev.Result.Status)
		}
	}
	// Output:
	// status: cancelled
}

// Branch on an error's code, never its text: a grant is single-use, and
// a rate-limited answer says when to ask again.
func ExampleError() {
	c := client()
	ctx := context.Background()
	grant := grantFor("once", "true")
	if _, _, err := c.Submit(ctx, api.RunRequest{Grant: grant}, api.RunOutput{}); err != nil {
		fmt.Println(err)
		return
	}
	_, _, err := c.Submit(ctx, api.RunRequest{Grant: grant}, api.RunOutput{})
	var ae *api.Error
	switch {
	case errors.Is(err, api.ErrReplayed):
		fmt.Println("the grant was already used: ask the operator for another")
	case errors.As(err, &ae) && ae.Code == api.CodeRateLimited:
		time.Sleep(ae.RetryAfter())
	case err != nil:
		fmt.Println("refused:", err)
	}
	// Output:
	// the grant was already used: ask the operator for another
}

// Run a phase under a standing authorization the operator configured: no
// grant to hand over, custodyd admits the phase and mints a single-use
// grant for it. This is what an agent loop does after every edit.
func ExampleClient_RunAuthorized() {
	c := client()
	ctx := context.Background()
	auths, err := c.Authorizations(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range auths.Authorizations {
		fmt.Println("may use:", a.Name, "as", a.Actor, "for", a.Stages)
	}
	phase := api.PhaseSource{YAML: phaseYAML("tests", "echo 3 passed"), BaseDir: "/"}
	res, rcpt, err := c.RunAuthorized(ctx, "agent-loop", phase, os.Stdout, os.Stderr, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("status:", res.Status, "minted under:", res.Authorization.Name, "receipt:", rcpt != nil)
	// Output:
	// may use: agent-loop as ci-bot for [build test]
	// 3 passed
	// status: ok minted under: agent-loop receipt: true
}
