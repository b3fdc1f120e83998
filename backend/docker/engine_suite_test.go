package docker

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/custody-dev/custody/backend/backendtest"
)

var (
	_           backendtest.PackEngine = (*Packs)(nil)
	suiteSubnet atomic.Int32
)

// TestPackEngineContract runs the pack engine suite against the docker
// engine on the isolated daemon.
func TestPackEngineContract(t *testing.T) {
	backendtest.EngineSuite(t, func(t *testing.T) backendtest.EngineFixture {
		d, dt := open(t)
		return backendtest.EngineFixture{Engine: NewPacks(d, ProbeOptions{Image: dt.Image}), Image: dt.Image,
			Subnet: fmt.Sprintf("10.213.%d.0/24", suiteSubnet.Add(1))}
	})
}
