//! `glove apply keygen` and `glove apply sign`: the owner's side of apply
//! authorizations (wiring only; the work is `glove_control::apply`).
//!
//! `glove apply SESSION` (the exchange itself) is parsed here too, beside
//! the subcommands, and refused until the exchange is wired.

use crate::cli::fail;
use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use clap::{Args, Subcommand};
use glove_control::apply::{keygen, load_signing_key, sign};
use glove_types::apply::{ApplyAuthorization, AuthorizationTerms, MAX_AUTHORIZATION_LIFETIME_MS};
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::ids::{ApplyGrantId, ApplyTargetId, SessionId, TrustKeyId};
use glove_types::{Rejection, Sha256Digest};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Default lifetime of a signed authorization, seconds.
pub const DEFAULT_TTL_SECS: u64 = 600;
/// Longest lifetime `glove apply sign` accepts, seconds.
pub const MAX_TTL_SECS: u64 = MAX_AUTHORIZATION_LIFETIME_MS / 1000;

/// `glove apply …`: with a subcommand, the key and signing tools; with a
/// SESSION and no subcommand, apply that session's retained stage.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ApplyCommand {
    /// A key or signing tool.
    #[command(subcommand)]
    pub action: Option<ApplyAction>,
    /// The session whose retained stage to apply.
    pub session: Option<String>,
    /// What applying the session's stage takes.
    #[command(flatten)]
    pub run: crate::apply_run::ApplyRunArgs,
}

/// `glove apply <subcommand>`
#[derive(Debug, Subcommand)]
pub enum ApplyAction {
    /// Make the owner's Ed25519 signing key (mode 0600, never overwrites)
    /// and print its public key and trust-policy entry.
    Keygen(KeygenArgs),
    /// Sign a single-use apply authorization with the owner's key.
    Sign(SignArgs),
    /// Finish or report applies a crash interrupted (every `glove apply`
    /// does this first).
    Recover(RecoverArgs),
    /// Print a trust policy listing the owner's public key, for root to
    /// install (`install -m 0644 -o root -g root`; docs/apply.md).
    TrustPolicy(TrustPolicyArgs),
}

/// `glove apply trust-policy`
#[derive(Debug, Args)]
pub struct TrustPolicyArgs {
    /// The signing key file [default: as for keygen].
    #[arg(long)]
    pub key: Option<PathBuf>,
}

