package evidence

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed receipt.schema.json
var receiptSchemaJSON []byte

// receiptSchemaURL is the receipt schema's $id.
const receiptSchemaURL = "https://custody.dev/schemas/v1alpha1/receipt.schema.json"

// ReceiptSchema returns the JSON Schema (draft 2020-12) of a receipt file:
// the DSSE envelope, and in $defs/statement the in-toto statement its
// payload carries, every receipt version (v1 to v6) included. The caller
// owns the returned slice.
func ReceiptSchema() []byte { return bytes.Clone(receiptSchemaJSON) }

// CheckReceiptSchema checks a receipt file's shape against ReceiptSchema:
// the envelope, then its base64 payload decoded, against the statement
// (JSON Schema only annotates encoded content, so the payload is decoded
// here). It says nothing of the signature: Verify does.
func CheckReceiptSchema(envelope []byte) error {
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(receiptSchemaJSON))
	if err != nil {
		return fmt.Errorf("receipt schema: %w", err)
	}
	if err := c.AddResource(receiptSchemaURL, doc); err != nil {
		return fmt.Errorf("receipt schema: %w", err)
	}
	validate := func(what, ref string, data []byte) error {
		sch, err := c.Compile(ref)
		if err != nil {
			return fmt.Errorf("receipt schema: %w", err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := sch.Validate(inst); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := validate("receipt envelope", receiptSchemaURL, envelope); err != nil {
		return err
	}
	var env struct {
		Payload string `json:"payload"`
	}
	if err := json.Unmarshal(envelope, &env); err != nil {
		return fmt.Errorf("receipt envelope: %w", err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return fmt.Errorf("receipt payload: %w", err)
	}
	return validate("receipt statement", receiptSchemaURL+"#/$defs/statement", payload)
}
