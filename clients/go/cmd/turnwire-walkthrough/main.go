// Command turnwire-walkthrough calls a live coordinator from Go, end to end:
//  1. submits a turn with an idempotency key, submits it again (a replay: the
//     same operation), and watches it to its terminal state;
//  2. submits a slow turn, watches until it runs, cancels it, and resumes the
//     watch from the last sequence it saw to the terminal state;
//  3. decodes the google.rpc.ErrorInfo of three refusals: the key reused for
//     another turn, a call without a token, and another principal's read.
//
// It prints one JSON summary on stdout and exits 0 when every step behaved as
// the contract says, 1 otherwise (the summary's "problems" says why), 2 on bad
// usage. Flags fall back to TURNWIRE_ADDRESS, TURNWIRE_TOKEN, TURNWIRE_CA_FILE
// and TURNWIRE_OTHER_TOKEN. See docs/CLIENTS.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	commonv1 "turnwire.dev/clients/go/gen/turnwire/common/v1"
	coordinatorv1 "turnwire.dev/clients/go/gen/turnwire/coordinator/v1"
	"turnwire.dev/clients/go/turnwire"
)

type options struct {
	address, token, otherToken, caFile string
	timeout                            time.Duration
	cancelSleepMs                      int
}

func parseOptions() options {
	var o options
	var timeoutSeconds float64
	flag.StringVar(&o.address, "address", os.Getenv("TURNWIRE_ADDRESS"), "the coordinator, HOST:PORT (env TURNWIRE_ADDRESS)")
	flag.StringVar(&o.token, "token", os.Getenv("TURNWIRE_TOKEN"), "a bearer token with the submit, read and cancel scopes (env TURNWIRE_TOKEN)")
	flag.StringVar(&o.otherToken, "other-token", os.Getenv("TURNWIRE_OTHER_TOKEN"), "another principal's token with the read scope (env TURNWIRE_OTHER_TOKEN)")
	flag.StringVar(&o.caFile, "ca-file", os.Getenv("TURNWIRE_CA_FILE"), "TLS, trusting this CA (env TURNWIRE_CA_FILE); without it, plaintext (loopback only)")
	flag.Float64Var(&timeoutSeconds, "timeout", 60, "give up on a step after this many seconds")
	flag.IntVar(&o.cancelSleepMs, "cancel-sleep-ms", 30000, "how long the turn that is cancelled would sleep")
	flag.Parse()
	problem := ""
	switch {
	case o.address == "":
		problem = "--address (or TURNWIRE_ADDRESS) is required"
	case o.token == "":
		problem = "--token (or TURNWIRE_TOKEN) is required"
	case o.otherToken == "":
		problem = "--other-token (or TURNWIRE_OTHER_TOKEN) is required"
	case timeoutSeconds <= 0:
		problem = "--timeout must be a positive number of seconds"
	case o.cancelSleepMs < 0:
		problem = "--cancel-sleep-ms must be >= 0"
	}
	if problem != "" {
		fmt.Fprintf(os.Stderr, "error: %s\n", problem)
		flag.Usage()
		os.Exit(2)
	}
	o.timeout = time.Duration(timeoutSeconds * float64(time.Second))
	return o
}

func newKey() string {
	random := make([]byte, 8)
	if _, err := rand.Read(random); err != nil {
		panic(err)
	}
	return "go-" + hex.EncodeToString(random)
}

func turn(text string, parameters map[string]string) *coordinatorv1.Turn {
	return &coordinatorv1.Turn{
		// kind is required: it picks the runner's slot pool (PROTOCOL.md R4).
		Kind:  commonv1.TurnKind_TURN_KIND_WRITABLE,
		Model: &commonv1.ModelRef{Provider: "example", Name: "echo", Parameters: parameters},
		InputItems: []*commonv1.InputItem{
			{ItemId: "1", Role: "user", ContentType: "text/plain", Content: []byte(text)},
		},
	}
}

