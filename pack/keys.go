package pack

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/template"
	"go.yaml.in/yaml/v3"
)

// Which compose keys custody models, and which it refuses.
//
// Load walks the raw YAML before compose-go sees it and refuses every key
// that is not listed here with an *UnmodelledError naming its path. It
// works on the raw mapping, not on compose-go's result, because compose-go
// itself drops keys it does not honour (compose#9648) and custody must
// never do that. A modelled key becomes a typed field of Service (and a
// Requirement where it asks for authority); see Requirements.
//
//	level               modelled keys
//	top level           name (else the operator's or the directory's),
//	                    version (noted, ignored), configs,
//	                    services, networks, volumes, secrets
//	service             image, build, command, entrypoint, environment, user,
//	                    working_dir, hostname, labels, depends_on, networks,
//	                    ports, volumes, tmpfs, secrets, privileged, cap_add,
//	                    cap_drop, devices, network_mode, pid, ipc, uts,
//	                    userns_mode, security_opt, sysctls, cgroup_parent,
//	                    cgroup, restart, read_only, stop_signal, mem_limit,
//	                    cpus, pids_limit, deploy, expose, container_name,
//	                    init, shm_size, stop_grace_period, ulimits, extra_hosts, dns,
//	                    platform, logging, healthcheck, profiles, configs,
//	                    x-custody-systemd, x-custody-role (participant or evaluator)
//	service.build       context, dockerfile, args
//	service.deploy      resources.limits.{memory, cpus, pids} only
//	service.depends_on  a list, or a map of service → {condition:
//	                    service_started, service_healthy or
//	                    service_completed_successfully}
//	service.healthcheck test, interval, timeout, start_period, retries,
//	                    disable
//	service.networks    a list, or a map of network → null (no sub-keys)
//	service.ports       short syntax without ranges; long: target,
//	                    published, host_ip, protocol
//	service.volumes     short syntax; long: type, source, target,
//	                    read_only, tmpfs.size
//	service.secrets     short syntax; long: source, target, uid, gid, mode
//	network             driver (bridge), internal, external
//	volume              driver (local), external, x-custody-role
//	                    (evaluator)
//	secret              file, content, x-custody-credential
//	                    (environment is read only to refuse it, P5)
//
// Refused as unmodelled, among everything else (KeyTable gives each
// refused key its reason; this is the summary):
//   - include, extends, env_file, label_file: they read other files or the
//     caller's environment; a pack is one self-contained file.
//   - models, jobs, any x-* except the two above: not modelled yet.
//   - config environment, external, name, labels and drivers.
//   - use_api_socket, volumes_from, external_links, links,
//     scale, runtime, pull_policy,
//     dns_opt, dns_search, group_add, ipc/oom/cpu tuning
//     (cpu_shares, cpuset, mem_reservation, ...), device_cgroup_rules,
//     gpus, storage_opt, develop, post_start/pre_stop hooks, provider:
//     each reaches host state, engine authority or a fixed native name
//     that custody does not yet check; refusing is the safe default.
//   - deploy.placement, deploy.replicas, deploy.restart_policy,
//     deploy.resources.reservations, deploy.resources.limits.devices, ...:
//     swarm-era settings compose partly drops outside swarm.
//   - network ipam, driver_opts, name, labels, attachable, enable_ipv6;
//     volume driver_opts (a local driver_opts bind reaches any host path),
//     name, labels; secret name, external, driver: backend choices or
//     host paths custody does not model.
//   - bind propagation/selinux/create_host_path, volume nocopy/subpath,
//     consistency, port mode/name/app_protocol, network aliases and
//     addresses, depends_on restart/required, healthcheck start_interval.
//
// The YAML itself is held to a plain subset: one document, no anchors,
// aliases, merge keys (<<) or custom tags (!reset, !override), string keys,
// and no duplicate keys; see the limits in load.go.
type spec struct {
	// keys lists the allowed keys of a mapping; free allows any key and
	// checks each value against it.
	keys map[string]*spec
	free *spec
	// items is the spec of a sequence's items.
	items *spec
	// scalar allows a scalar here; check, if set, vets its text.
	scalar bool
	check  func(path, value string) error
	// notNull refuses a null here; str refuses a scalar that is not a
	// string (compose-go v2.16.2 panics on an int secret target).
	notNull bool
	str     bool
	// maxKeys caps a mapping's entries below maxEntries (services).
	maxKeys int
	// keyCheck, if set, vets each key of a free mapping.
	keyCheck func(path, key string) error
}