/// `glove apply recover`
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `glove apply keygen`
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the key [default: $XDG_CONFIG_HOME/glove/apply-key,
    /// else /etc/glove/apply-key for root, ~/.config/glove/apply-key
    /// otherwise].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// The key's id in the trust policy.
    #[arg(long, default_value = "owner")]
    pub id: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `glove apply sign`
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The signing key file [default: as for keygen].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// The session whose retained stage is applied.
    #[arg(long)]
    pub session: String,
    /// The alias or exposure id it is applied to.
    #[arg(long)]
    pub target: String,
    /// The baseline manifest digest (64 hex, from `glove diff`).
    #[arg(long)]
    pub baseline: String,
    /// The staged manifest digest (64 hex, from `glove diff`).
    #[arg(long)]
    pub manifest: String,
    /// A grant id used once, ever.
    #[arg(long)]
    pub grant: String,
    /// Lifetime in seconds (1 to 86400).
    #[arg(long, default_value_t = DEFAULT_TTL_SECS)]
    pub ttl_secs: u64,
    /// Write the signed authorization to this new file instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The default key file (see [`KeygenArgs::key`]).
pub fn default_key_path() -> Option<PathBuf> {
    crate::layout::Layout::current().map(|l| l.apply_key())
}

fn key_path(given: &Option<PathBuf>) -> Result<PathBuf, Rejection> {
    given.clone().or_else(default_key_path).ok_or_else(|| {
        Rejection::new(
            CLI_INVALID_ARGUMENT,
            "no default key location (set XDG_CONFIG_HOME or HOME, or pass --key)",
        )
        .at("key")
    })
}

/// Runs `glove apply …`.
pub fn command(c: &ApplyCommand) -> i32 {
    match (&c.action, &c.session) {
        (Some(ApplyAction::Keygen(a)), _) => run_keygen(a),
        (Some(ApplyAction::Sign(a)), _) => run_sign(a),
        (Some(ApplyAction::Recover(a)), _) => crate::apply_run::recover_only(a.json),
        (Some(ApplyAction::TrustPolicy(a)), _) => run_trust_policy(a),
        (None, Some(session)) => crate::apply_run::run(session, &c.run),
        (None, None) => fail(
            &Rejection::new(
                CLI_INVALID_ARGUMENT,
                "name a SESSION, or use `glove apply keygen` or `glove apply sign`",
            ),
            false,
            None,
        ),
    }
}

fn run_trust_policy(a: &TrustPolicyArgs) -> i32 {
    let result = key_path(&a.key).and_then(|p| load_signing_key(&p));
    match result {
        Ok(key) => {
            let entry = Sha256Digest::parse(&key.public_key_hex())
                .map(|d| glove_types::apply::TrustedKey::new(key.id().clone(), *d.as_bytes()))
                .and_then(|k| glove_types::apply::ApplyTrustPolicy::new(vec![k]))
                .and_then(|p| p.encode());
            match entry {
                Ok(bytes) => {
                    println!("{}", String::from_utf8_lossy(&bytes));
                    EXIT_OK
                }
                Err(e) => fail(&e, false, None),
            }
        }
        Err(e) => fail(&e, false, None),
    }
}

fn run_keygen(a: &KeygenArgs) -> i32 {
    let result = (|| {
        let path = key_path(&a.key)?;
        let id = TrustKeyId::new(a.id.as_str()).map_err(|r| r.at("id"))?;
        if a.key.is_none() {
            make_default_dir(&path)?;
        }
        let key = keygen(&path, id)?;
        Ok::<_, Rejection>((path, key))
    })();
    let (path, key) = match result {
        Ok(v) => v,
        Err(e) => return fail(&e, a.json, None),
    };
    if a.json {
        print_json(&json!({
            "key_file": path.display().to_string(),
            "id": key.id().as_str(),
            "public_key": key.public_key_hex(),
            "trust_entry": {"id": key.id().as_str(), "public_key": key.public_key_hex()},
        }));
    } else {
        println!("wrote {} (key id {})", path.display(), key.id());
        println!("public key: {}", key.public_key_hex());
        println!("trust-policy entry: {}", key.trust_entry());
    }
    EXIT_OK
}

/// Creates the default key's directory when missing: `glove` under the
/// config home, mode 0700 (0755 for `/etc/glove`, which also holds the
/// trust policy the service reads).
fn make_default_dir(key: &Path) -> Result<(), Rejection> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = key.parent() else {
        return Ok(());
    };
    if dir.exists() {
        return Ok(());
    }
    let mode = if rustix::process::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| {
            Rejection::new(
                glove_types::codes::apply::APPLY_FILE_IO,
                format!("cannot create {}: {e}", dir.display()),
            )
        })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn authorization(a: &SignArgs, key_id: TrustKeyId) -> Result<ApplyAuthorization, Rejection> {
    if a.ttl_secs == 0 || a.ttl_secs > MAX_TTL_SECS {
        return Err(Rejection::new(
            CLI_INVALID_ARGUMENT,
            format!("--ttl-secs must be 1 to {MAX_TTL_SECS}"),
        )
        .at("ttl_secs"));
    }
    let issued = now_ms();
    ApplyAuthorization::new(AuthorizationTerms {
        session_id: SessionId::new(a.session.as_str()).map_err(|r| r.at("session"))?,
        target: ApplyTargetId::new(a.target.as_str()).map_err(|r| r.at("target"))?,
        baseline_digest: Sha256Digest::parse(&a.baseline).map_err(|r| r.at("baseline"))?,
        manifest_digest: Sha256Digest::parse(&a.manifest).map_err(|r| r.at("manifest"))?,
        grant_id: ApplyGrantId::new(a.grant.as_str()).map_err(|r| r.at("grant"))?,
        issued_at_ms: issued,
        expires_at_ms: issued.saturating_add(a.ttl_secs * 1000),
        key_id,
    })
}

fn run_sign(a: &SignArgs) -> i32 {
    let result = (|| {
        let key = load_signing_key(&key_path(&a.key)?)?;
        let auth = authorization(a, key.id().clone())?;
        let signed = sign(&key, &auth)?;
        let mut text = signed.canonical_bytes().to_vec();
        text.push(b'\n');
        if let Some(out) = &a.out {
            write_new(out, &text)?;
        }
        Ok::<_, Rejection>((signed, text))
    })();
    let (signed, text) = match result {
        Ok(v) => v,
        Err(e) => return fail(&e, a.json, None),
    };
    let digest = signed.authorization_digest().to_hex();
    let expires = signed.authorization().expires_at_ms();
    match (a.json, &a.out) {
        (true, out) => {
            let body: serde_json::Value =
                serde_json::from_slice(signed.canonical_bytes()).unwrap_or_default();
            print_json(&json!({
                "signed_authorization": body,
                "authorization_digest": digest,
                "expires_at_ms": expires,
                "out": out.as_ref().map(|p| p.display().to_string()),
            }));
        }
        (false, Some(out)) => {
            println!("wrote {}", out.display());
            println!("authorization_digest: {digest}");
            println!("expires_at_ms: {expires}");
        }
        (false, None) => {
            use std::io::Write as _;
            if std::io::stdout().lock().write_all(&text).is_err() {
                return EXIT_REJECTED;
            }
        }
    }
    EXIT_OK
}

/// Writes `bytes` to the new file `path` (mode 0644; `O_CREAT | O_EXCL`:
/// an existing file, or a link in its place, is refused, not replaced).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), Rejection> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |e: std::io::Error| {
        Rejection::new(
            glove_types::codes::apply::APPLY_FILE_IO,
            format!("cannot write {}: {e}", path.display()),
        )
        .at("out")
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}
