package oci

import (
	"fmt"

	"github.com/custody-dev/custody/backend"
)

func (c *Container) fault(stage string) {
	if c.faults != nil {
		c.faults(stage)
	}
}

// identify reads a resource's native identity once it was made, for the
// next flushCreated.
func (c *Container) identify(kind, name string, ident func(string) (map[string]string, error)) error {
	id, err := ident(name)
	if err != nil {
		return fmt.Errorf("identify %s %s: %w", kind, name, err)
	}
	c.idents[kind+"\x00"+name] = id
	c.pending = append(c.pending, backend.Resource{Kind: kind, Name: name, Identity: id})
	return nil
}

// intendMounts notes the mounts among es, intents on record, for cleanup
// to account for.
func (c *Container) intendMounts(es ...backend.Resource) {
	for _, e := range es {
		switch e.Kind {
		case KindLaunchMount, KindRootfsMount, KindOutputMount, KindScratchMount, KindInputMount:
			c.mountIntents = append(c.mountIntents, e)
		}
	}
}

// flushCreated records the identities gathered since the last flush in one
// durable record.
func (c *Container) flushCreated() error {
	es := c.pending
	c.pending = nil
	if err := c.rec.Created(es...); err != nil {
		return fmt.Errorf("journal identities: %w", err)
	}
	return nil
}

// recordRuntime journals the container with the identity of the runtime
// process that runs it (rt, from processIdentity), together with the
// identities Prepare gathered. Should the runner die, that process kills
// its containers and exits; recovery waits for exactly this process and
// reaches the container through runc's state, which holds its init's pid
// and start time (runc checks the start time before it signals).
func (c *Container) recordRuntime(rt map[string]string) error {
	id := map[string]string{"bundle": c.dir, "runtimePid": rt["pid"], "runtimeStartTime": rt["startTime"]}
	c.idents[KindContainer+"\x00"+c.id] = id
	c.pending = append(c.pending, backend.Resource{Kind: KindContainer, Name: c.id, Identity: id})
	return c.flushCreated()
}
