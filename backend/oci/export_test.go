package oci

// EncodeGoAhead lets the external tests compute the go-ahead a pooled
// launch sends, to check the receipt's evidence of it.
var EncodeGoAhead = encodeGoAhead
