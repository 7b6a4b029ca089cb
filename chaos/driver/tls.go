package driver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Creds are a client's TLS material for the chaos cluster (TLS.auto): the client Secret
// `<cluster>-client-tls` that the operator writes, read again every second and whenever a
// server's certificate does not verify, as a client that mounts the Secret and reloads it
// would. A CA rotation replaces the CA and every certificate while the clients run: they
// follow it, and the run shows that no client is locked out for longer than that.
type Creds struct {
	env        *Env
	secret     string
	serverName string // the client Service's DNS name, which the server certificates carry

	mu   sync.RWMutex
	cert *tls.Certificate
	pool *x509.CertPool
	// The CA bundle as read last: the rotation is done when it holds the new CA alone.
	ca []byte
}

// newCreds reads the client Secret once (waiting for the operator to write it) and keeps it
// fresh until stop is closed.
func newCreds(e *Env, stop <-chan struct{}) (*Creds, error) {
	c := &Creds{env: e, secret: e.Cluster + "-client-tls", serverName: e.Cluster + "-client." + e.NS + ".svc"}
	if err := until("the client TLS Secret", 3*time.Minute, func() bool { return c.reload() == nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", err, c.reload())
	}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				_ = c.reload()
			}
		}
	}()
	return c, nil
}

func (c *Creds) reload() error {
	var s struct {
		Data map[string]string `json:"data"`
	}
	if err := c.env.kjson(&s, "get", "secret", c.secret); err != nil {
		return err
	}
	field := func(k string) []byte {
		b, _ := base64.StdEncoding.DecodeString(s.Data[k])
		return b
	}
	cert, err := tls.X509KeyPair(field("etcd-client.crt"), field("etcd-client.key"))
	if err != nil {
		return fmt.Errorf("%s: %w", c.secret, err)
	}
	ca := field("etcd-client-ca.crt")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s: no CA certificate in etcd-client-ca.crt", c.secret)
	}
	c.mu.Lock()
	c.cert, c.pool, c.ca = &cert, pool, ca
	c.mu.Unlock()
	return nil
}

// CA is the CA bundle read last.
func (c *Creds) CA() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ca
}

// Config is a client's TLS configuration: the client certificate read last, and the server's
// certificate checked against the CA read last for the client Service's name (the endpoints
// are IP addresses). Go's own verification cannot take a pool that changes, hence
// VerifyConnection.
func (c *Creds) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c.mu.RLock()
			defer c.mu.RUnlock()
			return c.cert, nil
		},
		// Verified below, against the CA as it is now.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := c.verify(cs)
			if err != nil {
				// The Secret may have changed since it was read last.
				if c.reload() == nil {
					err = c.verify(cs)
				}
			}
			return err
		},
	}
}

func (c *Creds) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	c.mu.RLock()
	pool := c.pool
	c.mu.RUnlock()
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: c.serverName, Roots: pool,
		Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}
