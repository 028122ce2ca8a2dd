//! `glove diff` and `glove stages`: what an agent changed in a retained
//! workspace, and the stages this user keeps.
//!
//! `glove diff SESSION` shows a summary and the unified diff (colour on a
//! terminal, plain in a pipe); `--stat` the summary only; `--json` a
//! document for scripts; `--patch` a patch that `git apply` takes, or a
//! refusal naming what a patch cannot carry.

use crate::report::{print_json, EXIT_REJECTED};
use clap::{Args, Subcommand};
use glove_control::stages::{self, StageStore};
use glove_control::workspace::render::patch::render_patch;
use glove_control::workspace::render::{render_json, render_stat};
use glove_types::Rejection;
use std::io::IsTerminal;

/// Arguments of `glove diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The session whose workspace to show.
    pub session: String,
    /// The workspace's alias, when the session has several.
    #[arg(long)]
    pub alias: Option<String>,
    /// Only the summary: one line per changed path.
    #[arg(long, conflicts_with_all = ["json", "patch"])]
    pub stat: bool,
    /// One JSON document: every change, with sizes, modes and digests, and
    /// what apply cannot carry.
    #[arg(long, conflicts_with = "patch")]
    pub json: bool,
    /// A patch that `git apply` takes (refused, with the paths, when a
    /// change cannot be written as one).
    #[arg(long)]
    pub patch: bool,
    /// A stage of gloved's managed sessions, through its owner socket.
    #[arg(long)]
    pub service: bool,
    /// gloved's runtime directory (with --service) [default: as for the
    /// control client].
    #[arg(long, value_name = "DIR", requires = "service")]
    pub runtime_dir: Option<std::path::PathBuf>,
}

/// `glove stages …`
#[derive(Debug, Subcommand)]
pub enum StagesCommand {
    /// List the retained stages: session, alias, state, size and age.
    List(ListArgs),
    /// Remove a stage (refused while its session runs).
    Rm(RmArgs),
    /// Remove every stage older than an age.
    Prune(PruneArgs),
}

/// Arguments of `glove stages list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
    /// gloved's stages, through its owner socket.
    #[arg(long)]
    pub service: bool,
    /// gloved's runtime directory (with --service).
    #[arg(long, value_name = "DIR", requires = "service")]
    pub runtime_dir: Option<std::path::PathBuf>,
}

/// Arguments of `glove stages rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// The session.
    pub session: String,
    /// The workspace's alias, when the session has several.
    #[arg(long)]
    pub alias: Option<String>,
    /// A stage of gloved's, through its owner socket.
    #[arg(long)]
    pub service: bool,
    /// gloved's runtime directory (with --service).
    #[arg(long, value_name = "DIR", requires = "service")]
    pub runtime_dir: Option<std::path::PathBuf>,
}

/// Arguments of `glove stages prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove stages made longer ago than this: seconds, or with an `m`,
    /// `h` or `d` suffix.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: u64,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
}

fn parse_age(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1u64),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3600),
        Some((i, 'd')) => (&s[..i], 86_400),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul * 1000))
        .ok_or_else(|| format!("{s:?} is not an age (digits with an optional s, m, h or d)"))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn fail(e: &Rejection, json: bool) -> i32 {
    crate::cli::fail(e, json, None)
}

fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Runs `glove diff`.
pub fn diff(a: &DiffArgs) -> i32 {
    if a.service {
        return crate::stages_service::diff(a);
    }
    match diff_inner(a) {
        Ok(code) => code,
        Err(e) => fail(&e, a.json),
    }
}

fn diff_inner(a: &DiffArgs) -> Result<i32, Rejection> {
    let store = crate::workspace::store()?;
    let stage = store.open_stage(&a.session, a.alias.as_deref())?;
    let seen = stages::inspect(&stage, now_ms())?;
    let changes = seen.changes();
    let trees = seen.trees();
    let ws = |e: glove_control::workspace::WorkspaceError| e.to_rejection();
    let blockers = seen.last.blockers();
    if a.json {
        let mut v = render_json(&changes, &trees).map_err(ws)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("session_id".into(), seen.record.session_id.clone().into());
            m.insert("alias".into(), seen.record.alias.clone().into());
        }
        seen.add_digests(&mut v);
        print_json(&v);
    } else if a.patch {
        let text = render_patch(&changes, &trees, false)
            .map_err(ws)?
            .complete()
            .map_err(ws)?;
        print!("{text}");
    } else {
        let c = colour();
        print!("{}", render_stat(&changes, &trees, c).map_err(ws)?);
        if !a.stat {
            let p = render_patch(&changes, &trees, c).map_err(ws)?;
            if !p.text.is_empty() {
                println!();
                print!("{}", p.text);
            }
        }
        if !blockers.is_empty() {
            println!();
            println!("apply cannot carry:");
            for b in &blockers {
                println!("  {}: {}", b.path, b.reason.describe());
            }
        }
    }
    seen.release()?;
    Ok(0)
}

