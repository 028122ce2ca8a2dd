//! Serving the channel: one frame at a time, each answered (or not) within
//! its deadline.
//!
//! A frame is handled in this order, and the first step that fails decides
//! the answer:
//!
//! 1. more than [`MAX_FRAMES`] frames on the channel: `remote_too_many_requests`
//!    (id null), then the channel ends;
//! 2. gloved's strict JSON-RPC parser: parse errors and malformed requests
//!    are answered as gloved answers them;
//! 3. a notification (no `id`) is never answered;
//! 4. `params.ttl_ms` must be an integer from 1 to 60000
//!    (`remote_ttl_invalid`, JSON-RPC -32602);
//! 5. the frame's receive must not have used up the TTL
//!    (`remote_request_expired`, JSON-RPC -32002);
//! 6. the method: `remote_health` answers; every other name, every
//!    lifecycle method gloved knows included, is `method_not_found`
//!    (-32601).
//!
//! Answers from steps 1, 2 and 4 have no TTL to go by; they get
//! [`UNTIMED_REPLY`](super::deadline::UNTIMED_REPLY) from the receive start.
//! Every answer is written only before its deadline: one whose deadline has
//! passed is not written (a line on stderr says so, with the answer's
//! code), and the channel goes on; a write that starts but cannot finish
//! in time ends the channel, since the stream would be out of step.

use super::channel::{self, ChannelError, NonBlocking};
use super::deadline::{self, FrameTiming, Ttl};
use super::identity::Identity;
use super::{diagnostic, EXIT_IO, EXIT_LIMIT, EXIT_OK, EXIT_PROTOCOL};
use crate::control::frame;
use crate::control::protocol::{self, RpcError, INVALID_PARAMS, LIMIT_ERROR};
use glove_types::codes::control::{
    CONTROL_INVALID_PARAMS, CONTROL_PROTOCOL_VIOLATION, REMOTE_CHANNEL_DEADLINE, REMOTE_IO,
    REMOTE_REPLY_DEADLINE, REMOTE_TOO_MANY_REQUESTS,
};
use glove_types::{ErrorCode, Rejection};
use rustix::fd::{AsFd, BorrowedFd};
use serde_json::{json, Value};
use std::time::Instant;

/// The largest frame payload, either way, in bytes.
pub const MAX_FRAME_BYTES: u32 = 64 * 1024;

/// The most frames one channel carries (notifications and refused frames
/// count too).
pub const MAX_FRAMES: u32 = 256;

/// The one method.
pub const HEALTH_METHOD: &str = "remote_health";

/// The executor's protocol version, reported by `remote_health`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The `status` `remote_health` reports: always, since nothing runs here.
pub const STATUS: &str = "not_operational";

/// What to do about one frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Write `message` before `deadline`; then end the channel with the
    /// exit status `end`, if there is one.
    Reply {
        /// The JSON-RPC response.
        message: Value,
        /// The error code it carries, if it is an error.
        code: Option<ErrorCode>,
        /// The latest instant the write may finish.
        deadline: Instant,
        /// The exit status the channel ends with after this frame.
        end: Option<i32>,
    },
    /// A notification: nothing is written.
    Silent,
}

fn reply(message: Value, code: Option<ErrorCode>, deadline: Instant) -> Step {
    Step::Reply {
        message,
        code,
        deadline,
        end: None,
    }
}

/// Decides the answer to one frame (pure: no I/O, no clock).
///
/// `ordinal` counts the frames of the channel from 1, this one included.
pub fn handle(identity: &Identity, payload: &[u8], timing: FrameTiming, ordinal: u32) -> Step {
    if ordinal > MAX_FRAMES {
        let e = RpcError::new(
            LIMIT_ERROR,
            REMOTE_TOO_MANY_REQUESTS,
            format!("a channel carries at most {MAX_FRAMES} frames; open a new one"),
        );
        return Step::Reply {
            message: e.to_response(None),
            code: Some(e.code),
            deadline: timing.untimed_deadline(),
            end: Some(EXIT_LIMIT),
        };
    }
    let request = match protocol::parse_request(payload, MAX_FRAME_BYTES as usize) {
        Ok(r) => r,
        Err(bad) => {
            return reply(
                bad.to_response(),
                Some(bad.error.code),
                timing.untimed_deadline(),
            )
        }
    };
    let Some(id) = request.id.as_ref() else {
        return Step::Silent;
    };
    let error =
        |e: RpcError, deadline: Instant| reply(e.to_response(Some(id)), Some(e.code), deadline);
    let ttl = match Ttl::from_params(&request.params) {
        Ok(t) => t,
        Err(r) => return error(located(INVALID_PARAMS, &r), timing.untimed_deadline()),
    };
    let deadline = match timing.request_deadline(ttl) {
        Ok(d) => d,
        Err(r) => {
            // The deadline is receive start + TTL, already past: the loop
            // will not write this, only say so on stderr.
            return error(located(LIMIT_ERROR, &r), timing.deadline_for(ttl));
        }
    };
    if request.method != HEALTH_METHOD {
        return error(RpcError::method_not_found(&request.method), deadline);
    }
    if let Some(extra) = request.params.keys().find(|k| k.as_str() != "ttl_ms") {
        let extra: String = extra.chars().take(64).collect();
        let e = RpcError {
            location: extra.clone(),
            ..RpcError::new(
                INVALID_PARAMS,
                CONTROL_INVALID_PARAMS,
                format!("{HEALTH_METHOD} takes only ttl_ms, not {extra:?}"),
            )
        };
        return error(e, deadline);
    }
    reply(
        protocol::result_response(id, health(identity)),
        None,
        deadline,
    )
}

