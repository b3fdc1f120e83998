package pack

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/schema"
)

// The compose key table: every key of the compose specification that a
// pack file can reach, with custody's verdict. A key is realized when the
// allowlist (topSpec) models it; every other key is refused with the
// reason and fix below. The table is derived from these two sources and
// from compose-go's own copy of the specification's JSON schema, so a key
// the specification adds is refused with a reason until it is modelled,
// and the generated docs page (the compose key table) cannot drift.
//
// Patterns name a key's place: "*" stands for a name the file chooses (a
// service, network, volume or secret), "[]" for a list item.

// KeyVerdict is a compose key's verdict in the table.
type KeyVerdict string

const (
	// KeyRealized keys are modelled: their meaning is kept, and any
	// authority they ask for is judged at admission.
	KeyRealized KeyVerdict = "realized"
	// KeyRefused keys are refused as a named requirement of the file.
	KeyRefused KeyVerdict = "refused"
)

// KeyRule is one row of the table.
type KeyRule struct {
	Key     string
	Verdict KeyVerdict
	// Reason and Fix are set for refused keys.
	Reason, Fix string
}

type why struct{ reason, fix string }

const (
	fixRemove      = "remove it"
	notYetRealized = "custody does not realize it yet, and admission never grants what up cannot do"
	tuning         = "resource tuning beyond the modelled limits (memory, cpus, pids) is not modelled"
	fixLimits      = "use mem_limit, cpus and pids_limit (or deploy.resources.limits) instead"
	reachesOut     = "a name or resolver given here can point outside the pack's world, and custody does not yet check that it stays in-world"
)

// refusedKeys gives the reason for each refused key custody names on its
// own (a key pattern).
func refusedKeys() map[string]why {
	svc := map[string]why{
		"extends":             {"it reads another file or service definition; a pack is one self-contained file", "write the service out in full"},
		"env_file":            {"it reads the caller's files into the environment; a pack is one self-contained file (P5)", "write environment: KEY=value literally"},
		"label_file":          {"it reads labels from another file; a pack is one self-contained file", "write labels: literally"},
		"dns_opt":             {reachesOut, fixRemove},
		"dns_search":          {reachesOut, fixRemove},
		"domainname":          {notYetRealized, fixRemove},
		"use_api_socket":      {"it hands the engine's API socket to the service, which is host-root-equivalent", fixRemove},
		"volumes_from":        {"it shares another container's mounts, outside what the grant names", "declare a named volume and mount it in both services"},
		"links":               {"legacy links are not modelled; services on a pack network reach each other by name", fixRemove},
		"external_links":      {"it reaches containers outside the pack's world", fixRemove},
		"scale":               {"more than one container per service is not modelled (ownership names one container per service)", "remove it, or declare a second service"},
		"runtime":             {"another OCI runtime is engine authority custody does not check", fixRemove},
		"pull_policy":         {"pulling an image is acquisition, a separate authority (P6)", "load the image on the engine beforehand and remove pull_policy"},
		"group_add":           {"supplementary groups can reach host files (the docker group, for one)", fixRemove},
		"device_cgroup_rules": {"it opens device access beyond the devices the grant names", "name each device under devices: instead"},
		"gpus":                {"GPU access is host device authority custody does not model", fixRemove},
		"storage_opt":         {"storage driver options are engine authority custody does not model", fixRemove},
		"develop":             {"watch and sync reach the host's files during a run", fixRemove},
		"post_start":          {"lifecycle hooks run commands admission does not see", "run them from the service's entrypoint"},
		"pre_stop":            {"lifecycle hooks run commands admission does not see", "run them from the service's entrypoint"},
		"pre_start":           {"lifecycle hooks run commands admission does not see", "run them from the service's entrypoint"},
		"provider":            {"it hands the service to an external provider plugin (engine authority)", fixRemove},
		"attach":              {"client attach behaviour is not modelled; custody keeps each service's output itself", fixRemove},
		"annotations":         {"OCI annotations reach the runtime, and custody does not check them", fixRemove},
		"credential_spec":     {"a Windows credential spec is not modelled", fixRemove},
		"isolation":           {"Windows isolation is not modelled", fixRemove},
		"mac_address":         {"a fixed MAC address is a native name custody does not model", fixRemove},
		"stdin_open":          {"interactive input is not modelled", fixRemove},
		"tty":                 {"interactive terminals are not modelled", fixRemove},
		"models":              {"model runners are not modelled", fixRemove},
		"oom_kill_disable":    {tuning, fixLimits},
		"oom_score_adj":       {tuning, fixLimits},
		"mem_reservation":     {tuning, fixLimits},
		"mem_swappiness":      {tuning, fixLimits},
		"memswap_limit":       {tuning, fixLimits},
		"blkio_config":        {tuning, fixLimits},
		"cpu_count":           {tuning, fixLimits},
		"cpu_percent":         {tuning, fixLimits},
		"cpu_period":          {tuning, fixLimits},
		"cpu_quota":           {tuning, fixLimits},
		"cpu_rt_period":       {tuning, fixLimits},
		"cpu_rt_runtime":      {tuning, fixLimits},
		"cpu_shares":          {tuning, fixLimits},
		"cpuset":              {tuning, fixLimits},
		"umask":               {"the file mode mask is not yet realized", fixRemove},
		"pull_refresh_after":  {"pulling an image is acquisition, a separate authority (P6)", "load the image on the engine beforehand and remove it"},
	}
	out := map[string]why{
		"include": {"it reads other files; a pack is one self-contained file", "write the included services into the pack"},
		"models":  {"model runners are not modelled", fixRemove},
		"jobs":    {"jobs are not modelled", "declare the job as a service"},
	}
	for k, v := range svc {
		out["services.*."+k] = v
	}
	return out
}