func scalarSpec() *spec { return &spec{scalar: true} }

// listOrScalar is a scalar or a sequence of scalars (command, tmpfs, ...).
func listOrScalar() *spec { return &spec{scalar: true, items: scalarSpec()} }

// kvSpec is a list of "K=V" or a mapping of K to a scalar.
func kvSpec() *spec { return &spec{items: scalarSpec(), free: scalarSpec()} }

// literalKV is a kvSpec whose every value is written out: compose fills a
// bare "K" or a "K:" with no value from the caller's environment (or, for
// build args, silently drops it), and packs are never interpolated (P5).
func literalKV() *spec {
	return &spec{
		items: &spec{scalar: true, check: func(path, v string) error {
			if !strings.Contains(v, "=") {
				return ambientValue(path, v)
			}
			return nil
		}},
		free: &spec{scalar: true, notNull: true},
	}
}

func ambientValue(path, key string) error {
	return &ValueError{Path: path, Value: key, Reason: "a key without a value is taken from the caller's environment in compose, and packs never are (P5)",
		Fix: "write " + key + "=<literal value>"}
}

func listOf(item *spec) *spec { return &spec{items: item} }

func keysOf(keys map[string]*spec) *spec { return &spec{keys: keys} }

// topSpec is the whole allowlist. It is built per call: specs are small and
// a package-level mutable map would be global state.
func topSpec() *spec {
	s := scalarSpec
	service := keysOf(map[string]*spec{
		"image": s(),
		"build": {scalar: true, check: noHome, keys: map[string]*spec{
			"context": {scalar: true, check: noHome}, "dockerfile": s(), "args": literalKV(),
		}},
		"command":     listOrScalar(),
		"entrypoint":  listOrScalar(),
		"environment": literalKV(),
		"user":        s(),
		"working_dir": s(),
		"hostname":    s(),
		"labels": {
			items: &spec{scalar: true, check: func(path, v string) error {
				return reservedLabel(path[:strings.LastIndex(path, "[")], strings.SplitN(v, "=", 2)[0])
			}},
			free:     scalarSpec(),
			keyCheck: func(path, k string) error { return reservedLabel(path, k) },
		},
		"depends_on": {items: s(), free: keysOf(map[string]*spec{
			"condition": {scalar: true, str: true},
		})},
		"healthcheck": keysOf(map[string]*spec{
			"test":     {scalar: true, str: true, items: &spec{scalar: true, str: true}},
			"interval": {scalar: true, str: true}, "timeout": {scalar: true, str: true},
			"start_period": {scalar: true, str: true}, "retries": {scalar: true, check: wholeNumber},
			"disable": s(),
		}),
		"networks": {items: s(), free: keysOf(map[string]*spec{})},
		"ports": listOf(&spec{scalar: true, check: noPortRange, keys: map[string]*spec{
			"target": s(), "published": {scalar: true, check: noPortRange}, "host_ip": s(), "protocol": s(),
		}}),
		"volumes": listOf(&spec{scalar: true, check: noHome, keys: map[string]*spec{
			"type": s(), "source": {scalar: true, check: noHome}, "target": s(), "read_only": s(),
			"tmpfs": keysOf(map[string]*spec{"size": s()}),
		}}),
		"tmpfs":          listOrScalar(),
		"expose":         listOf(&spec{scalar: true, check: noPortRange}),
		"container_name": {scalar: true, str: true, check: containerName},
		"init":           s(),
		"shm_size":       s(),
		"secrets": listOf(&spec{scalar: true, str: true, keys: map[string]*spec{
			"source": {scalar: true, str: true}, "target": {scalar: true, str: true}, "uid": s(), "gid": s(), "mode": s(),
		}}),
		"privileged":        s(),
		"cap_add":           listOf(s()),
		"cap_drop":          listOf(s()),
		"devices":           listOf(s()),
		"network_mode":      s(),
		"pid":               s(),
		"ipc":               s(),
		"uts":               s(),
		"userns_mode":       s(),
		"security_opt":      listOf(s()),
		"sysctls":           kvSpec(),
		"cgroup_parent":     s(),
		"cgroup":            s(),
		"restart":           s(),
		"read_only":         s(),
		"stop_signal":       s(),
		"stop_grace_period": s(),
		"extra_hosts":       {items: s(), free: listOrScalar()},
		"dns":               listOrScalar(),
		"platform":          {scalar: true, str: true},
		"logging":           keysOf(map[string]*spec{"driver": {scalar: true, str: true}, "options": kvSpec()}),
		"ulimits": {free: &spec{scalar: true, check: ulimitNumber, keys: map[string]*spec{
			"soft": {scalar: true, check: ulimitNumber}, "hard": {scalar: true, check: ulimitNumber},
		}}},
		"mem_limit":  s(),
		"cpus":       s(),
		"pids_limit": s(),
		"deploy": keysOf(map[string]*spec{
			"resources": keysOf(map[string]*spec{
				"limits": keysOf(map[string]*spec{"memory": s(), "cpus": s(), "pids": s()}),
			}),
		}),
		"profiles": listOf(&spec{scalar: true, str: true, check: profileName}),
		"configs": listOf(&spec{scalar: true, str: true, keys: map[string]*spec{
			"source": {scalar: true, str: true}, "target": {scalar: true, str: true}, "uid": s(), "gid": s(), "mode": s(),
		}}),
		extSystemd: s(),
		extRole:    {scalar: true, str: true, check: role(RoleParticipant, RoleEvaluator)},
	})
	return keysOf(map[string]*spec{
		"name":     {scalar: true, str: true, check: validProjectName},
		"version":  s(),
		"services": {free: service, maxKeys: MaxServices},
		"networks": {free: keysOf(map[string]*spec{"driver": s(), "internal": s(), "external": s()}), maxKeys: MaxResources},
		"volumes":  {free: keysOf(map[string]*spec{"driver": s(), "external": s(), extRole: {scalar: true, str: true, check: role(RoleEvaluator)}}), maxKeys: MaxResources},
		"secrets": {maxKeys: MaxResources, free: keysOf(map[string]*spec{
			"file": {scalar: true, check: noHome}, "content": s(), "environment": s(), extCredential: s(),
		})},
		"configs": {maxKeys: MaxResources, free: keysOf(map[string]*spec{
			"file": {scalar: true, str: true, check: noHome}, "content": {scalar: true, str: true},
		})},
	})
}