/// The `remote_health` result.
pub fn health(identity: &Identity) -> Value {
    json!({
        "executable_sha256": identity.executable_sha256().to_hex(),
        "image_sha256": identity.image_sha256().to_hex(),
        "protocol_version": PROTOCOL_VERSION,
        "status": STATUS,
    })
}

fn located(rpc_code: i64, r: &Rejection) -> RpcError {
    RpcError {
        location: r.location().to_owned(),
        ..RpcError::new(rpc_code, r.code(), r.message())
    }
}

/// Serves standard input and output until the input ends (0), a bound
/// ends the channel, or the stream breaks; returns the exit status.
pub fn run(identity: &Identity, started: Instant) -> i32 {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let (input, output) = (stdin.as_fd(), stdout.as_fd());
    let _nonblocking = match NonBlocking::set(output) {
        Ok(g) => g,
        Err(e) => {
            diagnostic(
                REMOTE_IO,
                &format!("standard output cannot be made non-blocking: {e}"),
            );
            return EXIT_IO;
        }
    };
    let channel_deadline = deadline::channel_deadline(started);
    let mut ordinal: u32 = 0;
    loop {
        // Captured before the read, so waiting for the frame counts too.
        let receive_start = Instant::now();
        let read = channel::read_frame(input, channel_deadline, MAX_FRAME_BYTES);
        let timing = FrameTiming {
            receive_start,
            received: Instant::now(),
            channel_deadline,
        };
        let step = match read {
            Ok(Some(payload)) => {
                ordinal = ordinal.saturating_add(1);
                handle(identity, &payload, timing, ordinal)
            }
            Ok(None) => return EXIT_OK,
            Err(ChannelError::TooLarge(r)) => {
                // The payload was never read: answer, then end the channel.
                let e = RpcError::from_rejection(&r);
                Step::Reply {
                    message: e.to_response(None),
                    code: Some(e.code),
                    deadline: timing.untimed_deadline(),
                    end: Some(EXIT_PROTOCOL),
                }
            }
            Err(e) => return read_failed(&e),
        };
        let Step::Reply {
            message,
            code,
            deadline,
            end,
        } = step
        else {
            continue;
        };
        if let Err(status) = write_reply(output, &message, code, deadline) {
            return status;
        }
        if let Some(status) = end {
            let code = code.unwrap_or(CONTROL_PROTOCOL_VIOLATION);
            let what = message["error"]["message"].as_str().unwrap_or_default();
            diagnostic(code, &format!("{what}; the channel ends"));
            return status;
        }
    }
}

fn read_failed(e: &ChannelError) -> i32 {
    match e {
        ChannelError::Deadline => {
            diagnostic(
                REMOTE_CHANNEL_DEADLINE,
                &format!(
                    "the channel reached its lifetime of {} s",
                    deadline::CHANNEL_LIFETIME.as_secs()
                ),
            );
            EXIT_LIMIT
        }
        ChannelError::Truncated => {
            diagnostic(
                CONTROL_PROTOCOL_VIOLATION,
                "standard input ended inside a frame",
            );
            EXIT_PROTOCOL
        }
        ChannelError::TooLarge(r) => {
            diagnostic(r.code(), r.message());
            EXIT_PROTOCOL
        }
        ChannelError::Io(e) => {
            diagnostic(REMOTE_IO, &format!("reading standard input failed: {e}"));
            EXIT_IO
        }
    }
}

