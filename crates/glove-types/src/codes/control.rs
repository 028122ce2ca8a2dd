//! Codes of the control protocol (owned by `gloved` and its client).
//!
//! Two groups: `control_*` for framing, JSON-RPC shape, limits, service
//! configuration and the client's view of the service, and `auth_*` for
//! the bootstrap-secret handshake and peer credentials.

define_codes! { Control;
    METHOD_NOT_FOUND = "method_not_found": "the method is not advertised by this service",
    CONTROL_FRAME_TOO_LARGE = "control_frame_too_large": "a frame's length prefix exceeds the frame bound",
    CONTROL_INVALID_REQUEST = "control_invalid_request": "the message is not a well-formed JSON-RPC 2.0 request",
    CONTROL_BATCH_REFUSED = "control_batch_refused": "JSON-RPC batch arrays are not accepted",
    CONTROL_INVALID_PARAMS = "control_invalid_params": "the method's parameters are missing or malformed",
    CONTROL_BUSY = "control_busy": "the connection already has the maximum number of requests in flight",
    CONTROL_TOO_MANY_CONNECTIONS = "control_too_many_connections": "the service already serves the maximum number of connections",
    CONTROL_SHUTTING_DOWN = "control_shutting_down": "the service is shutting down and takes no new requests",
    CONTROL_INTERNAL = "control_internal": "the service could not complete the request",
    CONTROL_CONFIG_INVALID = "control_config_invalid": "the service configuration is malformed or inconsistent",
    CONTROL_PATH_NOT_ABSOLUTE = "control_path_not_absolute": "a configured path is not absolute",
    CONTROL_DIR_NOT_FOUND = "control_dir_not_found": "a configured directory does not exist",
    CONTROL_DIR_NOT_DIRECTORY = "control_dir_not_directory": "a configured directory is not a directory, or is a symbolic link",
    CONTROL_DIR_WRONG_OWNER = "control_dir_wrong_owner": "a configured directory is not owned by the service user",
    CONTROL_DIR_BAD_MODE = "control_dir_bad_mode": "a configured directory's mode is not 0700",
    CONTROL_DIR_IO = "control_dir_io": "a configured directory could not be created or inspected",
    CONTROL_ALREADY_RUNNING = "control_already_running": "another service already answers on the runtime directory's socket",
    CONTROL_SOCKET_IO = "control_socket_io": "the control socket could not be created, bound or removed",
    CONTROL_SECRET_IO = "control_secret_io": "the bootstrap secret file could not be written or removed",
    CONTROL_REMOTE_BACKEND_CONFLICT = "control_remote_backend_conflict": "a policy remote_backend is combined with a materialization root",
    CONTROL_REMOTE_ARTIFACT_IO = "control_remote_artifact_io": "the remote backend's SSH artifacts could not be written",
    CONTROL_STORE_ANCHOR_INVALID = "control_store_anchor_invalid": "the session store's anchor file is malformed or fails its MAC",
    CONTROL_UNREACHABLE = "control_unreachable": "the client could not connect to the service socket",
    CONTROL_CONNECTION_CLOSED = "control_connection_closed": "the peer closed the connection or sent nothing in time",
    CONTROL_PROTOCOL_VIOLATION = "control_protocol_violation": "the peer sent a message that breaks the control protocol",
    AUTH_REQUIRED = "auth_required": "a request other than the handshake arrived before authentication",
    AUTH_FAILED = "auth_failed": "the handshake MAC does not verify",
    AUTH_REPLAYED = "auth_replayed": "the handshake reuses a client nonce this service has already accepted",
    AUTH_TIMEOUT = "auth_timeout": "the handshake did not complete within its time bound",
    AUTH_PEER_UID_MISMATCH = "auth_peer_uid_mismatch": "the connecting process runs as another user than the service",
    AUTH_SERVER_PROOF_INVALID = "auth_server_proof_invalid": "the service's handshake proof does not verify",
    AUTH_SECRET_INVALID = "auth_secret_invalid": "the bootstrap secret file is not 64 lowercase hex characters",
}