const (
	extSystemd    = "x-custody-systemd"
	extCredential = "x-custody-credential"
	extRole       = "x-custody-role"
)

// role vets an x-custody-role: one of the roles allowed where it is.
func role(allowed ...string) func(path, v string) error {
	return func(path, v string) error {
		if !slices.Contains(allowed, v) {
			return &ValueError{Path: path, Value: v, Reason: "not a role custody knows here", Fix: "write " + strings.Join(allowed, " or ")}
		}
		return nil
	}
}

var containerNameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// containerName vets container_name:, which becomes a network alias.
func containerName(path, v string) error {
	if !containerNameRe.MatchString(v) {
		return &ValueError{Path: path, Value: v, Reason: "not a container name that can serve as a network alias",
			Fix: "use letters, digits, '_', '.' and '-' (at most 63), starting with a letter or digit"}
	}
	return nil
}

var profileRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// profileName vets a profile name as compose does.
func profileName(path, v string) error {
	if !profileRe.MatchString(v) {
		return &ValueError{Path: path, Value: v, Reason: "not a profile name", Fix: "use letters, digits, '_', '.' and '-', at least two, starting with a letter or digit"}
	}
	return nil
}

// reservedLabel refuses a label under custody's ownership prefix (P4).
func reservedLabel(path, key string) error {
	if strings.HasPrefix(strings.ToLower(key), ReservedLabelPrefix) {
		return &ValueError{Path: path, Value: key, Code: "reserved-label", Reason: "labels under " + ReservedLabelPrefix + " are custody's ownership labels and a pack may not set them (P4)", Fix: "use another label prefix"}
	}
	return nil
}

