package fencelock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client talks to one fencelock server. It is safe for concurrent use: make one and share
// it (it keeps a pool of keep-alive connections).
type Client struct {
	base           string // the server's URL, without a trailing "/"
	http           *http.Client
	authToken      string
	requestTimeout time.Duration
	maxWait        time.Duration
}

// ClientOption configures a [Client] made by [New].
type ClientOption func(*clientConfig)

type clientConfig struct {
	authToken      string
	caFile         string
	httpClient     *http.Client
	requestTimeout time.Duration
	maxWait        time.Duration
}

// The environment variables a [Client] reads its defaults from, as the fencelock commands
// and the other clients do.
const (
	// AuthTokenVar holds the bearer token sent when no [WithAuthToken] is given.
	AuthTokenVar = "FENCELOCK_AUTH_TOKEN"
	// CACertVar holds the path of the CAs to trust (PEM) when no [WithCAFile] is given.
	CACertVar = "FENCELOCK_CACERT"
)

// WithAuthToken sends token as "Authorization: Bearer TOKEN" with every request, for a
// server with authentication on (fencelock serve --auth). Default: $FENCELOCK_AUTH_TOKEN,
// if set. Read it from the environment rather than a flag, which ps shows.
func WithAuthToken(token string) ClientOption {
	return func(c *clientConfig) { c.authToken = token }
}

// WithCAFile trusts only the certificates signed by the CAs in the PEM file at path, in
// place of the system's, for an https:// server. Default: $FENCELOCK_CACERT, if set (and
// no [WithHTTPClient] is given).
func WithCAFile(path string) ClientOption {
	return func(c *clientConfig) { c.caFile = path }
}

// WithHTTPClient sends the requests with h (its transport, proxies and TLS settings), in
// place of the client New makes. Its Timeout should be zero: every call sets its own
// deadline. Not with [WithCAFile]: set the CA on h's transport.
func WithHTTPClient(h *http.Client) ClientOption {
	return func(c *clientConfig) { c.httpClient = h }
}

// WithRequestTimeout sets how long one request may take in all (default 10 s); an acquire
// that waits in line gets its wait on top of this. A renewal gets at most this, and never
// more than the time left before its lease is given up.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.requestTimeout = d }
}

// WithMaxWaitPerRequest sets the longest wait sent in one acquire (default 300 s, the
// server's default --max-wait); a longer [Wait] is sent as several waiting requests in a
// row. Set it to the server's --max-wait if that is lower.
func WithMaxWaitPerRequest(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.maxWait = d }
}

// New makes a client of the fencelock server at server: "http://host:port" or
// "https://host:port", optionally with a path prefix (a server behind a reverse proxy). It
// does not connect: the first call does.
func New(server string, options ...ClientOption) (*Client, error) {
	config := clientConfig{requestTimeout: 10 * time.Second, maxWait: 300 * time.Second}
	for _, option := range options {
		option(&config)
	}
	if config.authToken == "" {
		config.authToken = os.Getenv(AuthTokenVar)
	}
	if config.caFile == "" && config.httpClient == nil {
		config.caFile = os.Getenv(CACertVar)
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, invalidOption("server address %q: %v", server, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, invalidOption("server address %q: expected http://host:port or https://host:port, without a query", server)
	}
	if config.requestTimeout <= 0 || config.maxWait < time.Millisecond {
		return nil, invalidOption("the request timeout and the longest wait per request must be positive")
	}
	httpClient := config.httpClient
	if httpClient == nil {
		if httpClient, err = newHTTPClient(config.caFile); err != nil {
			return nil, invalidOption("%v", err)
		}
	} else if config.caFile != "" {
		return nil, invalidOption("WithCAFile and WithHTTPClient together: set the CA on your client's transport")
	}
	return &Client{
		base:           strings.TrimSuffix(u.String(), "/"),
		http:           httpClient,
		authToken:      config.authToken,
		requestTimeout: config.requestTimeout,
		maxWait:        config.maxWait.Truncate(time.Millisecond),
	}, nil
}

// newHTTPClient is Go's default client with its own transport: keep-alive connections kept
// idle for less time than the server keeps them (10 s by default), so that a request is never
// sent on a connection the server is closing, and the CAs of caFile, if given.
func newHTTPClient(caFile string) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.IdleConnTimeout = 5 * time.Second
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA file: %v", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA file %s holds no PEM certificate", caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: transport}, nil
}

// answer is the server's answer to one request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// call sends method to path with body as JSON (none if nil) and reads the whole answer,
// waiting at most timeout (and no longer than ctx allows).
func (c *Client) call(ctx context.Context, method, path string, body any, timeout time.Duration) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := c.base + path
	var payload io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("fencelock: encoding the body of %s %s: %w", method, target, err)
		}
		payload = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, target, payload)
	if err != nil {
		return nil, fmt.Errorf("fencelock: %s %s: %w", method, target, err)
	}
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	request.Header.Set("Accept", "application/json, application/problem+json")
	if c.authToken != "" {
		request.Header.Set("Authorization", "Bearer "+c.authToken)
	}
	response, err := c.http.Do(request)
	if err != nil {
		return nil, &RequestError{Method: method, URL: target, Err: unwrapURLError(err)}
	}
	defer response.Body.Close()
	read, err := io.ReadAll(response.Body)
	if err != nil {
		return nil, &RequestError{Method: method, URL: target, Err: fmt.Errorf("the answer was cut off: %w", err)}
	}
	return &answer{status: response.StatusCode, header: response.Header, body: read}, nil
}

// unwrapURLError drops the *url.Error that net/http wraps around every failure: the
// RequestError already names the method and URL.
func unwrapURLError(err error) error {
	if u, ok := err.(*url.Error); ok {
		return u.Err
	}
	return err
}

// decode reads a 200 answer's body into into; any other answer is its problem.
func (a *answer) decode(into any) error {
	if a.status != http.StatusOK {
		return a.problem()
	}
	if err := json.Unmarshal(a.body, into); err != nil {
		return fmt.Errorf("fencelock: the answer is not what a fencelock server sends: %w", err)
	}
	return nil
}

// problem is the answer as a *Problem: its problem+json body, or, for anything else, a
// problem of type about:blank with the answer's status.
func (a *answer) problem() *Problem {
	p := &Problem{}
	mediaType, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	if mediaType != "application/problem+json" || json.Unmarshal(a.body, p) != nil || p.Type == "" {
		p = &Problem{Type: "about:blank", Title: http.StatusText(a.status), Detail: snippet(a.body)}
	}
	p.Status = a.status
	if seconds, err := strconv.Atoi(strings.TrimSpace(a.header.Get("Retry-After"))); err == nil && seconds >= 0 {
		p.RetryAfter = time.Duration(seconds) * time.Second
	}
	return p
}

// snippet is the start of a body that is not a problem, for the error message.
func snippet(body []byte) string {
	const most = 200
	text := strings.TrimSpace(string(body))
	if len(text) > most {
		text = text[:most] + "…"
	}
	return text
}
