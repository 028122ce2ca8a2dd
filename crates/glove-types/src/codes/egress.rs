//! Codes of egress decisions: why a connection or request leaving a
//! sandbox was refused. The proxy answers the agent with one of them (in
//! an HTTP error it can show) and audits it.

define_codes! { Egress;
    EGRESS_TARGET_INVALID = "egress_target_invalid": "the requested host is not a lowercase DNS name or an IP literal, or the port is not 1-65535",
    EGRESS_HOST_NOT_ALLOWED = "egress_host_not_allowed": "the host is not an endpoint of the session's egress policy",
    EGRESS_PORT_NOT_ALLOWED = "egress_port_not_allowed": "the host is an endpoint of the egress policy, but not on this port",
    EGRESS_NO_ADDRESS = "egress_no_address": "the host resolved to no address",
    EGRESS_ADDRESS_PRIVATE = "egress_address_private": "the host is or resolved to a loopback, private, link-local or shared address and the policy does not allow private targets",
    EGRESS_ADDRESS_METADATA = "egress_address_metadata": "the host is or resolved to a cloud metadata address, which is never allowed",
    EGRESS_EVENT_INVALID = "egress_event_invalid": "an egress audit event does not decode as its schema, breaks one of its rules, or is not its canonical encoding",
    EGRESS_POLICY_INVALID = "egress_policy_invalid": "an egress policy file does not decode as its schema or breaks one of its rules (an unlisted endpoint, a reserved port, a refused header or variable)",
    EGRESS_PLACEHOLDER_MISDIRECTED = "egress_placeholder_misdirected": "a request carried a brokered credential's placeholder to an endpoint that credential is not bound to, or outside the header it is injected into",
    EGRESS_REQUEST_INVALID = "egress_request_invalid": "the request is not one the proxy forwards: not an absolute http URI or CONNECT, an oversized or malformed header, or an upgrade",
    EGRESS_LIMIT_REACHED = "egress_limit_reached": "the endpoint's connection or byte limit, or the session's connection limit, is reached",
    EGRESS_TIMEOUT = "egress_timeout": "the client sent its request head too slowly, or a connection was idle past its deadline",
    EGRESS_UPSTREAM_FAILED = "egress_upstream_failed": "the proxy could not connect to, or talk to, the approved endpoint",
    EGRESS_AUDIT_FAILED = "egress_audit_failed": "the egress journal could not record the decision, so nothing was let through",
    EGRESS_CREDENTIAL_UNAVAILABLE = "egress_credential_unavailable": "a brokered credential's source file is missing, not a regular file, readable by others than its owner, empty, too large or not text",
    EGRESS_PROXY_FAILED = "egress_proxy_failed": "the session's egress proxy could not be started or ended abnormally",
    EGRESS_CREDENTIAL_REFLECTED = "egress_credential_reflected": "the endpoint's response carried a brokered credential's real value, so the rest of it was withheld from the agent",
    EGRESS_ADDRESS_RESERVED = "egress_address_reserved": "the host is or resolved to an unspecified, multicast, broadcast, documentation or otherwise reserved address, which is never allowed",
    EGRESS_TRUST_ROOTS_INVALID = "egress_trust_roots_invalid": "the roots the proxy verifies upstreams against are unusable: no system CA bundle at the usual locations, or a bundle or an extra root file that is missing, unreadable, too large or holds no certificate",
}