// noHome refuses a leading ~: compose-go expands it from the process's
// home directory, which is ambient state, not pack content.
func noHome(path, v string) error {
	if strings.HasPrefix(v, "~") {
		return &ValueError{Path: path, Value: v, Reason: "a path starting with ~ is expanded from the caller's home directory (ambient state, P5)",
			Fix: "write a path relative to the pack's directory, or an absolute path"}
	}
	return nil
}

// noPortRange refuses ranges: compose-go expands "1-65535" into one entry
// per port, an unbounded blow-up of one short line, and custody models one
// requirement per port.
// ulimitNumber refuses a ulimit that is not a whole number in range
// before compose-go reads it (it panics on one that YAML reads as a
// float).
func ulimitNumber(path, v string) error {
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return &ValueError{Path: path, Value: v, Reason: "a ulimit is a whole number", Fix: "write a number such as 4096"}
	}
	return nil
}

// wholeNumber refuses a count that is not a whole number before compose-go
// reads it.
func wholeNumber(path, v string) error {
	if _, err := strconv.ParseUint(v, 10, 32); err != nil {
		return &ValueError{Path: path, Value: v, Reason: "a count is a whole number", Fix: "write a number such as 3"}
	}
	return nil
}

func noPortRange(path, v string) error {
	if strings.Contains(v, "-") {
		return &ValueError{Path: path, Value: v, Reason: "port ranges are not modelled",
			Fix: "list each published port on its own"}
	}
	return nil
}

// walker checks one document's nodes against the allowlist and the YAML
// subset, counts them, and collects every refusal in file order: a
// refused key is not descended into, and the rest of the file is still
// judged, so one answer names every refused requirement.
type walker struct {
	nodes int
	errs  []error
	// stop is set once the node cap is hit: nothing more is judged.
	stop bool
	// lines holds the line of every key and item by path, so refusals
	// found after the walk (on compose-go's model) sort into file order.
	lines map[string]int
	// schema caches the specification's key patterns (schemaKeys).
	schema map[string]bool
}

func (w *walker) refuse(err error) { w.errs = append(w.errs, err) }

// walk judges n against s. path is the concrete key path as written
// ("services.web.ports[0]"); pat is its pattern in the key table
// ("services.*.ports[]").
func (w *walker) walk(n *yaml.Node, s *spec, path, pat string, depth int) {
	if w.stop {
		return
	}
	w.nodes++
	if w.nodes > maxNodes {
		w.refuse(&LimitError{Reason: fmt.Sprintf("more than %d YAML nodes", maxNodes), Fix: "split the scenario into smaller packs"})
		w.stop = true
		return
	}
	if depth > maxDepth {
		w.refuse(&LimitError{Path: path, Reason: fmt.Sprintf("nested deeper than %d", maxDepth), Fix: "flatten the value"})
		return
	}
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		w.refuse(&ValueError{Path: path, Value: "&" + n.Anchor, Reason: "YAML anchors and aliases are not modelled (they hide what a key holds and can expand without bound)",
			Fix: "write each value out in full"})
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		w.scalar(n, s, path)
	case yaml.SequenceNode:
		if n.Tag != "!!seq" {
			w.refuse(&ValueError{Path: path, Value: n.Tag, Reason: "custom YAML tags are not modelled", Fix: "remove the tag"})
			return
		}
		if s.items == nil {
			w.refuse(&ValueError{Path: path, Value: "[...]", Reason: "a list is not modelled here", Fix: "use the documented form of this key"})
			return
		}
		if len(n.Content) > maxEntries {
			w.refuse(&LimitError{Path: path, Reason: fmt.Sprintf("%d entries, more than %d", len(n.Content), maxEntries), Fix: "split the scenario into smaller packs"})
			return
		}
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			w.lines[p] = c.Line
			w.walk(c, s.items, p, pat+"[]", depth+1)
		}
	case yaml.MappingNode:
		w.mapping(n, s, path, pat, depth)
	default:
		w.refuse(&ValueError{Path: path, Value: n.Value, Reason: "unexpected YAML node", Fix: "write a plain compose file"})
	}
}

