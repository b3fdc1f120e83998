package evidence

import (
	"crypto/sha256"
	"encoding/hex"

	cdsse "github.com/custody-dev/custody/internal/dsse"
)

// checkGrantRef checks the grant a receipt (of a phase or of a pack)
// embeds: its id, issuer, and an envelope embedded verbatim whose SHA-256
// is the one recorded.
func checkGrantRef(ps *problems, g *GrantRef) {
	if len(g.ID) != 32 || !cdsse.IsLowerHex(g.ID) {
		ps.add("grant.id", "%q is not 32 lowercase hex digits", cdsse.Clip(g.ID))
	}
	ps.keyID("grant.issuerId", g.IssuerID)
	ps.hex64("grant.envelopeSha256", g.EnvelopeSHA256)
	switch {
	case len(g.Envelope) == 0 || g.Envelope[0] != '{':
		ps.add("grant.envelope", "not a JSON object")
	case !cdsse.IsCompactJSON(g.Envelope):
		ps.add("grant.envelope", "not compact JSON (it must be embedded verbatim, without insignificant whitespace)")
	default:
		sum := sha256.Sum256(g.Envelope)
		if got := hex.EncodeToString(sum[:]); cdsse.IsHex64(g.EnvelopeSHA256) && got != g.EnvelopeSHA256 {
			ps.add("grant.envelopeSha256", "%s is not the SHA-256 of grant.envelope (%s)", g.EnvelopeSHA256, got)
		}
	}
}