// refusedUnder gives the reason for any key under a pattern that the
// allowlist does not model there.
func refusedUnder() map[string]why {
	swarm := why{"swarm-era deploy settings are partly dropped by compose outside swarm; only deploy.resources.limits memory, cpus and pids are modelled", "remove it"}
	return map[string]why{
		"services.*.build":                   {"only context, dockerfile and args of a build are modelled", fixRemove},
		"services.*.deploy":                  swarm,
		"services.*.deploy.resources":        swarm,
		"services.*.deploy.resources.limits": swarm,
		"services.*.depends_on.*":            {"only the condition of a dependency is modelled (restart and required are not)", fixRemove},
		"services.*.healthcheck":             {"start_interval is not realized (engines before API 1.44 ignore it silently)", "remove it: interval applies from the start"},
		"services.*.networks.*":              {"network aliases, addresses, priorities and driver options are not modelled", "attach the service by the network's name alone"},
		"services.*.ports[]":                 {"port mode, name and app_protocol are not modelled", "use target, published, host_ip and protocol"},
		"services.*.volumes[]":               {"bind propagation, SELinux relabelling, create_host_path, nocopy, subpath and consistency are not modelled", "use type, source, target and read_only"},
		"services.*.volumes[].tmpfs":         {"tmpfs mode is not modelled", "use size alone"},
		"services.*.secrets[]":               {"only source, target, uid, gid and mode of a secret are modelled", fixRemove},
		"networks.*":                         {"ipam, driver_opts, name, labels, attachable and enable_ipv6 are engine choices custody does not model", "use driver, internal and external"},
		"volumes.*":                          {"driver_opts (a local driver_opts bind reaches any host path), name and labels are not modelled", "use driver and external"},
		"services.*.devices[]":               {"only the short form of a device (/dev/HOST[:/dev/CONTAINER[:rwm]]) is modelled", "write the short form"},
		"networks.*.external":                {"external.name is obsolete, and a native network name is not modelled", "write external: true and name the network by its key"},
		"volumes.*.external":                 {"external.name is obsolete, and a native volume name is not modelled", "write external: true and name the volume by its key"},
		"configs.*":                          {"only file (inside the pack's directory) and content of a config are modelled (environment, external, name, labels and drivers are not)", "use file: or content:"},
		"services.*.configs[]":               {"only source, target, uid, gid and mode of a config are modelled", fixRemove},
		"secrets.*":                          {"only file, content and " + extCredential + " of a secret are modelled (name, external, driver and labels are not)", fixRemove},
	}
}

var extension = why{"extensions other than " + extSystemd + " and " + extRole + " (on a service), " + extRole + " (on a volume) and " + extCredential + " (on a secret) are refused: custody ignores nothing", fixRemove}

// unmodelled is the refusal of key under path (whose table pattern is
// pat), with the table's reason.
func (w *walker) unmodelled(path, pat, key string) *UnmodelledError {
	e := &UnmodelledError{Path: path, Key: key}
	if r, ok := refusal(join(pat, key), pat, key); ok {
		e.Reason, e.Fix = r.reason, r.fix
	} else if w.schemaKey(join(pat, key)) {
		e.Reason, e.Fix = "not modelled yet: custody does not check what this key asks of the engine, so it is refused rather than ignored", fixRemove
	}
	return e
}

// refusal looks a refused key up: by its own pattern, as an extension, or
// by its parent's.
func refusal(full, parent, key string) (why, bool) {
	if r, ok := refusedKeys()[full]; ok {
		return r, true
	}
	if strings.HasPrefix(key, "x-") {
		return extension, true
	}
	r, ok := refusedUnder()[parent]
	return r, ok
}

func (w *walker) schemaKey(pat string) bool {
	if w.schema == nil {
		w.schema = schemaKeys()
	}
	return w.schema[pat]
}

