//! `glove receipts show`: receipts from a running `gloved`, rendered for a
//! person — what each session was allowed and used and how it ended, and
//! what each apply transaction did — or, with `--json`, decoded (each body
//! a JSON object, not a string).
//!
//! Bodies are decoded strictly ([`ResourceReceiptV1::decode`],
//! [`RefinementReceiptV1::decode`], [`ApplyReceiptV1::decode`]); a body
//! that does not decode is shown as
//! such. The client has no receipt key, so it cannot check the MACs: it
//! checks that each envelope agrees with the page (sequence number, chain
//! value, kind) and says that `glove receipts verify` checks the MACs
//! offline.

use crate::control::client::{Client, ClientError};
use crate::control::client_cli::{connect, fail, ConnArgs};
use crate::report::{print_json, EXIT_OK};
use clap::Args;
use glove_types::policy::ResourceLimits;
use glove_types::receipt::{
    ApplyOutcome, ApplyReceiptV1, Exit, LimitName, RefinementReceiptV1, ResourceReceiptV1,
    Termination, Usage, APPLY_KIND, KIND as RESOURCE_KIND,
};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Arguments of `glove receipts show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Show receipts after this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// At most this many receipts (with --session: matching ones)
    /// [default: 64, at most 1024].
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Only receipts naming this session (its session receipt and the
    /// apply receipts of its retained stages); pages until the end.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// What the pages delivered: the receipts kept and the last head.
struct Shown {
    head: Value,
    receipts: Vec<Value>,
}

/// Pages from `after`; with a session filter, keeps paging until the end
/// or until `max` receipts matched.
fn fetch(c: &mut Client, a: &ShowArgs) -> Result<Shown, ClientError> {
    let limit = a.max.unwrap_or(64);
    let mut after = a.after;
    let mut out = Shown {
        head: Value::Null,
        receipts: Vec::new(),
    };
    loop {
        let page = c.receipts_page(after, a.max)?;
        out.head = page.get("head").cloned().unwrap_or(Value::Null);
        let items = page.get("receipts").and_then(Value::as_array);
        let items = items.cloned().unwrap_or_default();
        let Some(filter) = a.session.as_deref() else {
            out.receipts = items;
            return Ok(out);
        };
        let last = items
            .last()
            .and_then(|r| r.get("seq"))
            .and_then(Value::as_u64);
        for r in items {
            if names_session(&r, filter) && (out.receipts.len() as u64) < limit {
                out.receipts.push(r);
            }
        }
        match last {
            Some(seq) if seq > after && (out.receipts.len() as u64) < limit => after = seq,
            _ => return Ok(out),
        }
    }
}

/// Runs `glove receipts show` and returns the exit status.
pub fn run(a: &ShowArgs) -> i32 {
    match connect(&a.conn).and_then(|mut c| fetch(&mut c, a)) {
        Ok(s) => {
            let items: Vec<Item> = s.receipts.iter().map(Item::of).collect();
            if a.conn.json {
                print_json(&to_json(&s.head, &items));
            } else {
                print!("{}", render(&s.head, &items, a.session.as_deref()));
            }
            EXIT_OK
        }
        Err(e) => fail(&e, a.conn.json),
    }
}

/// A delivered receipt, decoded as far as it goes.
pub(crate) struct Item {
    seq: Value,
    kind: String,
    chain: String,
    /// The body as JSON, when the envelope parses.
    raw: Option<Value>,
    body: Body,
    /// `None` when the envelope agrees with the page; otherwise why not.
    disagreement: Option<String>,
}

enum Body {
    Resource(Box<ResourceReceiptV1>),
    Refinement(Box<RefinementReceiptV1>),
    Apply(ApplyReceiptV1),
    /// A kind this client does not render.
    Other,
    /// The body did not decode: code and message.
    Invalid(String, String),
}

impl Item {
    /// Decodes one `{seq, kind, chain, envelope}` of a page.
    pub(crate) fn of(r: &Value) -> Item {
        let seq = r.get("seq").cloned().unwrap_or(Value::Null);
        let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let (kind, chain) = (text("kind"), text("chain"));
        let env = serde_json::from_str::<Value>(&text("envelope")).ok();
        let raw = env.as_ref().and_then(|e| e.get("body")).cloned();
        let disagreement = match &env {
            None => Some("the envelope is not JSON".to_owned()),
            Some(e) if e.get("seq") != Some(&seq) => Some("its seq is not the page's".into()),
            Some(e) if e.get("chain").and_then(Value::as_str) != Some(chain.as_str()) => {
                Some("its chain value is not the page's".into())
            }
            Some(e) if e.get("receipt_kind").and_then(Value::as_str) != Some(kind.as_str()) => {
                Some("its kind is not the page's".into())
            }
            Some(_) => None,
        };
        let body = match raw.as_ref().map(glove_types::canon::to_canonical) {
            None => Body::Invalid("receipt_body_invalid".into(), "no body".into()),
            Some(Err(e)) => Body::Invalid(e.code().as_str().into(), e.message().into()),
            Some(Ok(bytes)) if kind == RESOURCE_KIND => match ResourceReceiptV1::decode(&bytes) {
                Ok(b) => Body::Resource(Box::new(b)),
                Err(e) => Body::Invalid(e.code().as_str().into(), e.message().into()),
            },
            Some(Ok(bytes)) if kind == "refinement_v1" => match RefinementReceiptV1::decode(&bytes)
            {
                Ok(b) => Body::Refinement(Box::new(b)),
                Err(e) => Body::Invalid(e.code().as_str().into(), e.message().into()),
            },
            Some(Ok(bytes)) if kind == APPLY_KIND => match ApplyReceiptV1::decode(&bytes) {
                Ok(b) => Body::Apply(b),
                Err(e) => Body::Invalid(e.code().as_str().into(), e.message().into()),
            },
            Some(Ok(_)) => Body::Other,
        };
        Item {
            seq,
            kind,
            chain,
            raw,
            body,
            disagreement,
        }
    }
}

/// Whether a page item's body names `session` (as its session, or as
/// the session an apply receipt's stage came from).
fn names_session(r: &Value, session: &str) -> bool {
    r.get("envelope")
        .and_then(Value::as_str)
        .and_then(|e| serde_json::from_str::<Value>(e).ok())
        .is_some_and(|e| e.pointer("/body/session_id").and_then(Value::as_str) == Some(session))
}

/// The `--json` object: `{"head", "receipts": [{seq, kind, chain,
/// chained, body, decoded[, body_error]}]}`.
pub(crate) fn to_json(head: &Value, items: &[Item]) -> Value {
    let receipts: Vec<Value> = items
        .iter()
        .map(|i| {
            let mut o = json!({
                "seq": i.seq,
                "kind": i.kind,
                "chain": i.chain,
                "chained": i.disagreement.is_none(),
                "mac_checked": false,
                "body": i.raw.clone().unwrap_or(Value::Null),
                "decoded": matches!(i.body, Body::Resource(_) | Body::Apply(_)),
            });
            if let (Body::Invalid(code, message), Some(m)) = (&i.body, o.as_object_mut()) {
                m.insert(
                    "body_error".into(),
                    json!({"code": code, "message": message}),
                );
            }
            o
        })
        .collect();
    json!({"head": head, "receipts": receipts})
}

/// The text for a person.
pub(crate) fn render(head: &Value, items: &[Item], session: Option<&str>) -> String {
    let mut o = String::new();
    for i in items {
        render_item(&mut o, i);
        o.push('\n');
    }
    let head = head
        .as_str()
        .map_or_else(|| head.to_string(), str::to_owned);
    let _ = match session {
        Some(s) => writeln!(
            o,
            "{} receipt(s) naming session {}; head {head}",
            items.len(),
            clean(s)
        ),
        None => writeln!(o, "{} receipt(s); head {head}", items.len()),
    };
    o
}

fn render_item(o: &mut String, i: &Item) {
    let seq = i
        .seq
        .as_u64()
        .map_or_else(|| "?".to_owned(), |s| s.to_string());
    match &i.body {
        Body::Resource(r) => {
            let _ = writeln!(o, "receipt {seq}  {}  session {}", i.kind, r.session_id);
            resource(o, r);
        }
        Body::Refinement(r) => {
            let _ = writeln!(o, "receipt {seq}  {}  session {}", i.kind, r.session_id);
            refinement(o, r);
            resource(o, &r.resource);
        }
        Body::Apply(a) => {
            let _ = writeln!(
                o,
                "receipt {seq}  {}  transaction {}",
                i.kind, a.transaction_id
            );
            apply(o, a);
        }
        Body::Other => {
            let _ = writeln!(o, "receipt {seq}  {}", kind_text(&i.kind));
            line(o, "body", "a kind this client does not render (see --json)");
        }
        Body::Invalid(code, message) => {
            let _ = writeln!(o, "receipt {seq}  {}", kind_text(&i.kind));
            line(
                o,
                "body",
                &format!("does not decode: {}: {}", clean(code), clean(message)),
            );
        }
    }
    let chain = match &i.disagreement {
        None => format!(
            "chained (seq and chain {} agree with the page), MAC not checked here; \
             `glove receipts verify` checks it offline",
            short(&i.chain)
        ),
        Some(why) => format!("NOT consistent with the page: {why}"),
    };
    line(o, "verification", &chain);
}

fn kind_text(kind: &str) -> String {
    if kind.is_empty() {
        "(no kind)".to_owned()
    } else {
        clean(kind)
    }
}

fn line(o: &mut String, label: &str, text: &str) {
    let _ = writeln!(o, "  {label:<13}{text}");
}

fn resource(o: &mut String, r: &ResourceReceiptV1) {
    let runtime = match &r.adapter {
        Some(a) => format!(
            "{} (native adapter, home {})",
            clean(&a.runtime),
            clean(&a.home)
        ),
        None => "no native adapter (a plain command)".to_owned(),
    };
    line(o, "runtime", &runtime);
    line(o, "ended", &termination(&r.termination));
    limits_and_usage(o, r.limits.as_ref(), r.usage.as_ref());
    if let Some(e) = &r.egress {
        line(
            o,
            "egress",
            &format!(
                "policy {}: connections {} allowed, {} refused; requests {} allowed, \
                 {} refused, {} failed; {} up, {} down{}",
                clean(&e.policy_id),
                e.connections_allowed,
                e.connections_refused,
                e.requests_allowed,
                e.requests_refused,
                e.requests_failed,
                bytes(e.bytes_up),
                bytes(e.bytes_down),
                if e.audit_failed { "; AUDIT FAILED" } else { "" }
            ),
        );
    }
    if let Some(m) = &r.mcp {
        line(
            o,
            "mcp",
            &format!(
                "tool policy {}: {} allowed, {} denied, {} upstream errors{}",
                clean(&m.tool_policy_id),
                m.allowed,
                m.denied,
                m.upstream_errors,
                if m.audit_failed { "; AUDIT FAILED" } else { "" }
            ),
        );
    }
    for s in &r.retained {
        let end = match (&s.final_digest, &s.error) {
            (Some(d), _) => format!("final {}", short(d)),
            (None, e) => format!("not frozen ({})", clean(e.as_deref().unwrap_or("?"))),
        };
        line(
            o,
            "retained",
            &format!(
                "{}: baseline {}, {end}, image {}",
                clean(&s.alias),
                short(&s.baseline_digest),
                bytes(s.bytes)
            ),
        );
    }
    if let Some(rec) = &r.recovery {
        line(
            o,
            "recovered",
            &format!(
                "yes: found {}, process killed {}",
                rec.stage.as_str(),
                if rec.killed { "yes" } else { "no" }
            ),
        );
    }
}

fn apply(o: &mut String, a: &ApplyReceiptV1) {
    line(o, "session", a.session_id.as_str());
    let outcome = match &a.outcome {
        ApplyOutcome::Applied => "applied".to_owned(),
        ApplyOutcome::Failed { code, failed_in } => {
            format!("failed: {} (in {})", clean(code), failed_in.as_str())
        }
    };
    line(o, "outcome", &outcome);
    line(o, "target", a.target.as_str());
    line(
        o,
        "stage",
        &format!(
            "baseline {}, applied manifest {}",
            short(&a.baseline_digest.to_hex()),
            short(&a.manifest_digest.to_hex())
        ),
    );
    if a.recovered {
        line(o, "recovered", "yes: written by start-up recovery");
    }
}

fn termination(t: &Termination) -> String {
    let (what, reached) = match t {
        Termination::Exited {
            code,
            limits_reached,
        } => (format!("exited with code {code}"), limits_reached),
        Termination::Signaled {
            signal,
            limits_reached,
        } => (format!("killed by signal {signal}"), limits_reached),
        Termination::Stopped {
            exit,
            limits_reached,
        } => (
            format!("stopped on request ({})", exit_text(exit)),
            limits_reached,
        ),
        Termination::Limit {
            limit,
            exit,
            limits_reached,
        } => (
            format!(
                "stopped by the {} limit ({})",
                limit_label(*limit),
                exit_text(exit)
            ),
            limits_reached,
        ),
        Termination::Failed { code, message } => {
            return format!("failed: {}: {}", clean(code), clean(message));
        }
    };
    if reached.is_empty() {
        what
    } else {
        let names: Vec<&str> = reached.iter().map(|l| limit_label(*l)).collect();
        format!("{what}; limits reached: {}", names.join(", "))
    }
}

fn exit_text(e: &Exit) -> String {
    match e {
        Exit::Exited { code } => format!("exit code {code}"),
        Exit::Signaled { signal } => format!("signal {signal}"),
    }
}

fn limit_label(l: LimitName) -> &'static str {
    match l {
        LimitName::CpuTime => "cpu time",
        LimitName::Memory => "memory",
        LimitName::Pids => "processes",
        LimitName::WallTime => "wall time",
        LimitName::Disk => "disk",
        LimitName::TerminalOutput => "terminal output",
    }
}

/// One line of the table: name, limit, use, and how to show a value.
type Row = (&'static str, Option<u64>, Option<u64>, fn(u64) -> String);

fn limits_and_usage(o: &mut String, l: Option<&ResourceLimits>, u: Option<&Usage>) {
    if l.is_none() && u.is_none() {
        line(o, "limits", "none recorded (the session never ran)");
        return;
    }
    let _ = writeln!(o, "  {:<17}{:>12}  {:>12}", "limits", "allowed", "used");
    let rows: [Row; 6] = [
        (
            "cpu time",
            l.map(|l| l.cpu_time_ms),
            u.map(|u| u.cpu_time_ms),
            ms,
        ),
        (
            "memory",
            l.map(|l| l.memory_bytes),
            u.map(|u| u.peak_memory_bytes),
            bytes,
        ),
        (
            "processes",
            l.map(|l| l.pids),
            u.map(|u| u.pids_peak),
            |n| n.to_string(),
        ),
        (
            "wall time",
            l.map(|l| l.wall_time_ms),
            u.map(|u| u.wall_time_ms),
            ms,
        ),
        (
            "disk",
            l.map(|l| l.disk_bytes),
            u.map(|u| u.disk_bytes),
            bytes,
        ),
        (
            "terminal",
            l.map(|l| l.terminal_output_bytes),
            u.map(|u| u.terminal_bytes),
            bytes,
        ),
    ];
    for (name, limit, used, f) in rows {
        let cell = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), f);
        let _ = writeln!(o, "    {name:<15}{:>12}  {:>12}", cell(limit), cell(used));
    }
}

fn ms(v: u64) -> String {
    if v < 1000 {
        format!("{v} ms")
    } else {
        format!("{:.1} s", v as f64 / 1000.0)
    }
}

fn bytes(v: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if v < 1024 {
        return format!("{v} B");
    }
    let mut x = v as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if x < 1024.0 {
            break;
        }
        x /= 1024.0;
        unit = u;
    }
    format!("{x:.1} {unit}")
}

/// The first 12 characters of a digest and an ellipsis.
fn short(d: &str) -> String {
    match d.get(..12) {
        Some(p) if d.len() > 12 => format!("{}…", clean(p)),
        _ => clean(d),
    }
}

/// Text from a body, with control characters escaped so it cannot move
/// the terminal.
fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let esc: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            esc
        })
        .collect()
}

#[path = "receipts_show_refinement.rs"]
mod refinement;
use self::refinement::refinement;

#[cfg(test)]
#[path = "receipts_show_tests.rs"]
mod tests;