// events renders events as "sequence:state"; uint64 printed in full, as a string.
func events(list []*coordinatorv1.OperationEvent) []string {
	rendered := make([]string, 0, len(list))
	for _, event := range list {
		rendered = append(rendered, strconv.FormatUint(event.GetSequence(), 10)+":"+event.GetToState().String())
	}
	return rendered
}

type walkthrough struct {
	client coordinatorv1.TurnServiceClient
	opts   options
	// authed carries the token; other carries the other principal's.
	authed, other context.Context
}

func (w walkthrough) submitAndWatch() (map[string]interface{}, error) {
	key := newKey()
	request := &coordinatorv1.SubmitTurnRequest{IdempotencyKey: key, Turn: turn("hello from go", nil)}
	first, err := w.client.SubmitTurn(w.authed, request)
	if err != nil {
		return nil, err
	}
	// The same key with the same request: a replay, never a second operation.
	again, err := w.client.SubmitTurn(w.authed, request)
	if err != nil {
		return nil, err
	}
	operationID := first.GetOperation().GetOperationId()
	watched, err := turnwire.Watch(w.authed, w.client, operationID, 0, nil)
	if err != nil {
		return nil, err
	}
	operation := watched.Operation
	return map[string]interface{}{
		"operation_id":        operationID,
		"idempotency_key":     key,
		"replayed":            again.GetReplayed(),
		"replay_operation_id": again.GetOperation().GetOperationId(),
		"events":              events(watched.Events),
		"state":               operation.GetState().String(),
		"last_event_sequence": strconv.FormatUint(operation.GetLastEventSequence(), 10),
		"output_text":         string(operation.GetResult().GetOutput()),
	}, nil
}

func (w walkthrough) cancelWhileRunning() (map[string]interface{}, error) {
	parameters := map[string]string{"sleep_ms": strconv.Itoa(w.opts.cancelSleepMs)}
	submitted, err := w.client.SubmitTurn(w.authed, &coordinatorv1.SubmitTurnRequest{
		IdempotencyKey: newKey(), Turn: turn("cancel me", parameters),
	})
	if err != nil {
		return nil, err
	}
	operationID := submitted.GetOperation().GetOperationId()
	// Watch until the runner confirms the start (or the turn ends), then stop watching.
	running, err := turnwire.Watch(w.authed, w.client, operationID, 0,
		func(event *coordinatorv1.OperationEvent) bool {
			return event.GetToState() == coordinatorv1.OperationState_OPERATION_STATE_RUNNING ||
				turnwire.IsTerminal(event.GetToState())
		})
	if err != nil {
		return nil, err
	}
	if _, err := w.client.CancelOperation(w.authed, &coordinatorv1.CancelOperationRequest{OperationId: operationID}); err != nil {
		return nil, err
	}
	// Resume from the cursor: every later event exactly once, to the terminal one.
	rest, err := turnwire.Watch(w.authed, w.client, operationID, running.Cursor, nil)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{
		"operation_id":           operationID,
		"state_before_cancel":    running.Operation.GetState().String(),
		"resumed_after_sequence": strconv.FormatUint(running.Cursor, 10),
		"events_after_cancel":    events(rest.Events),
		"state":                  rest.Operation.GetState().String(),
		"stop_reason":            rest.Operation.GetStopReason().String(),
	}, nil
}

// refusal renders a failed call's code and ErrorInfo; a call that succeeded is a problem.
func refusal(err error) map[string]interface{} {
	if err == nil {
		return map[string]interface{}{"refused": false}
	}
	decoded := turnwire.RefusalOf(err)
	rendered := map[string]interface{}{"refused": true, "code": turnwire.CodeName(decoded.Code)}
	if decoded.Info != nil {
		rendered["reason"] = decoded.Info.GetReason()
		rendered["domain"] = decoded.Info.GetDomain()
		metadata := decoded.Info.GetMetadata()
		if metadata == nil {
			metadata = map[string]string{} // {} in the JSON, never null
		}
		rendered["metadata"] = metadata
	}
	return rendered
}

