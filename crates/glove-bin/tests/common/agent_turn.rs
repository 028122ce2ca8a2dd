//! One `glove run --agent` turn against the scripted model endpoint
//! (`tests/model_stub/stub.py`) with every check of issue 30 (see
//! `tests/agent.rs`): over plain HTTP on host loopback, or over HTTPS as
//! `model.test` with a private CA's certificate.
use super::apply_env::{json_of, ready, snapshot, text, Env};
use super::model_stub::Stub;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

pub(crate) const PROMPT: &str = "Change the files as the task says.";
/// The turn's shell command: a write (env.txt: the environment of every
/// process in the sandbox it can read, the harness's own included; a
/// harness may scrub its tools' environment), an edit (edit.txt) and a
/// delete (gone.txt), new/added.txt written.
const SCRIPT: &str = "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u > env.txt && printf 'one\\n2\\n' > edit.txt && rm gone.txt && mkdir -p new && echo fresh > new/added.txt && echo \"read:ok:$PWD\"";

/// One harness at a time: each turn is a few hundred MB of memory.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn stub(dir: &Path, extra: &[&str]) -> Stub {
    let mut args = vec!["--shell-command", SCRIPT];
    args.extend_from_slice(extra);
    super::model_stub::start(dir, &args)
}

fn header<'a>(entry: &'a Value, name: &str) -> Option<&'a str> {
    entry["headers"].as_array()?.iter().find_map(|h| {
        (h[0].as_str()?.eq_ignore_ascii_case(name))
            .then(|| h[1].as_str())
            .flatten()
    })
}

/// Runs glove with the test's stage, apply and state directories.
pub(crate) fn glove(env: &Env, args: &[&str]) -> Output {
    let (stages, apply, trust, state) = (
        env.p("stages"),
        env.p("apply"),
        env.p("trust/policy.json"),
        env.p("state"),
    );
    super::glove_with_env(
        super::As::Caller,
        args,
        None,
        &[
            ("GLOVE_STAGE_DIR", stages.as_os_str()),
            ("GLOVE_APPLY_DIR", apply.as_os_str()),
            ("GLOVE_APPLY_TRUST", trust.as_os_str()),
            ("XDG_STATE_HOME", state.as_os_str()),
        ],
    )
}

