// Command childmaker is a socket holder's stand-in for the children test:
// a static client of the engine's API on /var/run/docker.sock. It finds its
// own container, creates and starts one child on its own (pack) network,
// one with no network, and one with no network that copies the capability
// probe's label and name prefix (anyone holding the socket can), and a
// network and a volume, then waits for its stop signal.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var cli = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/docker.sock")
	},
}}

func call(method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequest(method, "http://engine/v1.41"+path, &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cli.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b.String())
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

func main() {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m := regexp.MustCompile(`containers/([0-9a-f]{64})/`).FindSubmatch(mi)
	if m == nil {
		fmt.Fprintln(os.Stderr, "own container id not found")
		os.Exit(1)
	}
	var me struct {
		Config          struct{ Image string }
		NetworkSettings struct {
			Networks map[string]struct{ NetworkID string }
		}
	}
	if err := call("GET", "/containers/"+string(m[1])+"/json", nil, &me); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	netID := "none"
	for _, n := range me.NetworkSettings.Networks {
		netID = n.NetworkID
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	probeLike := map[string]string{"dev.custody.probe": "1"}
	for name, mode := range map[string]string{"child-in-world-" + suffix: netID, "child-outside-" + suffix: "none", "custody-probe-" + suffix: "none"} {
		var made struct{ Id string }
		spec := map[string]any{"Image": me.Config.Image, "Cmd": []string{"sleep", "600"}, "HostConfig": map[string]any{"NetworkMode": mode}}
		if strings.HasPrefix(name, "custody-probe-") {
			spec["Labels"] = probeLike
		}
		if err := call("POST", "/containers/create?name="+name, spec, &made); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := call("POST", "/containers/"+made.Id+"/start", nil, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("made", name, made.Id)
	}
	// A network and a volume of its own, which no journal holds either.
	var nw struct{ Id string }
	if err := call("POST", "/networks/create", map[string]any{"Name": "child-net-" + suffix, "Internal": true}, &nw); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("made network", nw.Id)
	if err := call("POST", "/volumes/create", map[string]any{"Name": "child-vol-" + suffix}, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("made volume child-vol-" + suffix)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
}
