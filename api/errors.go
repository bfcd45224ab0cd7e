package api

// Error is the JSON body of every error response, and the error the API
// client returns for one.
type Error struct {
	// StatusCode is the HTTP status; not part of the body.
	StatusCode int `json:"-"`
	// Code is a short machine-readable reason such as "invalid" or "conflict".
	Code string `json:"error"`
	// Message says what went wrong in words an operator understands.
	Message string `json:"message"`
	// Details lists every invalid field when a Quadlet was refused.
	Details []FieldDetail `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// FieldDetail is one problem in one Quadlet file.
type FieldDetail struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error codes.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	// CodeForbidden answers a request whose credentials do not allow it
	// (HTTP 403), such as a join with a wrong token.
	CodeForbidden     = "forbidden"
	CodeNotFound      = "not_found"
	CodeConflict      = "conflict"
	CodeAlreadyExists = "already_exists"
	CodeTooLarge      = "too_large"
	// CodeUnsupportedMediaType answers a body whose Content-Type the
	// endpoint does not take (HTTP 415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInvalid              = "invalid"
	CodeRateLimited          = "rate_limited"
	CodeInternal             = "internal"
	// CodeUnavailable answers a request a server cannot serve now but
	// another member of the cluster may (HTTP 503): it has no leader to
	// answer for. Clients try the next server.
	CodeUnavailable = "unavailable"
	// CodeMethodNotAllowed answers a webhook sent with another method than
	// POST (HTTP 405).
	CodeMethodNotAllowed = "method_not_allowed"
)
