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
    EGRESS_ADDRESS_RESERVED = "egress_address_reserved": "the host is or resolved to an unspecified, multicast, broadcast, documentation or otherwise reserved address, which is never allowed",
}
