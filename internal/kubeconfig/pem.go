package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
)

const certificateBlock = "CERTIFICATE"

// privateKeyBlocks are the PEM types tls.X509KeyPair can load.
var privateKeyBlocks = []string{"PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"}

var pemBegin = []byte("-----BEGIN")

// pemBlocks decodes data as one or more PEM blocks with nothing but whitespace
// around them. pem.Decode alone silently skips text and malformed blocks, so
// a file could carry content that no check ever sees.
func pemBlocks(data []byte) ([]*pem.Block, error) {
	var blocks []*pem.Block
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		if !bytes.HasPrefix(rest, pemBegin) {
			return nil, errors.New("contains text outside PEM blocks")
		}
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, errors.New("contains a malformed PEM block")
		}
		if len(block.Headers) > 0 {
			return nil, errors.New("PEM headers are not accepted (encrypted keys cannot be used)")
		}
		blocks = append(blocks, block)
		rest = bytes.TrimSpace(rest)
	}
	switch {
	case len(blocks) == 0:
		return nil, errors.New("contains no PEM block")
	case bytes.Count(data, pemBegin) != len(blocks):
		return nil, errors.New("contains a malformed PEM block")
	}
	return blocks, nil
}

// checkCertificates requires one or more PEM certificates that parse.
func checkCertificates(data []byte) error {
	blocks, err := pemBlocks(data)
	if err != nil {
		return err
	}
	for _, block := range blocks {
		if block.Type != certificateBlock {
			return errors.New("must contain only CERTIFICATE PEM blocks")
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return errors.New("contains a certificate that does not parse")
		}
	}
	return nil
}

// checkPrivateKey requires exactly one PEM private key block.
func checkPrivateKey(data []byte) error {
	blocks, err := pemBlocks(data)
	switch {
	case err != nil:
		return err
	case len(blocks) != 1 || !slices.Contains(privateKeyBlocks, blocks[0].Type):
		return errors.New("must contain exactly one PEM private key block")
	}
	return nil
}

// checkKeyPair validates a client certificate and key separately, then
// requires that they load together as one TLS identity.
func checkKeyPair(cert, key []byte, f fieldNames) error {
	if err := checkCertificates(cert); err != nil {
		return fieldErr(f.cert, err.Error())
	}
	if err := checkPrivateKey(key); err != nil {
		return fieldErr(f.key, err.Error())
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return fieldErr(f.key, "does not load as the private key of the client certificate")
	}
	return nil
}
