//! `glove session run` (create, authorize, start and attach in one go),
//! `glove session list`, and the attach both share: the transcript, then
//! the stream, this terminal's input passed to the session, and the
//! agent's own exit status at the end.
//!
//! Exit status of `run` and `attach`: the agent's code; 128 + N when signal
//! N ended it; the `glove exec` status of a limit that ended it; 125 when
//! the session failed to start or its end could not be recorded; 1 when
//! the service refused a step (the printed code says which).

use super::client::{Client, ClientError};
use super::client_cli::{fail, ConnArgs};
use crate::exec::{limit_exit_status, EXIT_LAUNCH_FAILED};
use crate::layout::Layout;
use crate::report::{print_json, EXIT_OK};
use clap::Args;
use glove_sandbox::outcome::{ExitStatus, Limit};
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::Rejection;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;

/// Arguments of `glove session run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plan file (`glove plan new` writes one).
    pub plan: PathBuf,
    /// The start-authorization key [default: the one in the `gloved`
    /// config `glove setup` wrote].
    #[arg(long, value_name = "FILE")]
    pub start_auth_key: Option<PathBuf>,
    /// Connection and output (`--json` prints the ending as one object;
    /// the agent's output still goes to stdout before it).
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The session id.
    pub id: String,
    /// Do not pass this terminal's input to the session (only watch).
    #[arg(long)]
    pub read_only: bool,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

fn connect(conn: &ConnArgs) -> Result<(PathBuf, Client), ClientError> {
    let dir = super::discover::runtime_dir(conn.runtime_dir.as_deref())?;
    let c = Client::connect_as(&dir, conn.client_id.as_deref())?;
    Ok((dir, c))
}

/// The start-authorization key: given, else the one the `gloved` config
/// names, else where `glove setup` puts it.
fn start_key(given: &Option<PathBuf>) -> Result<PathBuf, Rejection> {
    if let Some(k) = given {
        return Ok(k.clone());
    }
    let layout = Layout::current().ok_or_else(|| {
        Rejection::new(
            CLI_INVALID_ARGUMENT,
            "neither XDG_CONFIG_HOME nor HOME is set: give --start-auth-key",
        )
    })?;
    let from_config = std::fs::read(layout.gloved_config())
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("start_auth_key")?.as_str().map(PathBuf::from));
    Ok(from_config.unwrap_or_else(|| layout.start_auth_key()))
}

/// The exit status for a `session_ended` value.
pub fn ended_status(v: &Value) -> i32 {
    if v.get("stage").and_then(Value::as_str) != Some("exited") {
        return EXIT_LAUNCH_FAILED;
    }
    let limit: Option<Limit> = v
        .get("ended_by")
        .cloned()
        .and_then(|l| serde_json::from_value(l).ok());
    let exit: Option<ExitStatus> = v
        .get("exit")
        .cloned()
        .and_then(|e| serde_json::from_value(e).ok());
    match (limit, exit) {
        (Some(l), _) => limit_exit_status(l),
        (None, Some(ExitStatus::Exited { code })) => code,
        (None, Some(ExitStatus::Signaled { signal })) => 128 + signal,
        // An end recorded before exits were reported: it exited, status
        // unknown.
        (None, None) => EXIT_OK,
    }
}

/// `glove session run PLAN`.
pub fn run(a: &RunArgs) -> i32 {
    let started = (|| -> Result<(PathBuf, Client, String), ClientError> {
        let plan = super::client_cli::read_plan(&a.plan)?;
        let (dir, mut c) = connect(&a.conn)?;
        let created = c.create_session(&plan, None)?;
        let s = created.get("session").cloned().unwrap_or(Value::Null);
        let id = s
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let stage = s.get("stage").and_then(Value::as_str).unwrap_or("");
        if stage != "created" {
            return Err(Rejection::new(
                CLI_INVALID_ARGUMENT,
                format!(
                    "session {id} from this plan is already {stage}: `glove session attach {id}` \
                     follows it; a new run needs a new plan (`glove plan new`)"
                ),
            )
            .into());
        }
        let key = super::managed::read_key(&start_key(&a.start_auth_key)?)?;
        let st = c.session_status(&id)?;
        let field = |k: &str| st.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let auth = super::managed::issue_authorization(
            &key,
            &id,
            &field("plan_content_digest"),
            &field("controller_plan_digest"),
            super::service::Clock::System.now_ms(),
            30_000,
        )?;
        let (rows, cols) = glove_sandbox::tty::size(std::io::stdout().as_fd()).unwrap_or((24, 80));
        c.call(
            "start_session",
            json!({"session_id": id, "authorization": auth, "rows": rows, "cols": cols}),
        )?;
        if !a.conn.json {
            eprintln!("glove: session {id} running (Ctrl-] detaches; the session goes on)");
        }
        Ok((dir, c, id))
    })();
    match started {
        Ok((dir, c, id)) => follow(c, &dir, &a.conn, &id, true),
        Err(e) => fail(&e, a.conn.json),
    }
}

