package api

import "time"

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Event is something that happened to an object, kept under /kat/events/.
type Event struct {
	Time time.Time `json:"time"`
	// Type is EventNormal or EventWarning.
	Type string `json:"type"`
	// Object names what the event is about, such as "source/config" or
	// "workload/demo/web".
	Object string `json:"object"`
	// Reason is a CamelCase word, such as "Applied" or "PruneRefused".
	Reason string `json:"reason"`
	// Message says what happened.
	Message string `json:"message"`
}
