package probe

import "testing"

// FuzzParse feeds every parser of the probe the same bytes: none may panic,
// and a parsed mount always has a target and a type.
func FuzzParse(f *testing.F) {
	f.Add([]byte("71 47 0:39 / / ro,nosuid - overlay overlay rw,lowerdir=/a\n"))
	f.Add([]byte("CapEff:\t0000000000000000\nSeccomp:\t2\n"))
	f.Add([]byte("    lo: 0 0\n"))
	f.Add([]byte("4:memory:/x\n0::/\n"))
	f.Add([]byte(`1 2 3 4 /a\0 b - c d e`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, _ := ParseMountInfo(data)
		for _, m := range ms {
			if m.Target == "" || m.FSType == "" {
				t.Fatalf("mount without target or type: %+v", m)
			}
		}
		ParseStatus(data)
		ParseNetDev(data)
		ParseIDMap(data)
		parseCgroupFile(data)
		ParseKeyValues(data)
		_, _ = ParseSize(string(data))
	})
}