/// Writes one reply before its deadline; `Err` carries the exit status
/// when the channel must end.
fn write_reply(
    output: BorrowedFd<'_>,
    message: &Value,
    code: Option<ErrorCode>,
    deadline: Instant,
) -> Result<(), i32> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if deadline::remaining(deadline, Instant::now()).is_none() {
        // Nothing can be written any more; the frame was still counted.
        let dropped = format!("the reply to request {id} was not written: its deadline had passed");
        match (code, message["error"]["message"].as_str()) {
            (Some(c), Some(what)) => diagnostic(c, &format!("{what}; {dropped}")),
            _ => diagnostic(REMOTE_REPLY_DEADLINE, &dropped),
        }
        return Ok(());
    }
    let bytes = protocol::to_bytes(message);
    let framed = match frame::encode(&bytes, MAX_FRAME_BYTES) {
        Ok(f) => f,
        Err(r) => {
            diagnostic(r.code(), r.message());
            return Err(EXIT_PROTOCOL);
        }
    };
    match channel::write_all(output, &framed, deadline) {
        Ok(()) => Ok(()),
        Err(ChannelError::Io(e)) => {
            diagnostic(REMOTE_IO, &format!("writing standard output failed: {e}"));
            Err(EXIT_IO)
        }
        Err(_) => {
            diagnostic(
                REMOTE_REPLY_DEADLINE,
                &format!("the reply to request {id} could not be written before its deadline"),
            );
            Err(EXIT_LIMIT)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_types::codes::control::{
        METHOD_NOT_FOUND, REMOTE_REQUEST_EXPIRED, REMOTE_TTL_INVALID,
    };
    use glove_types::digest::Sha256Digest;
    use std::time::Duration;

    fn identity() -> Identity {
        Identity::new(Sha256Digest::of(b"exe"), Sha256Digest::of(b"image"))
    }

    fn timing(receive_ms: u64) -> FrameTiming {
        let t0 = Instant::now();
        FrameTiming {
            receive_start: t0,
            received: t0 + Duration::from_millis(receive_ms),
            channel_deadline: t0 + Duration::from_secs(300),
        }
    }

    fn step(
        payload: &str,
        t: FrameTiming,
        ordinal: u32,
    ) -> (Value, Option<ErrorCode>, Instant, Option<i32>) {
        match handle(&identity(), payload.as_bytes(), t, ordinal) {
            Step::Reply {
                message,
                code,
                deadline,
                end,
            } => (message, code, deadline, end),
            Step::Silent => panic!("no reply to {payload}"),
        }
    }

    const HEALTH: &str =
        r#"{"jsonrpc":"2.0","id":1,"method":"remote_health","params":{"ttl_ms":200}}"#;

    #[test]
    fn health_within_the_ttl() {
        let t = timing(150);
        let (m, code, deadline, end) = step(HEALTH, t, 1);
        assert_eq!((code, end), (None, None));
        assert_eq!(deadline, t.receive_start + Duration::from_millis(200));
        assert_eq!(m["result"], health(&identity()));
        assert_eq!(m["result"]["status"], "not_operational");
    }

    #[test]
    fn an_expired_frame_gets_a_deadline_already_past() {
        let t = timing(200);
        let (m, code, deadline, _) = step(HEALTH, t, 1);
        assert_eq!(code, Some(REMOTE_REQUEST_EXPIRED));
        assert_eq!(m["error"]["code"], LIMIT_ERROR);
        assert!(deadline <= t.received);
        assert_eq!(deadline::remaining(deadline, t.received), None);
    }

    #[test]
    fn refusals_and_silence() {
        let t = timing(0);
        let (m, code, deadline, _) =
            step(r#"{"jsonrpc":"2.0","id":2,"method":"start_session"}"#, t, 1);
        assert_eq!(code, Some(REMOTE_TTL_INVALID));
        assert_eq!(m["error"]["data"]["location"], "ttl_ms");
        assert_eq!(deadline, t.untimed_deadline());
        let (_, code, _, _) = step(
            r#"{"jsonrpc":"2.0","id":2,"method":"start_session","params":{"ttl_ms":5}}"#,
            t,
            1,
        );
        assert_eq!(code, Some(METHOD_NOT_FOUND));
        assert_eq!(
            handle(
                &identity(),
                br#"{"jsonrpc":"2.0","method":"remote_health","params":{"ttl_ms":5}}"#,
                t,
                1
            ),
            Step::Silent
        );
        let (m, code, _, end) = step(HEALTH, t, MAX_FRAMES + 1);
        assert_eq!(
            (code, end),
            (Some(REMOTE_TOO_MANY_REQUESTS), Some(EXIT_LIMIT))
        );
        assert_eq!(m["id"], Value::Null);
        assert_eq!(step(HEALTH, t, MAX_FRAMES).1, None);
    }
}