func (w walkthrough) refusals(submitted map[string]interface{}) map[string]interface{} {
	key := submitted["idempotency_key"].(string)
	operationID := submitted["operation_id"].(string)
	// The first turn's key with another turn: IDEMPOTENCY_KEY_REUSED, nothing stored.
	_, reused := w.client.SubmitTurn(w.authed, &coordinatorv1.SubmitTurnRequest{
		IdempotencyKey: key, Turn: turn("another turn", nil),
	})
	// No authorization metadata at all: UNAUTHENTICATED / CREDENTIALS_MISSING.
	bare, cancel := context.WithTimeout(context.Background(), w.opts.timeout)
	defer cancel()
	_, missing := w.client.GetOperation(bare, &coordinatorv1.GetOperationRequest{OperationId: operationID})
	// Another principal reads the first turn: NOT_FOUND, exactly like a random id (§7).
	_, crossTenant := w.client.GetOperation(w.other, &coordinatorv1.GetOperationRequest{OperationId: operationID})
	return map[string]interface{}{
		"idempotency_key_reused": refusal(reused),
		"missing_token":          refusal(missing),
		"cross_tenant_read":      refusal(crossTenant),
	}
}

func problemsWith(summary map[string]interface{}) []string {
	problems := []string{}
	submitted := summary["submitted"].(map[string]interface{})
	if submitted["state"] != "OPERATION_STATE_SUCCEEDED" {
		problems = append(problems, fmt.Sprintf("first turn ended %v", submitted["state"]))
	}
	if submitted["replayed"] != true || submitted["replay_operation_id"] != submitted["operation_id"] {
		problems = append(problems, "the same key and request did not replay the first operation")
	}
	cancelled := summary["cancelled"].(map[string]interface{})
	if cancelled["state"] != "OPERATION_STATE_CANCELLED" {
		problems = append(problems, fmt.Sprintf("cancelled turn ended %v", cancelled["state"]))
	}
	want := map[string]string{
		"idempotency_key_reused": "IDEMPOTENCY_KEY_REUSED",
		"missing_token":          "CREDENTIALS_MISSING",
		"cross_tenant_read":      "OPERATION_NOT_FOUND",
	}
	refusals := summary["refusals"].(map[string]interface{})
	for name, reason := range want {
		if got := refusals[name].(map[string]interface{})["reason"]; got != reason {
			problems = append(problems, fmt.Sprintf("%s: reason %v, want %s", name, got, reason))
		}
	}
	return problems
}

func run(opts options) int {
	connection, err := turnwire.Dial(opts.address, opts.caFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	defer connection.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*opts.timeout)
	defer cancel()
	w := walkthrough{
		client: coordinatorv1.NewTurnServiceClient(connection),
		opts:   opts,
		authed: turnwire.WithToken(ctx, opts.token),
		other:  turnwire.WithToken(ctx, opts.otherToken),
	}
	started := time.Now()
	summary := map[string]interface{}{"address": opts.address, "tls": opts.caFile != ""}
	submitted, err := w.submitAndWatch()
	if err == nil {
		summary["submitted"] = submitted
		summary["cancelled"], err = w.cancelWhileRunning()
	}
	if err != nil {
		summary["failed"] = refusal(err)
		summary["failed"].(map[string]interface{})["message"] = err.Error()
		return printSummary(summary, 1)
	}
	summary["refusals"] = w.refusals(submitted)
	problems := problemsWith(summary)
	summary["problems"] = problems
	summary["elapsed_ms"] = time.Since(started).Milliseconds()
	if len(problems) > 0 {
		return printSummary(summary, 1)
	}
	return printSummary(summary, 0)
}

func printSummary(summary map[string]interface{}, code int) int {
	encoded, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(encoded))
	return code
}

func main() {
	os.Exit(run(parseOptions()))
}
