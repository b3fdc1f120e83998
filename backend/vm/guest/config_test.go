package guest

import (
	"errors"
	"reflect"
	"testing"
)

func sampleConfig() Config {
	return Config{
		Modules: []string{"virtio_ring.ko", "virtio_blk.ko"}, PortModules: []string{"virtio_console.ko"}, Args: []string{"/bin/sh", "-c", "echo 'hi'\n"},
		Env: []string{"PATH=/bin", "EMPTY="}, Cwd: "/work", Hostname: "custody", UID: 65534, GID: 4294967295,
		Inputs: []string{"/in", "/src"}, OutputPath: "/out", OutputBytes: 64 << 20, OutputFiles: -1, TmpBytes: 1,
		Memory: 1 << 40, Pids: 64, CPU: 0.25, FileSize: 4 << 20, Seccomp: true, RootInInitramfs: true,
		Pooled: true, Seed: []byte("0123456789abcdef"),
	}
}

func TestConfigRoundTrip(t *testing.T) {
	for _, c := range []Config{sampleConfig(), {Args: []string{"/bin/true"}}, {}} {
		data, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Config
		if err := got.UnmarshalBinary(data); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip: %+v, want %+v", got, c)
		}
	}
}

// Every cut of an encoding, a trailing byte, another magic and a bool
// that is not 0 or 1 are refused, and leave the Config as it was.
func TestConfigRefusesMalformed(t *testing.T) {
	c := sampleConfig()
	data, _ := c.MarshalBinary()
	bad := [][]byte{append(append([]byte{}, data...), 0), []byte("custody-guest-config/1\n"), nil}
	for n := range len(data) {
		bad = append(bad, data[:n])
	}
	flipped := append([]byte{}, data...)
	// The Pooled bool: before the seed and its one-byte length.
	flipped[len(flipped)-len(c.Seed)-2] = 2
	bad = append(bad, flipped)
	for _, b := range bad {
		got := Config{Cwd: "unchanged"}
		if err := got.UnmarshalBinary(b); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want ErrConfig", b, err)
		}
		if !reflect.DeepEqual(got, Config{Cwd: "unchanged"}) {
			t.Errorf("%q: a refused decode changed the config: %+v", b, got)
		}
	}
}

func FuzzConfig(f *testing.F) {
	c := sampleConfig()
	data, _ := c.MarshalBinary()
	f.Add(data)
	f.Add([]byte(configMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if err := c.UnmarshalBinary(data); err != nil {
			return
		}
		again, _ := c.MarshalBinary()
		var d Config
		if err := d.UnmarshalBinary(again); err != nil || !reflect.DeepEqual(c, d) {
			t.Fatalf("re-encoding %+v: %v, %+v", c, err, d)
		}
	})
}
