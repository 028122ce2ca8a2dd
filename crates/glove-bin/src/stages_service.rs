//! `glove diff`, `glove stages` and `glove apply` with `--service`: the
//! stages of gloved's managed sessions, through the owner socket
//! (`owner.sock` in the runtime directory). The service answers these
//! methods only there; a controller on the control socket is refused.

use crate::control::client::{Client, ClientError};
use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use serde_json::{json, Value};
use std::path::PathBuf;

fn fail(e: &ClientError, json: bool) -> i32 {
    if json {
        print_json(&json!({"code": e.code(), "location": e.location(), "message": e.message()}));
    } else {
        eprintln!("error[{}]: {e}", e.code());
    }
    EXIT_REJECTED
}

fn connect(runtime_dir: &Option<PathBuf>) -> Result<Client, ClientError> {
    let dir = crate::control::discover::runtime_dir(runtime_dir.as_deref())?;
    Client::connect_owner(&dir)
}

fn stage_params(session: &str, alias: &Option<String>) -> Value {
    let mut p = json!({"session_id": session});
    if let (Some(a), Some(m)) = (alias, p.as_object_mut()) {
        m.insert("alias".into(), a.clone().into());
    }
    p
}

/// `glove diff SESSION --service`.
pub fn diff(a: &crate::diff::DiffArgs) -> i32 {
    let format = if a.json {
        "json"
    } else if a.patch {
        "patch"
    } else {
        "stat"
    };
    let mut p = stage_params(&a.session, &a.alias);
    if let Some(m) = p.as_object_mut() {
        m.insert("format".into(), format.into());
    }
    match connect(&a.runtime_dir).and_then(|mut c| c.call("stage_diff", p)) {
        Ok(v) => {
            match format {
                "json" => print_json(&v),
                "patch" => print!("{}", v["patch"].as_str().unwrap_or_default()),
                _ => print!("{}", v["stat"].as_str().unwrap_or_default()),
            }
            EXIT_OK
        }
        Err(e) => fail(&e, a.json),
    }
}

/// `glove stages list --service`.
pub fn list(runtime_dir: &Option<PathBuf>, json: bool) -> i32 {
    match connect(runtime_dir).and_then(|mut c| c.call("stages_list", json!({}))) {
        Ok(v) => {
            if json {
                print_json(&v);
            } else {
                for s in v["stages"].as_array().cloned().unwrap_or_default() {
                    println!(
                        "{:<28} {:<12} {:<8} {}",
                        s["session_id"].as_str().unwrap_or_default(),
                        s["alias"].as_str().unwrap_or_default(),
                        if s["running"] == true {
                            "running"
                        } else {
                            s["state"].as_str().unwrap_or_default()
                        },
                        s["source"].as_str().unwrap_or("-"),
                    );
                }
            }
            EXIT_OK
        }
        Err(e) => fail(&e, json),
    }
}

/// `glove stages rm SESSION --service`.
pub fn remove(runtime_dir: &Option<PathBuf>, session: &str, alias: &Option<String>) -> i32 {
    match connect(runtime_dir)
        .and_then(|mut c| c.call("stage_remove", stage_params(session, alias)))
    {
        Ok(_) => {
            println!("removed the stage of {session}");
            EXIT_OK
        }
        Err(e) => fail(&e, false),
    }
}

/// The stage's digests and `--stat`, from the service.
pub fn stat(
    runtime_dir: &Option<PathBuf>,
    session: &str,
    alias: &Option<String>,
) -> Result<Value, ClientError> {
    let mut p = stage_params(session, alias);
    if let Some(m) = p.as_object_mut() {
        m.insert("format".into(), "stat".into());
    }
    connect(runtime_dir)?.call("stage_diff", p)
}

/// Sends a signed authorization for the session's stage to the service.
pub fn apply(
    runtime_dir: &Option<PathBuf>,
    session: &str,
    alias: &Option<String>,
    authorization: &str,
) -> Result<Value, ClientError> {
    let mut p = stage_params(session, alias);
    if let Some(m) = p.as_object_mut() {
        m.insert("authorization".into(), authorization.into());
    }
    connect(runtime_dir)?.call("stage_apply", p)
}
