package dsse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeEnvelope checks the fast path against the member-by-member
// one: whatever DecodeEnvelope accepts, the strict path accepts with the
// same result, and whatever it refuses, the strict path refuses too.
func FuzzDecodeEnvelope(f *testing.F) {
	canonical := fmt.Sprintf(`{"payloadType":"application/vnd.in-toto+json","payload":%q,"signatures":[{"keyid":"k1","sig":%q}]}`, b64("{}"), b64("sig"))
	for _, seed := range []string{
		canonical,
		canonical + "\n",
		fmt.Sprintf(`{"signatures":[{"sig":%q,"keyid":"k1"}],"payload":%q,"payloadType":"application/vnd.in-toto+json"}`, b64("sig"), b64("{}")),
		fmt.Sprintf(`{"payloadType":"application/vnd.in-toto+json","payload":%q,"signatures":[{"keyid":"k1","sig":%q},{"keyid":"k1","sig":%q}]}`, b64("{}"), b64("a"), b64("b")),
		fmt.Sprintf(`{"payloadType":"application/vnd.in-toto+json","payload":%q,"signatures":null}`, b64("{}")),
		fmt.Sprintf(`{"PayloadType":"application/vnd.in-toto+json","payload":%q,"signatures":[{"keyid":"k1","sig":%q}]}`, b64("{}"), b64("sig")),
		fmt.Sprintf(`{"payloadType":"application/vnd.in-toto+json","payload":%q,"payload":%q,"signatures":[{"keyid":"k1","sig":%q}]}`, b64("{}"), b64("[]"), b64("sig")),
		`{"payloadType":"application/vnd.in-toto+json","payload":"e30","signatures":[{"keyid":"k1","sig":"c2ln"}]}`,
		`{"payloadType":"\u0061pplication/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"k1","sig":"c2ln"}]}`,
		`[]`, `{}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeEnvelope(data, testLimits)
		want, werr := decodeEnvelopeStrict(data, testLimits)
		if (err == nil) != (werr == nil) {
			t.Fatalf("DecodeEnvelope err %v, strict path err %v, for %q", err, werr, data)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeEnvelope %+v, strict path %+v, for %q", got, want, data)
		}
		if err != nil && err.Error() != werr.Error() {
			t.Fatalf("refusals differ: %v / %v", err, werr)
		}
	})
}

// canonicalProbe has a field of each kind custody statements hold.
type canonicalProbe struct {
	S string            `json:"s"`
	O string            `json:"o,omitempty"`
	I int64             `json:"i"`
	F float64           `json:"f"`
	B bool              `json:"b"`
	T time.Time         `json:"t"`
	L []string          `json:"l"`
	M map[string]string `json:"m"`
	R json.RawMessage   `json:"r"`
	P *canonicalInner   `json:"p,omitempty"`
	N []canonicalInner  `json:"n"`
}

type canonicalInner struct {
	X int  `json:"x"`
	Y bool `json:"y,omitempty"`
}

// FuzzDecodeCanonical holds DecodeCanonical, which decodes with
// encoding/json/v2, to the same decision made with encoding/json alone,
// and to the same decoded value when both accept.
func FuzzDecodeCanonical(f *testing.F) {
	good, err := CanonicalJSON(Statement[canonicalProbe]{
		Type: StatementType, Subject: []Subject{{Name: "a<b>&\u2028", Digest: map[string]string{"sha256": "00", "a": "1"}}},
		PredicateType: "p", Predicate: canonicalProbe{
			S: "x\"\\\n\t\u0001é", I: -7, F: 1.5, B: true, T: time.Date(2026, 3, 1, 10, 0, 0, 500, time.UTC),
			L: []string{}, M: map[string]string{"k": "v"}, R: json.RawMessage(`{"a":[1,2.5e-7,null,true]}`),
			P: &canonicalInner{X: 1}, N: []canonicalInner{{X: 2, Y: true}},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	if !DecodeCanonical(good, &Statement[canonicalProbe]{}) {
		f.Fatalf("DecodeCanonical refuses its own canonical form %s", good)
	}
	g := string(good)
	for _, seed := range []string{
		g,
		g + "\n",
		strings.Replace(g, `"s":`, `"S":`, 1),
		strings.Replace(g, `"i":-7`, `"i":-7,"i":-7`, 1),
		strings.Replace(g, `"i":-7`, `"i":-7.0`, 1),
		strings.Replace(g, `"f":1.5`, `"f":15e-1`, 1),
		strings.Replace(g, `"l":[]`, `"l":null`, 1),
		strings.Replace(g, `{"a":[`, `{ "a":[`, 1),
		strings.Replace(g, `"r":{"a":[1,2.5e-7,null,true]}`, `"r":null`, 1),
		strings.Replace(g, `T10:00:00.0000005Z`, `T10:00:00.0000005+00:00`, 1),
		strings.Replace(g, `é`, "\xff", 1),
		strings.Replace(g, `é`, `\u00e9`, 1),
		strings.Replace(g, `"x":1`, `"x":1,"z":0`, 1),
		`{}`, `null`, `[]`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Statement[canonicalProbe]
		ok := DecodeCanonical(data, &got)
		wantOK := json.Unmarshal(data, &want) == nil
		if wantOK {
			again, err := CanonicalJSON(&want)
			wantOK = err == nil && bytes.Equal(again, data)
		}
		if ok != wantOK {
			t.Fatalf("DecodeCanonical %v, encoding/json %v, for %q", ok, wantOK, data)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeCanonical %+v, encoding/json %+v, for %q", got, want, data)
		}
	})
}

// FuzzIsCompactJSON holds IsCompactJSON to json.Compact.
func FuzzIsCompactJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e+7,true,false,null,"x y\\"\\\\"],"b":{}}`,
		`{"a": 1}`, `{"a":1} `, ` 1`, "[1,\n2]", `"\t"`, "\"\t\"", `{"a":1,"a":2}`, "\"\xff\"",
		`{"a":1`, `{"a":01}`, `"\u00"`, `"\\"`, `"\"`, `1 2`, `[]`, ``, `nul`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c bytes.Buffer
		want := json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b)
		if got := IsCompactJSON(b); got != want {
			t.Fatalf("IsCompactJSON %v, json.Compact says %v, for %q", got, want, b)
		}
	})
}
