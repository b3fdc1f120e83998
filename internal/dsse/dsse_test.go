package dsse

import (
	"encoding/base64"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var testLimits = Limits{PayloadType: "application/vnd.in-toto+json", MaxSignatures: 2, MaxSignatureSize: 8}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestDecodeEnvelope(t *testing.T) {
	good := fmt.Sprintf(`{"signatures":[{"sig":%q,"keyid":"k1"}],"payload":%q,"payloadType":"application/vnd.in-toto+json"}`, b64("sig"), b64("{}"))
	env, err := DecodeEnvelope([]byte(good), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if string(env.Payload) != "{}" || len(env.Signatures) != 1 || env.Signatures[0].KeyID != "k1" || string(env.Signatures[0].Sig) != "sig" {
		t.Fatalf("decoded %+v", env)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"duplicate member": {strings.Replace(good, `{"signatures"`, `{"payloadType":"x","signatures"`, 1), `member "payloadType" appears twice`},
		"case-folded":      {strings.Replace(good, `"payloadType"`, `"PayloadType"`, 1), `unknown member "PayloadType"`},
		"null payloadType": {strings.Replace(good, `"application/vnd.in-toto+json"`, `null`, 1), "payloadType: <nil> is not a string"},
		"wrong type":       {strings.Replace(good, `vnd.in-toto+json`, `json`, 1), `payloadType "application/json" is not`},
		"trailing":         {good + "{}", "data after the JSON object"},
		"unpadded":         {strings.Replace(good, b64("{}"), base64.RawStdEncoding.EncodeToString([]byte("{}")), 1), "payload is not standard padded base64"},
		"no signatures":    {fmt.Sprintf(`{"payloadType":"application/vnd.in-toto+json","payload":%q,"signatures":[]}`, b64("{}")), "0 signatures, want 1 to 2"},
		"too many":         {strings.Replace(good, `[{`, `[{"keyid":"a","sig":"AA=="},{"keyid":"b","sig":"AA=="},{`, 1), "more than 2 signatures"},
		"empty keyid":      {strings.Replace(good, `"k1"`, `""`, 1), "signatures[0]: empty keyid"},
		"big sig":          {strings.Replace(good, b64("sig"), b64("123456789"), 1), "sig is 9 bytes, want 1 to 8"},
	} {
		_, err := DecodeEnvelope([]byte(tc.in), testLimits)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
	_, err = DecodeEnvelope([]byte(good[:20]), testLimits)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: err = %v", err)
	}
}

func TestCanonicalJSONAndStrictUnmarshal(t *testing.T) {
	st := Statement[map[string]string]{Type: StatementType, Subject: []Subject{{Name: "a<b", Digest: map[string]string{"z": "1", "a": "2"}}}, PredicateType: "p", Predicate: map[string]string{}}
	b, err := CanonicalJSON(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a<b","digest":{"a":"2","z":"1"}}],"predicateType":"p","predicate":{}}`
	if string(b) != want {
		t.Fatalf("CanonicalJSON = %s", b)
	}
	var back Statement[map[string]string]
	if err := StrictUnmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := StrictUnmarshal(append(b, '1'), &back); err == nil {
		t.Error("accepted trailing data")
	}
	if err := StrictUnmarshal([]byte(`{"x":1}`), &back); err == nil {
		t.Error("accepted an unknown field")
	}
}

func TestValidators(t *testing.T) {
	h := strings.Repeat("a", 64)
	if !IsDigest("sha256:"+h) || IsDigest(h) || !IsHex64(h) || IsHex64(strings.ToUpper(h)) || IsLowerHex("g") {
		t.Error("hex validators")
	}
	long := strings.Repeat("x", 100) + "\n"
	if err := CheckText(long, 4096, true); err == nil || strings.Contains(err.Error(), long[:90]) {
		t.Errorf("clipped CheckText = %v", err)
	}
	if err := CheckText(long, 4096, false); err == nil || !strings.Contains(err.Error(), strings.Repeat("x", 100)) {
		t.Errorf("unclipped CheckText = %v", err)
	}
	if CheckText("", 10, false) == nil || CheckText("12345678901", 10, false) == nil || CheckText("\xff", 10, false) == nil || CheckText("ok", 10, false) != nil {
		t.Error("CheckText")
	}
}

// TestLeaf checks that the package imports no other custody package.
func TestLeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/custody-dev/custody") {
				t.Errorf("%s imports %s; internal/dsse must import no custody package", name, p)
			}
		}
	}
}
