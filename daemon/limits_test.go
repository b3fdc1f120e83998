package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
)

// TestSubmitFloodLeavesTheOperatorIn: an unprivileged uid opens a thousand
// connections to the submit socket, half stopping inside their headers and
// half inside their bodies. It holds at most its per-uid cap; the operator's
// status answers quickly meanwhile, a legitimate run works, and the timeouts
// close every connection it held.
func TestSubmitFloodLeavesTheOperatorIn(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	lim, err := sizeLimits(rl.Cur)
	if err != nil {
		t.Fatal(err)
	}
	legit := d.issue("echo legit")
	const conns = 1000
	cmd := helperAs(t, d, 65534, "TestHelperFlood", "CUSTODY_FLOOD_SOCKET="+d.cfg.SubmitSocket, "CUSTODY_FLOOD_CONNS="+strconv.Itoa(conns))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	figure := func(name string) int {
		t.Helper()
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), name+"="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("flood helper gave no %s", name)
		return 0
	}
	flooded := time.Now()
	held := figure("HELD")
	t.Logf("attacker uid 65534: %d connections attempted, %d held (cap per uid %d, submit socket %d, RLIMIT_NOFILE %d)",
		conns, held, lim.SubmitPerUID, lim.Submit, lim.NoFile)
	if held == 0 || held > lim.SubmitPerUID {
		t.Fatalf("attacker holds %d connections; want 1..%d", held, lim.SubmitPerUID)
	}
	var lat []time.Duration
	for range 20 {
		start := time.Now()
		if _, err := d.control.Status(ctx); err != nil {
			t.Fatalf("operator status during the flood: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("operator status during the flood: median %s, max %s (20 calls)", lat[len(lat)/2], lat[len(lat)-1])
	if lat[len(lat)-1] > time.Second {
		t.Fatalf("operator status took %s during the flood", lat[len(lat)-1])
	}
	res, out, err := d.run(legit)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out, "legit") {
		t.Fatalf("legitimate run during the flood: %v %+v %q", err, res, out)
	}
	fmt.Fprintln(stdin, "measured")
	t.Logf("attacker opened %d more connections while the operator measured", figure("CHURN"))
	// Every connection the attacker holds is closed by the header or body
	// timeout.
	time.Sleep(time.Until(flooded.Add(bodyTimeout + 2*time.Second)))
	fmt.Fprintln(stdin, "again")
	if after := figure("AFTER"); after != 0 {
		t.Fatalf("%d attacker connections outlived the read timeouts", after)
	}
	if again := figure("REOPEN"); again != 1 {
		t.Fatalf("after its connections timed out the uid holds %d of 1 new one; want its slots back", again)
	}
}

// TestHelperFlood is not a test: TestSubmitFloodLeavesTheOperatorIn runs
// it as an unprivileged uid. It opens the connections, reports how many
// the daemon kept open, and again when told to.
func TestHelperFlood(t *testing.T) {
	sock := os.Getenv("CUSTODY_FLOOD_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	n, _ := strconv.Atoi(os.Getenv("CUSTODY_FLOOD_CONNS"))
	var cs []net.Conn
	for i := range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			continue
		}
		partial := "POST /v1/runs HTTP/1.1\r\nHost: custodyd\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"grant\":"
		if i%2 == 0 {
			partial = "POST /v1/runs HTTP/1.1\r\nHost: cus"
		}
		_, _ = io.WriteString(c, partial)
		cs = append(cs, c)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	// A connection is held if a read neither gets data nor finds it closed.
	// Reads run side by side: a read past its deadline is not even tried.
	open := func() int {
		var held atomic.Int32
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() {
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				var b [1]byte
				if _, err := c.Read(b[:]); errors.Is(err, os.ErrDeadlineExceeded) {
					held.Add(1)
				}
			})
		}
		wg.Wait()
		return int(held.Load())
	}
	time.Sleep(time.Second)
	fmt.Printf("HELD=%d\n", open())
	// While the operator measures, keep knocking: new connections, each
	// with a partial request, as fast as the daemon takes them.
	stop := make(chan struct{})
	var churn atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c, err := net.Dial("unix", sock); err == nil {
				_, _ = io.WriteString(c, "POST /v1/runs HTTP/1.1\r\n")
				c.Close()
				churn.Add(1)
			}
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	in.Scan()
	close(stop)
	fmt.Printf("CHURN=%d\n", churn.Load())
	in.Scan()
	fmt.Printf("AFTER=%d\n", open())
	// The timed-out connections gave their slots back: the uid may connect
	// again.
	for _, c := range cs {
		c.Close()
	}
	cs = nil
	if c, err := net.Dial("unix", sock); err == nil {
		_, _ = io.WriteString(c, "POST /v1/runs HTTP/1.1\r\n")
		cs = append(cs, c)
	}
	fmt.Printf("REOPEN=%d\n", open())
}

// TestRequestBodyLimit: a body over maxBody is refused as a bad request,
// naming the bound, on both sockets; one within it is served.
func TestRequestBodyLimit(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	big := api.AdmitRequest{PhaseSource: api.PhaseSource{YAML: []byte(strings.Repeat("#", maxBody)), BaseDir: d.dir}}
	for _, c := range []*api.Client{d.submit, d.control} {
		_, err := c.Admit(ctx, big)
		wantCode(t, err, "bad-request")
		if !strings.Contains(err.Error(), fmt.Sprintf("at most %d bytes", maxBody)) {
			t.Fatalf("refusal does not name the bound: %v", err)
		}
		if adm, err := c.Admit(ctx, api.AdmitRequest{PhaseSource: d.phase("true")}); err != nil || !adm.Admitted {
			t.Fatalf("admit within the bound: %v %+v", err, adm)
		}
	}
}
