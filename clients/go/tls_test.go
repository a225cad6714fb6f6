package fencelock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fencelock.example/fencelock"
)

func TestAnHTTPSServerIsTrustedThroughTheCAFile(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := certificates(t, dir)
	s := startServer(t, "--tls-cert", cert, "--tls-key", key)
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("the server listens at %s", s.URL)
	}

	trusting := newClient(t, s, fencelock.WithCAFile(ca))
	lease, err := trusting.Lock(context.Background(), "payment:42")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Without the CA, the system's roots do not know the server's certificate.
	_, err = newClient(t, s).Lock(context.Background(), "payment:42")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("got %v; want an unknown authority", err)
	}
}

func TestTheTokenAndTheCAFileDefaultToTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := certificates(t, dir)
	auth := authFile(t, dir, principal{name: "billing", token: "billing-secret", prefix: "payment:", rights: []string{"read", "lock"}})
	s := startServer(t, "--auth", auth, "--tls-cert", cert, "--tls-key", key)
	t.Setenv(fencelock.AuthTokenVar, "billing-secret")
	t.Setenv(fencelock.CACertVar, ca)

	lease, err := newClient(t, s).Lock(context.Background(), "payment:42")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// An option given wins over the environment.
	_, err = newClient(t, s, fencelock.WithAuthToken("wrong")).Lock(context.Background(), "payment:42")
	var problem *fencelock.Problem
	if !errors.As(err, &problem) || problem.Status != 401 {
		t.Fatalf("got %v; want a 401 problem", err)
	}
}

// certificates writes a CA, and a certificate it signed for 127.0.0.1 with its key, as PEM
// files into dir, and returns their paths.
func certificates(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sign := func(template, parent *x509.Certificate, public, signer any) []byte {
		der, err := x509.CreateCertificate(rand.Reader, template, parent, public, signer)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	now := time.Now()
	caKey := newKey()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencelock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER := sign(caTemplate, caTemplate, &caKey.PublicKey, caKey)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	serverKey := newKey()
	serverDER := sign(&x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caCert, &serverKey.PublicKey, caKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(serverKey)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", serverDER), write("key.pem", "PRIVATE KEY", keyDER)
}
