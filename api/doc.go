// Package api is custody's Go SDK: the client of custodyd's two unix
// sockets and the wire types they speak. A client that submits work (an
// agent, a pipeline driver, a CI job) holds only the submit socket; the
// operator's tools hold the control socket. Both sockets speak the same
// HTTP API, described once in the OpenAPI 3.1 document OpenAPI returns
// (api/openapi.yaml in the repository), and announce its Version.
//
// # Connecting
//
// NewClient takes a socket's path. Every method takes a context.Context
// first; cancelling it abandons the call, and for a run in progress closes
// the stream, which custodyd treats as a cancellation of the run.
//
//	c := api.NewClient(api.DefaultSubmitSocket)
//	st, err := c.Status(ctx)
//
// # Running a phase
//
// A run needs authority: a single-use grant the operator issued for the
// phase. Events streams the run: started, stdout and stderr as they come,
// the signed receipt, and a final result (or error) event. Its iterator
// ends after the final event; an error ends it too.
//
//	for ev, err := range c.Events(ctx, api.RunRequest{Grant: grant}) {
//		if err != nil {
//			return err
//		}
//		switch ev.Type {
//		case api.EventStdout:
//			os.Stdout.Write(ev.Data)
//		case api.EventResult:
//			fmt.Println(ev.Result.Status)
//		}
//	}
//
// Submit does the same and writes the output to writers, returning the
// result and the receipt; Run and RunWithReceipt are Submit for a grant.
// GetRun, GetReceipt, GetLog and GetOutputs fetch what a finished run left,
// and Cancel stops one.
//
// # Errors
//
// Every refusal is an *Error with a stable Code (Codes lists them). Branch
// with errors.Is against the sentinels, or errors.As for the details:
//
//	var ae *api.Error
//	switch {
//	case errors.Is(err, api.ErrReplayed):
//		// the grant was already used: ask for a new one
//	case errors.As(err, &ae) && ae.Code == api.CodeRateLimited:
//		time.Sleep(ae.RetryAfter())
//	case errors.As(err, &ae) && len(ae.Checks) > 0:
//		// each requirement that was not met, with its fix
//	}
//
// A run whose output reached this client incomplete returns an
// *IncompleteError along with its result and receipt: the runner kept the
// whole output, and GetLog fetches it.
package api