fn mcp_profile(env: &Env) -> Option<PathBuf> {
    let servers = PathBuf::from(std::env::var_os("GLOVE_MCP_SERVERS")?);
    let profile = env.p("mcp-profile.json");
    let v = serde_json::json!({"schema_version": 1, "servers": [{
        "server_id": "everything",
        "command": {"path": "/usr/bin/node",
                    "arguments": [servers.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                    "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
        "tools": [{"name": "echo"}],
    }]});
    std::fs::write(&profile, v.to_string()).expect("profile");
    std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    Some(profile)
}

/// How a turn is run.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Opts {
    /// The stub also asks for a mediated MCP tool call.
    pub(crate) mcp: bool,
    /// The harness found where it is: the copy `glove policy stage` made
    /// in the state directory `glove setup` uses, found with no
    /// `--harness-path`.
    pub(crate) staged: bool,
    /// The stub serves HTTPS as `model.test` with a certificate of a
    /// private CA: `--model https://model.test:PORT --resolve
    /// model.test:127.0.0.1 --egress-ca CA`.
    pub(crate) https: bool,
}

/// One `glove run --agent` turn of `agent` with its one-turn `args`, and
/// every check of the issue; the harness given with `--harness-path`.
pub(crate) fn turn(agent: &str, args: &[&str], mcp: bool) {
    turn_from(
        agent,
        args,
        Opts {
            mcp,
            ..Opts::default()
        },
    )
}

/// Writes `text` into a new file of mode 0600.
fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A private CA and a leaf for `name` it signed, as PEM files (mode 0600)
/// in `dir`: the CA's, the leaf's chain and its key.
fn private_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec![name.to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("leaf");
    let paths = (
        dir.join("ca.pem"),
        dir.join("leaf.pem"),
        dir.join("leaf.key"),
    );
    write_private(&paths.0, &issuer.pem());
    write_private(&paths.1, &leaf.pem());
    write_private(&paths.2, &key.serialize_pem());
    paths
}

/// A turn as [`turn`] runs it, with `o`.
pub(crate) fn turn_from(agent: &str, args: &[&str], o: Opts) {
    let Opts { mcp, staged, https } = o;
    let Some(nm) = super::harnesses() else {
        return;
    };
    if !ready() || !super::python_ok() {
        return;
    }
    if mcp
        && !super::need(
            std::env::var_os("GLOVE_MCP_SERVERS").is_some(),
            "GLOVE_MCP_SERVERS is not set",
        )
    {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let h = glove_types::harness::by_id(agent).expect("a registered harness");
    let env = Env::new();
    env.write("edit.txt", "one\ntwo\n");
    env.write("gone.txt", "bye\n");
    env.write("keep.txt", "k\n");
    let before = snapshot(&env.src());
    let owner_key = env.key("owner.key", true);
    let real = format!("sk-glove-real-{agent}-51c3");
    let key = env.p("model.key");
    std::fs::write(&key, format!("{real}\n")).expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut stub_args: Vec<String> = Vec::new();
    if mcp {
        stub_args.extend(["--mcp-tool", "echo", "--then-shell"].map(String::from));
    }
    let tls = https.then(|| private_ca(env.dir.path(), "model.test"));
    if let Some((_, cert, key)) = &tls {
        stub_args.extend(["--tls-cert".into(), cert.display().to_string()]);
        stub_args.extend(["--tls-key".into(), key.display().to_string()]);
    }
    let stub_refs: Vec<&str> = stub_args.iter().map(String::as_str).collect();
    let st = stub(env.dir.path(), &stub_refs);
    let url = match &tls {
        Some(_) => format!("https://model.test:{}", st.port),
        None => format!("http://127.0.0.1:{}", st.port),
    };
    let (src, key_s, nm_s) = (
        env.src().display().to_string(),
        key.display().to_string(),
        nm.display().to_string(),
    );
    if staged {
        let root = env.p("state/glove/harnesses").display().to_string();
        let out = glove(
            &env,
            &[
                "policy",
                "stage",
                "--runtime",
                agent,
                "--source",
                &nm_s,
                "--directory",
                &root,
                "--yes",
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "stage: {}", text(&out.stderr));
    }
    let mut cmd: Vec<String> = [
        "run",
        "--agent",
        agent,
        "--model",
        &url,
        "--model-name",
        "glove-stub",
        "--key-file",
        &key_s,
        "--workspace",
        &src,
        "--disk",
        "2G",
        "--memory",
        "3G",
        "--pids",
        "1024",
        "--wall-ms",
        "300000",
        "--cpu-ms",
        "600000",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !staged {
        cmd.extend(["--harness-path".into(), nm_s.clone()]);
    }
    if let Some((ca, _, _)) = &tls {
        cmd.extend(["--resolve".into(), "model.test:127.0.0.1".into()]);
        cmd.extend(["--egress-ca".into(), ca.display().to_string()]);
    }
    let profile = if mcp { mcp_profile(&env) } else { None };
    if let Some(p) = &profile {
        cmd.extend(["--profile".into(), p.display().to_string()]);
    }
    cmd.push("--".into());
    cmd.extend(args.iter().map(|s| s.to_string()));
    let a: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = glove(&env, &a);
    let stdout = text(&out.stdout);
    let log = std::fs::read_to_string(&st.log).unwrap_or_default();
    let requests: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {} -> {}", r["method"], r["path"], r["answer"]))
        .collect();
    let what = format!(
        "{agent}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{}\nrequests:\n  {}",
        out.status.code(),
        text(&out.stderr),
        summary.join("\n  ")
    );
    assert_eq!(out.status.code(), Some(0), "{what}");
    assert!(
        text(&out.stderr).contains("preparing the sandbox"),
        "no status line\n{what}"
    );
    if staged {
        assert!(
            text(&out.stderr).contains("(staged, "),
            "not the staged copy\n{what}"
        );
    }
    let outcome: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: no outcome line\n{what}"));

    // The stub saw the real key in every model request, never a placeholder.
    let model: Vec<&Value> = requests.iter().filter(|r| r["answer"].is_array()).collect();
    assert!(model.len() >= 2, "{what}");
    let want = h.model.key_format.value(&real);
    assert!(
        model
            .iter()
            .all(|r| header(r, h.model.key_header) == Some(want.as_str())),
        "a model request without the real key\n{what}"
    );
    assert!(!log.contains("glove-placeholder-"), "{what}");
    assert!(
        !stdout.contains(&real),
        "the real key in the output\n{what}"
    );

    // The diff shows exactly the turn's changes.
    let session = outcome["workspace"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no workspace\n{what}"))
        .to_owned();
    let d = json_of(&glove(&env, &["diff", &session, "--json"]));
    let mut changes: Vec<(String, String)> = d["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_owned(),
                c["change"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    changes.sort();
    let expected: Vec<(String, String)> = [
        ("edit.txt", "modified"),
        ("env.txt", "added"),
        ("gone.txt", "removed"),
        ("new", "added"),
        ("new/added.txt", "added"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    assert_eq!(changes, expected, "{d}\n{what}");
    assert_eq!(
        snapshot(&env.src()),
        before,
        "the source changed before apply"
    );

    // glove apply brings it to the host tree.
    let applied = glove(
        &env,
        &["apply", &session, "--yes", "--json", "--key", &owner_key],
    );
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied.stderr));
    let src_p = env.src();
    let read = |p: &str| std::fs::read_to_string(src_p.join(p)).unwrap_or_default();
    assert_eq!(read("edit.txt"), "one\n2\n");
    assert_eq!(read("new/added.txt"), "fresh\n");
    assert_eq!(read("keep.txt"), "k\n");
    assert!(!src_p.join("gone.txt").exists());
    // The sandbox's environment held the placeholder, never the key.
    let seen_env = read("env.txt");
    let line = format!("{}=glove-placeholder-", h.model.key_variable);
    assert!(seen_env.lines().any(|l| l.starts_with(&line)), "{seen_env}");
    assert!(!seen_env.contains(&real), "{seen_env}");

    // The egress journal and the outcome agree.
    let e = &outcome["egress"];
    let journal = e["journal"].as_str().expect("journal");
    let shown = json_of(&glove(
        &env,
        &["egress", "show", "--journal", journal, "--json"],
    ));
    assert_eq!(shown["head"], e["journal_head"], "{shown}\n{e}");
    assert_eq!(shown["records"], e["journal_records"], "{shown}\n{e}");
    let events = shown["events"].as_array().expect("events");
    let allowed_requests = events
        .iter()
        .filter(|ev| ev["kind"] == "request" && ev["phase"] != "end" && ev["decision"] == "allowed")
        .count() as u64;
    assert_eq!(
        e["requests_allowed"].as_u64(),
        Some(allowed_requests),
        "{shown}\n{e}"
    );
    // Every request the stub saw was an allowed decision, each model
    // request with the key brokered (named by its handle).
    assert_eq!(allowed_requests, requests.len() as u64, "{shown}\n{what}");
    let brokered = events
        .iter()
        .filter(|ev| ev["phase"] != "end" && ev["credential"] == "agent-model-key")
        .count();
    assert!(brokered >= model.len(), "{shown}\n{what}");
    let raw = std::fs::read(journal).expect("journal bytes");
    assert!(!raw.windows(real.len()).any(|w| w == real.as_bytes()));

    if mcp {
        let m = &outcome["mcp"];
        assert!(m["allowed"].as_u64().unwrap_or(0) >= 1, "{m}\n{what}");
        let audit = glove(
            &env,
            &[
                "audit",
                "show",
                "--json",
                "--journal",
                m["journal"].as_str().expect("journal"),
                "--head",
                m["journal_head"].as_str().expect("head"),
            ],
        );
        let shown = json_of(&audit);
        assert!(
            shown["events"]
                .as_array()
                .expect("events")
                .iter()
                .any(|e| e["method"] == "tools/call"
                    && e["tool"] == "echo"
                    && e["decision"] == "allowed"),
            "{shown}"
        );
        assert!(log.contains("glove-mcp-turn"), "{what}");
    }
    eprintln!(
        "glove run --agent {agent}{}: exit 0, {} model requests, egress {} allowed{}",
        if https { " over HTTPS" } else { "" },
        model.len(),
        e["requests_allowed"],
        if mcp { ", a mediated MCP call" } else { "" }
    );
}
