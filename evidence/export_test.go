package evidence

import "github.com/custody-dev/custody/internal/testenv"

// DecodePathsAgree holds decodeReceiptStatement to
// decodeReceiptStatementExplained.
func DecodePathsAgree(payload []byte) error {
	return testenv.SameDecoding(payload, decodeReceiptStatement, decodeReceiptStatementExplained)
}

// PackDecodePathsAgree holds decodePackStatement to
// decodePackStatementExplained.
func PackDecodePathsAgree(payload []byte) error {
	return testenv.SameDecoding(payload, decodePackStatement, decodePackStatementExplained)
}

// GrantEnvelope is the raw JSON the fast decoding of a receipt statement
// leaves uncompacted.
var GrantEnvelope = grantEnvelope

// EncodeReceiptAs encodes r's statement as predicateType, unvalidated, so
// that tests can sign receipts of the versions custody no longer makes.
func EncodeReceiptAs(predicateType string, r *Receipt) ([]byte, error) {
	normalize(r)
	return encodeStatement(predicateType, subjectsOf(&r.Output), r)
}
