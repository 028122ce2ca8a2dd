//! Codes of MCP mediation: why the mediator refused a frame, a request or
//! a tool call from the agent, why an upstream server failed, and why a
//! profile, pin file or audit event does not decode. The agent sees them in
//! the `data.glove_code` member of a JSON-RPC error; the audit journal
//! records them.

define_codes! { Mcp;
    MCP_PROFILE_INVALID = "mcp_profile_invalid": "an MCP profile does not decode as its schema or breaks one of its rules (a relative path, an inherited or malformed variable, a bound exceeded, a pattern too large)",
    MCP_FRAME_INVALID = "mcp_frame_invalid": "a frame is not one JSON-RPC 2.0 message: malformed or duplicate-key JSON, not an object, a wrong `jsonrpc`, an unusable id, a missing method, or non-object params",
    MCP_FRAME_TOO_LARGE = "mcp_frame_too_large": "a frame is longer than the frame bound",
    MCP_BATCH_REFUSED = "mcp_batch_refused": "a frame is a JSON-RPC batch (an array), which MCP does not allow",
    MCP_PROTOCOL_REFUSED = "mcp_protocol_refused": "a request came before `initialize` without a per-request protocol version, or names a protocol revision the mediator does not speak",
    MCP_METHOD_UNKNOWN = "mcp_method_unknown": "the method is not one the mediator serves",
    MCP_PARAMS_INVALID = "mcp_params_invalid": "the request's params do not have the shape its method needs",
    MCP_TOOL_UNKNOWN = "mcp_tool_unknown": "no upstream server offers a tool of that name in the mediator's own view",
    MCP_TOOL_DENIED = "mcp_tool_denied": "the tool exists upstream but the profile does not allow it",
    MCP_ARGUMENT_REFUSED = "mcp_argument_refused": "an argument breaks one of the tool's argument rules in the profile (equals, one_of, prefix, pattern, range, length, path)",
    MCP_SCHEMA_REFUSED = "mcp_schema_refused": "the arguments do not satisfy the tool's input schema or the profile's schema for it, name an argument the input schema does not declare, or the input schema uses keywords outside the enforced subset at its top level",
    MCP_PIN_MISMATCH = "mcp_pin_mismatch": "the tool's definition differs from its pinned digest (or the profile pins the server and the tool is unpinned), so the tool is blocked",
    MCP_DEFINITION_REFUSED = "mcp_definition_refused": "the tool's definition carries invisible or control characters (Unicode tags, zero-width or bidirectional controls, C0/C1 controls such as ESC) that the profile does not allow for it, so the tool is blocked and not pinned",
    MCP_PIN_FILE_INVALID = "mcp_pin_file_invalid": "the pin file does not decode, is not a private regular file, or could not be written",
    MCP_RESOURCE_DENIED = "mcp_resource_denied": "the resource, prompt or completion is not listed in the profile",
    MCP_TASK_REFUSED = "mcp_task_refused": "task-augmented requests (`params.task`, `tasks/*`) are not mediated",
    MCP_NOTIFICATION_IGNORED = "mcp_notification_ignored": "a notification from the agent that the mediator does not act on (an unknown method, `roots/list_changed`, a cancel for no call in flight); counted in the audit, never forwarded",
    MCP_INPUT_REFUSED = "mcp_input_refused": "the upstream answered a forwarded request with `resultType: input_required` (it asks the client for sampling, elicitation or roots): its input requests are denied and audited and the request ends with this error",
    MCP_REQUEST_DENIED = "mcp_request_denied": "an upstream server sent a request to the client (roots, sampling, elicitation); it is answered with an error and never forwarded",
    MCP_UPSTREAM_FAILED = "mcp_upstream_failed": "the upstream server could not be started, exited, or sent something unusable; or its tools are withdrawn because its re-list failed or it was stopped for causing too many unsolicited events",
    MCP_UPSTREAM_TIMEOUT = "mcp_upstream_timeout": "the upstream server did not answer within the request deadline",
    MCP_UPSTREAM_ERROR = "mcp_upstream_error": "the upstream server answered the forwarded request with a JSON-RPC error (released with host paths removed)",
    MCP_AUDIT_FAILED = "mcp_audit_failed": "the MCP audit journal could not record the decision, so nothing was released and the mediator refuses everything after",
    MCP_RELAY_FAILED = "mcp_relay_failed": "`glove run` could not set up the channel between the sandbox and the mediator (its sockets, the relay, the mediator's thread), or the relay inside could not reach it",
    MCP_EVENT_INVALID = "mcp_event_invalid": "an MCP audit event does not decode as its schema, breaks one of its rules, or is not its canonical encoding",
}
