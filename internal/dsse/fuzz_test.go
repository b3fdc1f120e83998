package dsse

import (
	"fmt"
	"reflect"
	"testing"
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
