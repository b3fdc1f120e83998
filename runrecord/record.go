// Package runrecord is the run record: what the runner's store keeps of
// each run (its result, its owner, its signed receipt or why it has none)
// and that record's JSON, which is a stored format: records written
// before keep reading, and a record read and written again is the same
// bytes. It holds values only; nothing here runs work. The wire form of a
// result (api) and the receipt (evidence) are both made from these types.
package runrecord

import (
	"encoding/json"
	"strconv"
)

// Receipt is a signed receipt: the DSSE envelope, the same as a Sigstore
// bundle (compact: every document that carries it compacts it anyway), and
// the runner key (PEM) that signed it. The JSON names are the run record's.
type Receipt struct {
	Envelope        json.RawMessage `json:"envelope"`
	Bundle          json.RawMessage `json:"bundle"`
	RunnerPublicKey string          `json:"runnerPublicKey"`
}

// Record is what the store keeps of a run (its JSON is the store's run
// record format, unchanged since records were first written; see
// testdata): the result, its owner, its signed receipt, or why a run that
// launched has none.
type Record struct {
	Owner        uint32   `json:"owner"`
	Result       *Result  `json:"result"`
	Receipt      *Receipt `json:"receipt,omitempty"`
	ReceiptError string   `json:"receiptError,omitempty"`
}

// Encode is json.Marshal(rec), byte for byte (TestRecordEncodeIsMarshal),
// written without re-formatting the receipt: encoding/json re-scans and
// re-compacts every json.RawMessage it marshals, and the envelope and the
// bundle are most of a record's bytes. A Receipt's bytes are only ever
// made by the launch's signing (the envelope is evidence.SignReceipt's
// encoding/json output, the bundle evidence.BundleCompact's) or read back
// from a record this wrote, so they are valid and compact already, and neither can hold the characters
// json.Marshal would escape (<, >, &: base64, hex key ids, a fixed media
// type); they go in as they are.
func (rec Record) Encode() ([]byte, error) {
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