/// `glove session attach ID`.
pub fn attach(a: &AttachArgs) -> i32 {
    match connect(&a.conn) {
        Ok((dir, c)) => follow(c, &dir, &a.conn, &a.id, !a.read_only),
        Err(e) => fail(&e, a.conn.json),
    }
}

/// The byte that detaches a terminal from the session: Ctrl-] (as telnet).
const DETACH: u8 = 0x1d;

/// Restores the terminal mode when dropped.
struct RawGuard(std::sync::Arc<glove_sandbox::tty::SavedMode>);

impl Drop for RawGuard {
    fn drop(&mut self) {
        glove_sandbox::tty::restore(std::io::stdin().as_fd(), &self.0);
    }
}

/// Passes this process's input to the session over a second connection.
/// On a terminal, raw bytes (Ctrl-C reaches the agent) up to a Ctrl-],
/// which detaches: the terminal is restored and glove exits 0, the session
/// running on. From a pipe, its end becomes Ctrl-D, the terminal's end of
/// input.
fn forward_input(
    dir: PathBuf,
    client_id: Option<String>,
    id: String,
    raw: Option<std::sync::Arc<glove_sandbox::tty::SavedMode>>,
) {
    let tty = raw.is_some();
    std::thread::spawn(move || {
        let Ok(mut c) = Client::connect_as(&dir, client_id.as_deref()) else {
            return;
        };
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            let mut data: Vec<u8> = match stdin.read(&mut buf) {
                Ok(0) if tty => return,
                Ok(0) => vec![0x04],
                Ok(n) => buf[..n].to_vec(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let detach = tty && data.contains(&DETACH);
            if let Some(at) = data.iter().position(|b| *b == DETACH).filter(|_| tty) {
                data.truncate(at);
            }
            let sent = data.is_empty()
                || c.call(
                    "write_stdin",
                    json!({"session_id": id, "data_hex": glove_types::digest::to_hex(&data)}),
                )
                .is_ok();
            if detach {
                if let Some(mode) = &raw {
                    glove_sandbox::tty::restore(std::io::stdin().as_fd(), mode);
                }
                eprintln!(
                    "\r\nglove: detached; session {id} goes on (`glove session attach {id}`)"
                );
                std::process::exit(EXIT_OK);
            }
            if !sent || data == [0x04] {
                return;
            }
        }
    });
}

fn follow(mut c: Client, dir: &std::path::Path, conn: &ConnArgs, id: &str, input: bool) -> i32 {
    let r = (|| -> Result<Value, ClientError> {
        let v = c.call("attach", json!({"session_id": id}))?;
        let mut out = std::io::stdout();
        let chunks = v.get("transcript").and_then(Value::as_array);
        for ch in chunks.into_iter().flatten() {
            let hex = ch.get("data_hex").and_then(Value::as_str).unwrap_or("");
            let _ = out.write_all(&super::managed::from_hex(hex).unwrap_or_default());
        }
        let _ = out.flush();
        if let Some(ended) = v.get("ended").filter(|e| !e.is_null()) {
            return Ok(ended.clone());
        }
        let stdin_tty = glove_sandbox::tty::is_tty(std::io::stdin().as_fd());
        let raw = if input && stdin_tty {
            glove_sandbox::tty::make_raw(std::io::stdin().as_fd()).map(std::sync::Arc::new)
        } else {
            None
        };
        let _guard = raw.clone().map(RawGuard);
        if input {
            forward_input(dir.to_path_buf(), conn.client_id.clone(), id.into(), raw);
        }
        c.set_read_timeout(None)?;
        loop {
            let n = c.next_notification()?;
            match n.get("method").and_then(Value::as_str) {
                Some("output") => {
                    let hex = n
                        .pointer("/params/data_hex")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let _ = out.write_all(&super::managed::from_hex(hex).unwrap_or_default());
                    let _ = out.flush();
                }
                Some("session_ended") => {
                    return Ok(n.get("params").cloned().unwrap_or(Value::Null));
                }
                _ => {}
            }
        }
    })();
    match r {
        Ok(ended) => {
            if conn.json {
                print_json(&ended);
            } else {
                eprintln!("glove: {}", describe_end(&ended));
            }
            ended_status(&ended)
        }
        Err(e) => fail(&e, conn.json),
    }
}

/// One line for a person: how the session ended, and its receipt.
fn describe_end(v: &Value) -> String {
    let id = v.get("session_id").and_then(Value::as_str).unwrap_or("?");
    let seq = v
        .get("receipt_seq")
        .map(|s| format!(" (receipt {s}: `glove receipts show --session {id}`)"))
        .unwrap_or_default();
    let limit = v
        .get("ended_by")
        .and_then(Value::as_str)
        .map(|l| format!(" when the {} limit stopped it", l.replace('_', " ")))
        .unwrap_or_default();
    match v.get("stage").and_then(Value::as_str) {
        Some("exited") => format!(
            "session {id} ended with status {}{limit}{seq}",
            ended_status(v)
        ),
        Some(stage) => format!(
            "session {id} {stage}: {}{seq}",
            v.get("code").and_then(Value::as_str).unwrap_or("no code")
        ),
        None => format!("session {id} ended: {v}"),
    }
}

/// `glove session list`.
pub fn list(a: &ListArgs) -> i32 {
    let r = (|| -> Result<(u64, Vec<Value>), ClientError> {
        let (_, mut c) = connect(&a.conn)?;
        let mut all = Vec::new();
        let mut after = 0u64;
        let mut now = 0u64;
        // The store holds at most 10,000 sessions: 40 pages of 256.
        for _ in 0..64 {
            let page = c.call(
                "session_list",
                json!({"after_seq": after, "max_sessions": 256}),
            )?;
            now = page.get("now_ms").and_then(Value::as_u64).unwrap_or(0);
            if let Some(s) = page.get("sessions").and_then(Value::as_array) {
                all.extend(s.iter().cloned());
            }
            match page.get("next_after_seq").and_then(Value::as_u64) {
                Some(n) if n > after => after = n,
                _ => break,
            }
        }
        Ok((now, all))
    })();
    match r {
        Ok((now, all)) => {
            if a.conn.json {
                print_json(&json!({"now_ms": now, "sessions": all}));
                return EXIT_OK;
            }
            if all.is_empty() {
                println!("no sessions");
                return EXIT_OK;
            }
            println!("{:<32} {:<10} {:<20} AGE", "SESSION", "STAGE", "TEMPLATE");
            for s in &all {
                let get = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
                let age = s
                    .get("issued_at_ms")
                    .and_then(Value::as_u64)
                    .map(|t| age(now.saturating_sub(t)))
                    .unwrap_or_else(|| "-".into());
                println!(
                    "{:<32} {:<10} {:<20} {age}",
                    get("session_id"),
                    get("stage"),
                    get("runtime_template_id")
                );
            }
            EXIT_OK
        }
        Err(e) => fail(&e, a.conn.json),
    }
}

/// `1d 2h`, `3h 4m`, `5m 6s`, `7s`.
fn age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {}s", s % 60),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_follows_the_agent() {
        let v = |e: Value| {
            let mut m = json!({"session_id": "s", "stage": "exited", "receipt_seq": 3});
            if let (Some(m), Some(e)) = (m.as_object_mut(), e.as_object()) {
                m.extend(e.clone());
            }
            m
        };
        assert_eq!(
            ended_status(&v(json!({"exit": {"kind": "exited", "code": 7}}))),
            7
        );
        assert_eq!(
            ended_status(&v(json!({"exit": {"kind": "signaled", "signal": 9}}))),
            137
        );
        assert_eq!(
            ended_status(&v(
                json!({"exit": {"kind": "signaled", "signal": 9}, "ended_by": "memory"})
            )),
            limit_exit_status(Limit::Memory)
        );
        assert_eq!(
            ended_status(&json!({"session_id": "s", "stage": "failed", "code": "x"})),
            EXIT_LAUNCH_FAILED
        );
    }

    #[test]
    fn ages_read_like_a_person_writes_them() {
        assert_eq!(age(7_900), "7s");
        assert_eq!(age(366_000), "6m 6s");
        assert_eq!(age(3 * 3_600_000 + 240_000), "3h 4m");
        assert_eq!(age(90_000_000), "1d 1h");
    }
}
