package grant

import "github.com/custody-dev/custody/internal/testenv"

// DecodePathsAgree holds decodeStatement to decodeStatementExplained.
func DecodePathsAgree(payload []byte) error {
	return testenv.SameDecoding(payload, decodeStatement, decodeStatementExplained)
}

// PackDecodePathsAgree holds decodePackStatement to
// decodePackStatementExplained.
func PackDecodePathsAgree(payload []byte) error {
	return testenv.SameDecoding(payload, decodePackStatement, decodePackStatementExplained)
}