/// `glove diff --stat SESSION`'s text (no colour), for the end of
/// `glove run --agent`.
pub(crate) fn stat_text(session: &str) -> Result<String, Rejection> {
    let store = crate::workspace::store()?;
    let stage = store.open_stage(session, None)?;
    let seen = stages::inspect(&stage, now_ms())?;
    let text = render_stat(&seen.changes(), &seen.trees(), false).map_err(|e| e.to_rejection())?;
    seen.release()?;
    Ok(text)
}

fn age(ms: u64) -> String {
    let s = now_ms().saturating_sub(ms) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Runs `glove stages …`.
pub fn stages_command(c: &StagesCommand) -> i32 {
    match c {
        StagesCommand::List(a) if a.service => {
            return crate::stages_service::list(&a.runtime_dir, a.json)
        }
        StagesCommand::Rm(a) if a.service => {
            return crate::stages_service::remove(&a.runtime_dir, &a.session, &a.alias)
        }
        _ => {}
    }
    let json = match c {
        StagesCommand::List(a) => a.json,
        StagesCommand::Prune(a) => a.json,
        StagesCommand::Rm(_) => false,
    };
    let store = match crate::workspace::store() {
        Ok(s) => s,
        Err(e) => return fail(&e, json),
    };
    match c {
        StagesCommand::List(a) => list(&store, a),
        StagesCommand::Rm(a) => match store.remove(&a.session, a.alias.as_deref()) {
            Ok(()) => {
                println!("removed the stage of {}", a.session);
                0
            }
            Err(e) => fail(&e, false),
        },
        StagesCommand::Prune(a) => prune(&store, a),
    }
}

fn list(store: &StageStore, a: &ListArgs) -> i32 {
    let (all, broken) = match store.list() {
        Ok(x) => x,
        Err(e) => return fail(&e, a.json),
    };
    if a.json {
        print_json(&serde_json::json!({
            "stages": all.iter().map(stages::StageSummary::to_json).collect::<Vec<_>>(),
            "broken": broken,
        }));
        return 0;
    }
    if all.is_empty() && broken.is_empty() {
        println!("no retained stages in {}", store.path().display());
        return 0;
    }
    println!(
        "{:<28} {:<12} {:<8} {:>10} {:>6}  SOURCE",
        "SESSION", "ALIAS", "STATE", "USED", "AGE"
    );
    for s in &all {
        let state = if s.running {
            "running"
        } else {
            match s.record.state {
                stages::StageState::Live => "live",
                stages::StageState::Frozen => "frozen",
            }
        };
        println!(
            "{:<28} {:<12} {:<8} {:>10} {:>6}  {}",
            s.record.session_id,
            s.record.alias,
            state,
            human_bytes(s.allocated_bytes),
            age(s.record.created_at_ms),
            s.record.source.as_deref().unwrap_or("-"),
        );
    }
    for b in &broken {
        println!("{b:<28} (no readable record; `glove stages rm` removes it)");
    }
    0
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn prune(store: &StageStore, a: &PruneArgs) -> i32 {
    let (all, _) = match store.list() {
        Ok(x) => x,
        Err(e) => return fail(&e, a.json),
    };
    let now = now_ms();
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    for s in all {
        let old = now.saturating_sub(s.record.created_at_ms) > a.older_than;
        if !old || s.running {
            continue;
        }
        match store.remove(&s.record.session_id, Some(&s.record.alias)) {
            Ok(()) => removed.push(format!("{}/{}", s.record.session_id, s.record.alias)),
            Err(e) => kept.push((format!("{}/{}", s.record.session_id, s.record.alias), e)),
        }
    }
    if a.json {
        print_json(&serde_json::json!({
            "removed": removed,
            "failed": kept.iter().map(|(n, e)| serde_json::json!({
                "stage": n, "code": e.code().as_str(), "message": e.message()
            })).collect::<Vec<_>>(),
        }));
    } else {
        println!("removed {} stage(s)", removed.len());
        for (n, e) in &kept {
            eprintln!("{n}: error[{}]: {}", e.code().as_str(), e.message());
        }
    }
    if kept.is_empty() {
        0
    } else {
        EXIT_REJECTED
    }
}
