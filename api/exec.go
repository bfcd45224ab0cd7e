package api

// ExecProtocol is the Upgrade token of POST .../workloads/{name}/exec and
// of the agent API's instance exec: after "101 Switching Protocols" the
// connection carries frames (package internal/frames) both ways: the
// client's input and terminal size, the command's output and exit status.
const ExecProtocol = "kat-exec.v1"

// Query parameters of the exec endpoints.
const (
	// ExecParamCommand is repeated, once per word of the command.
	ExecParamCommand = "command"
	// ExecParamStdin ("true") passes the client's input to the command.
	ExecParamStdin = "stdin"
	// ExecParamTTY ("true") gives the command a terminal.
	ExecParamTTY = "tty"
	// ExecParamInstance names the instance; empty: the first running one.
	ExecParamInstance = "instance"
)
