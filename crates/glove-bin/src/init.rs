//! `glove init <project>` and `glove exposures list|revoke`: the owner's
//! enrollment client for path exposures, through the owner socket
//! (`owner.sock` in the runtime directory), where alone gloved answers
//! `exposure_create` and `exposure_revoke`.
//!
//! The project path is made absolute against the working directory and
//! normalised lexically (`.` dropped, `..` taken back one component); no
//! link is followed here. gloved then opens it beneath its root with links
//! refused, so a path through a symbolic link is refused by the kernel,
//! not guessed at by the client.

use crate::control::client::{Client, ClientError};
use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};

/// Arguments of `glove init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project directory (beneath a root of the exposure policy).
    #[arg(value_name = "PROJECT")]
    pub project: PathBuf,
    /// The label: the catalog's name for it and its place in a sandbox
    /// (`/work/<label>`; default: the directory's name).
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// Lifetime in seconds (default: the root's maximum).
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<u64>,
    /// Allow only these access modes (repeatable; default: every mode the
    /// root allows).
    #[arg(long = "mode", value_name = "MODE")]
    pub modes: Vec<String>,
    /// Revoke the project's live exposure and grant the next generation in
    /// one durable step.
    #[arg(long)]
    pub replace: bool,
    /// gloved's runtime directory [default: found as every client finds it].
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `glove exposures …`
#[derive(Debug, Subcommand)]
pub enum ExposuresCommand {
    /// The exposure catalog: id, generation, label, modes, expiry, state.
    List(ExposuresList),
    /// Revoke an exposure's newest generation.
    Revoke(ExposuresRevoke),
}

/// Arguments of `glove exposures list`.
#[derive(Debug, Args)]
pub struct ExposuresList {
    /// gloved's runtime directory [default: found as every client finds it].
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Print the catalog as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove exposures revoke`.
#[derive(Debug, Args)]
pub struct ExposuresRevoke {
    /// The exposure id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The generation meant (refused unless it is the newest).
    #[arg(long, value_name = "GEN")]
    pub generation: Option<u64>,
    /// gloved's runtime directory [default: found as every client finds it].
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn connect(runtime_dir: &Option<PathBuf>) -> Result<Client, ClientError> {
    let dir = crate::control::discover::runtime_dir(runtime_dir.as_deref())?;
    Client::connect_owner(&dir)
}

fn fail(code: &str, location: &str, message: &str, json: bool) -> i32 {
    if json {
        print_json(&json!({"code": code, "location": location, "message": message}));
    } else {
        eprintln!("error[{code}]: {message}");
    }
    EXIT_REJECTED
}

fn client_fail(e: &ClientError, json: bool) -> i32 {
    fail(e.code(), e.location(), e.message(), json)
}

/// `path` made absolute against `cwd` and normalised lexically; `None`
/// when it is not UTF-8.
pub fn absolute(path: &Path, cwd: &Path) -> Option<String> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_str()?),
            Component::ParentDir => {
                parts.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// `glove init`.
pub fn init(a: &InitArgs) -> i32 {
    // `..` after a symbolic link is another directory than the lexical
    // one: refused rather than guessed.
    if a.project
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return fail(
            "exposure_path_invalid",
            "project",
            "the project path has a `..` component; name the directory without one",
            a.json,
        );
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let Some(path) = absolute(&a.project, &cwd) else {
        return fail(
            "exposure_path_invalid",
            "project",
            "the project path is not UTF-8",
            a.json,
        );
    };
    let mut p = json!({"path": path});
    if let Some(m) = p.as_object_mut() {
        if let Some(l) = &a.label {
            m.insert("label".into(), l.clone().into());
        }
        if let Some(t) = a.ttl {
            m.insert("ttl_secs".into(), t.into());
        }
        if !a.modes.is_empty() {
            m.insert("modes".into(), a.modes.clone().into());
        }
        if a.replace {
            m.insert("replace".into(), true.into());
        }
    }
    match connect(&a.runtime_dir).and_then(|mut c| c.call("exposure_create", p)) {
        Ok(v) => {
            if a.json {
                print_json(&v);
            } else {
                let x = &v["exposure"];
                let id = x["exposure_id"].as_str().unwrap_or_default();
                let generation = x["generation"].as_u64().unwrap_or_default();
                println!("exposed {path}");
                println!("  exposure   {id}");
                println!("  generation {generation}");
                println!(
                    "  in a sandbox at {}",
                    v["destination"].as_str().unwrap_or_default()
                );
                println!("  expires    {} (Unix ms)", x["expires_at_ms"]);
                println!("next: glove plan new --template T --profile P --exposure {id}:{generation}[:MODE]");
            }
            EXIT_OK
        }
        Err(e) => client_fail(&e, a.json),
    }
}

fn modes(x: &Value) -> String {
    x["modes"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["access"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `glove exposures …`.
pub fn command(c: &ExposuresCommand) -> i32 {
    match c {
        ExposuresCommand::List(a) => {
            match connect(&a.runtime_dir).and_then(|mut c| c.call("exposure_catalog", json!({}))) {
                Ok(v) if a.json => {
                    print_json(&v);
                    EXIT_OK
                }
                Ok(v) => {
                    for x in v["exposures"].as_array().cloned().unwrap_or_default() {
                        println!(
                            "{:<24} {:>4} {:<8} {:<20} {:<26} {}",
                            x["exposure_id"].as_str().unwrap_or_default(),
                            x["generation"],
                            x["state"].as_str().unwrap_or_default(),
                            x["label"].as_str().unwrap_or_default(),
                            modes(&x),
                            x["expires_at_ms"],
                        );
                    }
                    EXIT_OK
                }
                Err(e) => client_fail(&e, a.json),
            }
        }
        ExposuresCommand::Revoke(a) => {
            let mut p = json!({"exposure_id": a.id});
            if let (Some(g), Some(m)) = (a.generation, p.as_object_mut()) {
                m.insert("generation".into(), g.into());
            }
            match connect(&a.runtime_dir).and_then(|mut c| c.call("exposure_revoke", p)) {
                Ok(v) if a.json => {
                    print_json(&v);
                    EXIT_OK
                }
                Ok(v) => {
                    println!(
                        "revoked {} generation {}",
                        a.id, v["exposure"]["generation"]
                    );
                    EXIT_OK
                }
                Err(e) => client_fail(&e, a.json),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_lexically() {
        let cwd = Path::new("/home/u/src");
        assert_eq!(absolute(Path::new("p"), cwd).unwrap(), "/home/u/src/p");
        assert_eq!(
            absolute(Path::new("./p/../q/"), cwd).unwrap(),
            "/home/u/src/q"
        );
        assert_eq!(absolute(Path::new("/a/b/.."), cwd).unwrap(), "/a");
        assert_eq!(absolute(Path::new("/.."), cwd).unwrap(), "/");
    }
}
