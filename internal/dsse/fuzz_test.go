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

// canonicalSeeds adds a canonical statement and near misses of it.
func canonicalSeeds(f *testing.F) {
	good, err := CanonicalJSON(Statement[canonicalProbe]{
		Type: StatementType, Subject: []Subject{{Name: "a<b>&\u2028", Digest: map[string]string{"sha256": "00", "a": "1"}}},
		PredicateType: "p", Predicate: canonicalProbe{
			S: "x\"\\\n\t\u0001é/", I: -7, F: 1.5, B: true, T: time.Date(2026, 3, 1, 10, 0, 0, 500, time.UTC),
			L: []string{}, M: map[string]string{"k": "v"}, R: json.RawMessage(`{"a":[1,2.5e-7,null,true,"\/"]}`),
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
	for _, seed := range []string{g, g + "\n", `{}`, `null`, `[]`, ``} {
		f.Add([]byte(seed))
	}
	for _, miss := range [][2]string{
		{`"s":`, `"S":`},
		{`"i":-7`, `"i":-7,"i":-7`},
		{`"i":-7`, `"i":-7.0`},
		{`"f":1.5`, `"f":15e-1`},
		{`"l":[]`, `"l":null`},
		{`{"a":[`, `{ "a":[`},
		{`"r":{"a":[1,2.5e-7,null,true,"\/"]}`, `"r":null`},
		{`"r":{"a":[1,2.5e-7,null,true,"\/"]}`, `"r":"\/"`},
		{`"r":{"a":[1,2.5e-7,null,true,"\/"]},`, ``},
		{`"s":"x`, `"s":"\/x`},
		{`T10:00:00.0000005Z`, `T10:00:00.0000005+00:00`},
		{`é`, "\xff"},
		{`é`, `\u00e9`},
		{`"x":1`, `"x":1,"z":0`},
	} {
		if !strings.Contains(g, miss[0]) {
			f.Fatalf("the canonical seed has no %s", miss[0])
		}
		f.Add([]byte(strings.Replace(g, miss[0], miss[1], 1)))
	}
}

// FuzzDecodeCanonical holds DecodeCanonical, which decodes with
// encoding/json/v2, to the same decision made with encoding/json alone,
// and to the same decoded value when both accept.
func FuzzDecodeCanonical(f *testing.F) {
	canonicalSeeds(f)
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

// FuzzDecodeCanonicalRaw holds DecodeCanonicalRaw to DecodeCanonical.
func FuzzDecodeCanonicalRaw(f *testing.F) {
	canonicalSeeds(f)
	raw := func(st *Statement[canonicalProbe]) *json.RawMessage { return &st.Predicate.R }
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Statement[canonicalProbe]
		ok, wantOK := DecodeCanonicalRaw(data, &got, raw), DecodeCanonical(data, &want)
		if ok != wantOK {
			t.Fatalf("DecodeCanonicalRaw %v, DecodeCanonical %v, for %q", ok, wantOK, data)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeCanonicalRaw %+v, DecodeCanonical %+v, for %q", got, want, data)
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