func (w *walker) scalar(n *yaml.Node, s *spec, path string) {
	if !plainTag(n.Tag) {
		w.refuse(&ValueError{Path: path, Value: n.Tag, Reason: "custom or non-plain YAML tags (!reset, !override, !!binary, timestamps) are not modelled",
			Fix: "remove the tag, or quote the value"})
		return
	}
	// null is compose's "empty mapping" (volumes: {data: }). Anywhere
	// else it is refused: compose-go v2.16.2 panics on some (pid:).
	if n.Tag == "!!null" {
		if s.notNull {
			w.refuse(ambientValue(path, path[strings.LastIndex(path, ".")+1:]))
		} else if s.keys == nil && s.free == nil {
			w.refuse(&ValueError{Path: path, Reason: "an empty value is not modelled here", Fix: "write a value, or remove the key"})
		}
		return
	}
	if !s.scalar {
		w.refuse(&ValueError{Path: path, Value: n.Value, Reason: "a scalar is not modelled here", Fix: "use the mapping or list form"})
		return
	}
	if s.str && n.Tag != "!!str" {
		w.refuse(&ValueError{Path: path, Value: n.Value, Reason: "a string is expected here", Fix: "quote the value"})
		return
	}
	if err := noInterpolation(path, n.Value); err != nil {
		w.refuse(err)
		return
	}
	if s.check != nil {
		if err := s.check(path, n.Value); err != nil {
			w.refuse(err)
		}
	}
}

func (w *walker) mapping(n *yaml.Node, s *spec, path, pat string, depth int) {
	if n.Tag != "!!map" {
		w.refuse(&ValueError{Path: path, Value: n.Tag, Reason: "custom YAML tags are not modelled", Fix: "remove the tag"})
		return
	}
	if s.keys == nil && s.free == nil {
		if r, ok := refusedUnder()[pat]; ok {
			// The long form of a key custody models only in short.
			w.refuse(&ValueError{Path: path, Value: "{...}", Code: "unmodelled-form", Reason: r.reason, Fix: r.fix})
			return
		}
		w.refuse(&ValueError{Path: path, Value: "{...}", Reason: "a mapping is not modelled here", Fix: "use the documented form of this key"})
		return
	}
	if limit := cmp.Or(s.maxKeys, maxEntries); len(n.Content)/2 > limit {
		w.refuse(&LimitError{Path: path, Reason: fmt.Sprintf("%d entries, more than %d", len(n.Content)/2, limit), Fix: "split the scenario into smaller packs"})
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		w.nodes++
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" || k.Anchor != "" {
			if k.Tag == "!!merge" {
				w.refuse(&ValueError{Path: path, Value: "<<", Reason: "YAML merge keys are not modelled", Fix: "write each key out in full"})
			} else {
				w.refuse(&ValueError{Path: path, Value: k.Value, Reason: "a mapping key must be a plain string", Fix: "quote the key"})
			}
			continue
		}
		p := join(path, k.Value)
		w.lines[p] = k.Line
		if seen[k.Value] {
			w.refuse(&ValueError{Path: path, Value: k.Value, Reason: "duplicate key", Fix: "write each key once"})
			continue
		}
		seen[k.Value] = true
		if s.keyCheck != nil {
			if err := s.keyCheck(path, k.Value); err != nil {
				w.refuse(err)
				continue
			}
		}
		child, childPat := s.free, join(pat, "*")
		if s.keys != nil {
			child, childPat = s.keys[k.Value], join(pat, k.Value)
		}
		if child == nil {
			w.refuse(w.unmodelled(path, pat, k.Value))
			continue
		}
		w.walk(v, child, p, childPat, depth+1)
	}
}

// plainTag reports a core-schema scalar tag that decodes to a string,
// number, bool or null.
func plainTag(tag string) bool {
	return slices.Contains([]string{"!!str", "!!int", "!!float", "!!bool", "!!null"}, tag)
}

// noInterpolation refuses any variable reference, using compose-go's own
// template syntax so that what is refused is exactly what compose would
// have substituted. "$$" (a literal $) needs no lookup and passes.
func noInterpolation(path, v string) error {
	if !strings.Contains(v, "$") {
		return nil
	}
	var name string
	_, err := template.SubstituteWithOptions(v, func(k string) (string, bool) {
		if name == "" {
			name = k
		}
		return "", false
	}, template.WithoutLogging)
	if name != "" {
		return &InterpolationError{Path: path, Variable: name}
	}
	if err != nil {
		return &InterpolationError{Path: path}
	}
	return nil
}
