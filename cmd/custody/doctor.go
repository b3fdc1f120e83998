package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/platform"
)

// maxConfigSize bounds custodyd.yaml as the doctor reads it.
const maxConfigSize = 1 << 20

// doctorConfig is what the doctor reads of custodyd.yaml: the pinned
// runtime and the Docker engine. custodyd decodes the file strictly; the
// doctor only looks.
type doctorConfig struct {
	Runner struct {
		StateDir string `yaml:"stateDir"`
		Runtime  struct {
			Path    string `yaml:"path"`
			Version string `yaml:"version"`
			SHA256  string `yaml:"sha256"`
		} `yaml:"runtime"`
	} `yaml:"runner"`
	Docker *struct {
		Host       string `yaml:"host"`
		ProbeImage string `yaml:"probeImage"`
	} `yaml:"docker"`
}

// readCustodydConfig reads what the doctor and the gate need of
// custodyd.yaml.
func readCustodydConfig(path string) (*doctorConfig, error) {
	data, err := readFile("custodyd configuration", path, maxConfigSize)
	if err != nil {
		return nil, err
	}
	var cfg doctorConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("refused: %s is not custodyd.yaml: %w", quote.String(path), err)}
	}
	return &cfg, nil
}

// doctorReport is custody doctor --json: the evidenced profile (its fields
// at the top level, as before) and the checks with their verdicts.
type doctorReport struct {
	*platform.Profile
	Checks []platform.Check `json:"checks"`
	// OK is false when a check failed (the exit is then 1).
	OK bool `json:"ok"`
}

func (a *app) doctorCmd() *cobra.Command {
	var asJSON bool
	var runtimePath, configPath string
	cmd := &cobra.Command{
		Use:   "doctor [--config custodyd.yaml] [--runtime PATH]",
		Short: "Probe this host: every fact custody depends on, with a verdict and a fix; exit 1 if one fails",
		Args:  cobra.NoArgs,
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, _ []string) error {
			var want platform.Expect
			var scratch string
			if configPath != "" {
				cfg, err := readCustodydConfig(configPath)
				if err != nil {
					return err
				}
				rt := cfg.Runner.Runtime
				if runtimePath == "" {
					runtimePath = rt.Path
				}
				want.RuntimeVersion, want.RuntimeSHA256 = rt.Version, rt.SHA256
				// The mount facts (tmpfs, overlay, idmap) are the state
				// dir's filesystem's, where custodyd mounts images.
				if fi, err := os.Stat(cfg.Runner.StateDir); cfg.Runner.StateDir != "" && err == nil && fi.IsDir() {
					scratch = cfg.Runner.StateDir
				}
				if cfg.Docker != nil {
					c := engineCheck(cmd.Context(), cfg.Docker.Host, cfg.Docker.ProbeImage)
					want.Engine = &c
				}
			}
			prof, err := platform.Probe(cmd.Context(), platform.Options{RuntimePath: runtimePath, ScratchDir: scratch})
			if err != nil {
				return &exitError{exitInternal, err}
			}
			checks := append(platform.Diagnose(prof, platform.ProbeOpenat2(), want), platform.SealedImagesCheck(cmd.Context()))
			failed := platform.Failed(checks)
			if asJSON {
				if err := writeJSON(a.stdout, doctorReport{Profile: prof, Checks: checks, OK: !failed}); err != nil {
					return err
				}
			} else {
				printChecksTable(a.stdout, prof, checks)
			}
			if failed {
				return &exitError{exitFailed, fmt.Errorf("doctor: this host cannot run custody as configured (the failed checks above say why)")}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&runtimePath, "runtime", "", "runtime binary to probe (version and digest); default: the one --config pins")
	cmd.Flags().StringVar(&configPath, "config", "", "custodyd.yaml: compare the runtime with its pin and check its docker engine")
	return cmd
}

// printChecksTable prints one line per check, in Diagnose's fixed order.
func printChecksTable(w io.Writer, p *platform.Profile, checks []platform.Check) {
	fmt.Fprintf(w, "host                 %s (%s/%s) %s\n", quote.String(p.Kernel), p.OS, p.Arch, quote.Message(p.Distro))
	var tiers []string
	for _, c := range checks {
		line := fmt.Sprintf("%-20s %-12s %s", c.Name, c.Verdict, quote.Message(c.Detail))
		if c.Fix != "" {
			line += "; fix: " + quote.Message(c.Fix)
		}
		fmt.Fprintln(w, line)
		if t, ok := strings.CutPrefix(c.Name, "tier."); ok && c.Verdict == platform.VerdictOK {
			tiers = append(tiers, t)
		}
	}
	if len(tiers) == 0 {
		tiers = []string{"none"}
	}
	fmt.Fprintf(w, "tiers this host can run: %s\n", strings.Join(tiers, ", "))
}

// engineCheck asks the configured Docker engine for /_ping over its unix
// socket (the only kind custodyd drives), with a short deadline, and says
// when the egress proof cannot succeed as configured: no probe image, or
// one the engine does not hold. It only reads: the probe itself runs
// containers, and runs on the operator's word to custodyd.
func engineCheck(ctx context.Context, host, probeImage string) platform.Check {
	c := platform.Check{Name: "docker.engine"}
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok || sock == "" {
		c.Verdict, c.Detail = platform.VerdictFail, fmt.Sprintf("docker.host %q is not a unix:// socket", host)
		c.Fix = "set docker.host to unix:///path/to/docker.sock of the engine custody drives"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("_ping answered HTTP %d", resp.StatusCode)
			} else {
				c.Verdict = platform.VerdictOK
				c.Detail = fmt.Sprintf("%s answered _ping (API %s); custodyd proves its profile on the operator's first pack request (a dry run with --operator, issuing a grant, or an up)", sock, resp.Header.Get("Api-Version"))
				const refuses = "custodyd cannot prove that an internal network blocks egress and refuses every pack network (internal-unproved)"
				if probeImage == "" {
					c.Verdict = platform.VerdictWarn
					c.Detail += "; but docker.probeImage is not set, so the egress probe cannot run: " + refuses
					c.Fix = "set docker.probeImage to an image already on the engine, with /bin/sh and a busybox-style nc"
				} else if why := imageMissing(ctx, hc, probeImage); why != "" {
					c.Verdict = platform.VerdictWarn
					c.Detail += fmt.Sprintf("; but docker.probeImage %q %s, so the egress probe fails: %s", probeImage, why, refuses)
					c.Fix = "load or import that image on the engine (custody never pulls it), or set docker.probeImage to an image already there, with /bin/sh and a busybox-style nc"
				}
				return c
			}
		}
	}
	c.Verdict, c.Detail = platform.VerdictWarn, fmt.Sprintf("%s: %v: custodyd refuses every pack request while it cannot reach it (phases still run)", sock, err)
	c.Fix = "start the engine custody drives on that socket, or remove the docker section"
	return c
}

// imageMissing says why the engine does not hold image ("is not on the
// engine", or what the engine answered instead), or "" when it does.
func imageMissing(ctx context.Context, hc *http.Client, image string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/", nil)
	if err != nil {
		return "cannot be looked up: " + err.Error()
	}
	// The engine routes a reference's own "/" and ":" (as its client
	// sends them); anything else is escaped.
	req.URL.Path = "/images/" + image + "/json"
	resp, err := hc.Do(req)
	if err != nil {
		return "could not be looked up on the engine: " + err.Error()
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return ""
	case http.StatusNotFound:
		return "is not on the engine"
	}
	return fmt.Sprintf("could not be looked up on the engine (HTTP %d)", resp.StatusCode)
}