// schemaKeys lists every key pattern of compose-go's copy of the compose
// specification's JSON schema (extensions, x-*, aside).
func schemaKeys() map[string]bool {
	var root map[string]any
	if err := json.Unmarshal([]byte(schema.Schema), &root); err != nil {
		// The schema is compiled in; a broken copy is a build defect,
		// and every key then reads as unknown (still refused).
		return map[string]bool{}
	}
	defs, _ := root["$defs"].(map[string]any)
	out := map[string]bool{}
	var walk func(node any, pat string, refs []string)
	walk = func(node any, pat string, refs []string) {
		m, ok := node.(map[string]any)
		if !ok || strings.Count(pat, ".") > 8 {
			return
		}
		if ref, ok := m["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/$defs/")
			if !slices.Contains(refs, name) {
				walk(defs[name], pat, append(slices.Clone(refs), name))
			}
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			l, _ := m[k].([]any)
			for _, c := range l {
				walk(c, pat, refs)
			}
		}
		props, _ := m["properties"].(map[string]any)
		for k, v := range props {
			out[join(pat, k)] = true
			walk(v, join(pat, k), refs)
		}
		pp, _ := m["patternProperties"].(map[string]any)
		for re, v := range pp {
			if !strings.HasPrefix(re, "^x-") {
				walk(v, join(pat, "*"), refs)
			}
		}
		walk(m["additionalProperties"], join(pat, "*"), refs)
		walk(m["items"], pat+"[]", refs)
	}
	walk(root, "", nil)
	return out
}

// realizedKeys lists the key patterns the allowlist models.
func realizedKeys() map[string]bool {
	out := map[string]bool{}
	var walk func(s *spec, pat string)
	walk = func(s *spec, pat string) {
		for k, c := range s.keys {
			out[join(pat, k)] = true
			walk(c, join(pat, k))
		}
		if s.free != nil {
			walk(s.free, join(pat, "*"))
		}
		if s.items != nil {
			walk(s.items, pat+"[]")
		}
	}
	walk(topSpec(), "")
	return out
}

// parentKey is the pattern of the key that holds pat's key ("" at the
// top): "services.*.ports[].target" → "services.*.ports".
func parentKey(pat string) string {
	i := strings.LastIndex(pat, ".")
	if i < 0 {
		return ""
	}
	p := pat[:i]
	for {
		switch {
		case strings.HasSuffix(p, "[]"):
			p = strings.TrimSuffix(p, "[]")
		case strings.HasSuffix(p, ".*"):
			p = strings.TrimSuffix(p, ".*")
		case p == "*":
			return ""
		default:
			return p
		}
	}
}

// KeyTable is every compose key a pack file can reach, in key order: the
// keys of the specification at the top level and under every realized
// key, and custody's own extensions. A key under a refused key is not
// listed: the refusal of its parent covers it.
func KeyTable() []KeyRule {
	realized := realizedKeys()
	keys := maps.Clone(realized)
	for k := range schemaKeys() {
		if p := parentKey(k); p == "" || realized[p] {
			keys[k] = true
		}
	}
	out := make([]KeyRule, 0, len(keys))
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if realized[k] {
			out = append(out, KeyRule{Key: k, Verdict: KeyRealized})
			continue
		}
		i := strings.LastIndex(k, ".")
		parent := ""
		if i >= 0 {
			parent = k[:i]
		}
		r, ok := refusal(k, parent, k[i+1:])
		if !ok {
			r = why{"not modelled yet: custody does not check what this key asks of the engine, so it is refused rather than ignored", fixRemove}
		}
		out = append(out, KeyRule{Key: k, Verdict: KeyRefused, Reason: r.reason, Fix: r.fix})
	}
	return out
}

// KeyTableMarkdown renders the table as the reference page.
func KeyTableMarkdown() []byte {
	rows := KeyTable()
	var realized int
	for _, r := range rows {
		if r.Verdict == KeyRealized {
			realized++
		}
	}
	var b strings.Builder
	b.WriteString("# Compose key table\n\n")
	b.WriteString("<!-- Generated by make docs from custody's own key table; do not edit. -->\n\n")
	b.WriteString("Every key of the compose specification that a pack file can reach, with custody's verdict. ")
	b.WriteString("A **realized** key keeps its compose meaning, and any authority it asks for is judged at admission (see the [pack reference](pack.md)). ")
	b.WriteString("A **refused** key is refused as a named requirement of the file: `custody pack admit` answers every refused key of a file at once, each with its path, the reason and the fix, and exits 2. ")
	b.WriteString("Keys under a refused key are not listed: the refusal of the key covers them. ")
	b.WriteString("`*` stands for a name the file chooses (a service, network, volume or secret) and `[]` for an item of a list. A long form of a key that custody models only in its short form is refused as that form, with the reason of the row under it.\n\n")
	fmt.Fprintf(&b, "%d keys: %d realized, %d refused. Any other key, and any extension (`x-...`) other than custody's own, is refused.\n\n", len(rows), realized, len(rows)-realized)
	b.WriteString("| Key | Verdict | Reason | Fix |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, r.Verdict, r.Reason, r.Fix)
	}
	return []byte(b.String())
}
