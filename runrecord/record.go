package launch

import (
	"encoding/json"
	"strconv"
)

// encode is json.Marshal(rec), byte for byte (TestRecordEncodeIsMarshal),
// written without re-formatting the receipt: encoding/json re-scans and
// re-compacts every json.RawMessage it marshals, and the envelope and the
// bundle are most of a record's bytes. A Receipt's bytes are only ever
// made by receipt (the envelope is SignReceipt's encoding/json output, the
// bundle BundleCompact's) or read back from a record this wrote, so they
// are valid and compact already, and neither can hold the characters
// json.Marshal would escape (<, >, &: base64, hex key ids, a fixed media
// type); they go in as they are.
func (rec Record) encode() ([]byte, error) {
	res, err := json.Marshal(rec.Result)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(res)+256+recordReceiptLen(rec.Receipt))
	b = append(b, `{"owner":`...)
	b = strconv.AppendUint(b, uint64(rec.Owner), 10)
	b = append(b, `,"result":`...)
	b = append(b, res...)
	if r := rec.Receipt; r != nil {
		b = append(b, `,"receipt":{"envelope":`...)
		b = appendRaw(b, r.Envelope)
		b = append(b, `,"bundle":`...)
		b = appendRaw(b, r.Bundle)
		key, err := json.Marshal(r.RunnerPublicKey)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"runnerPublicKey":`...)
		b = append(b, key...)
		b = append(b, '}')
	}
	if rec.ReceiptError != "" {
		msg, err := json.Marshal(rec.ReceiptError)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"receiptError":`...)
		b = append(b, msg...)
	}
	return append(b, '}'), nil
}

func recordReceiptLen(r *Receipt) int {
	if r == nil {
		return 0
	}
	return len(r.Envelope) + len(r.Bundle) + len(r.RunnerPublicKey)
}

// appendRaw appends a raw value as json.Marshal writes a json.RawMessage:
// null when empty.
func appendRaw(b, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
}
