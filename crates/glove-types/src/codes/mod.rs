//! Stable error codes.
//!
//! Every rejection anywhere in Glove carries one [`ErrorCode`]: a stable
//! snake_case identifier plus a one-line meaning. The codes are defined once,
//! in one table per area (one file each below), and the whole catalogue is
//! pinned by a snapshot test and mirrored in `docs/error-codes.md`, so a
//! rename or removal is a visible diff.
//!
//! Codes are never reused for a different meaning. Messages that accompany a
//! code may change; the code may not.

use core::fmt;

/// Declares the codes of one area: a `pub const` per code and a `TABLE`
/// slice listing them in declaration order.
macro_rules! define_codes {
    ($area:ident; $( $(#[$m:meta])* $name:ident = $code:literal : $meaning:literal ),+ $(,)?) => {
        $(
            $(#[$m])*
            #[doc = concat!("`", $code, "`: ", $meaning)]
            pub const $name: $crate::codes::ErrorCode = $crate::codes::ErrorCode::new(
                $code, $crate::codes::Area::$area, $meaning,
            );
        )+
        /// Every code of this area, in declaration order.
        pub(crate) const TABLE: &[$crate::codes::ErrorCode] = &[ $( $name ),+ ];
    };
}

pub mod apply;
pub mod bundle;
pub mod cli;
pub mod control;
pub mod daemon;
pub mod egress;
pub mod exposure;
pub mod file;
pub mod ids;
pub mod journal;
pub mod json;
pub mod lifecycle;
pub mod mcp;
pub mod plan;
pub mod policy;
pub mod refinement;
pub mod retained;
pub mod sandbox;
pub mod stage;
pub mod workspace;

/// The part of Glove that owns a code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Area {
    /// Strict and canonical JSON decoding.
    Json,
    /// Identifiers and digests.
    Ids,
    /// Protected-file checks.
    File,
    /// Session policy validation.
    Policy,
    /// Plan decoding and admission.
    Plan,
    /// Library bundles and skill expansion.
    Bundle,
    /// Durable journals and stores.
    Journal,
    /// Session and apply lifecycles.
    Lifecycle,
    /// The control protocol.
    Control,
    /// The Linux sandbox.
    Sandbox,
    /// Egress decisions (what the proxy refuses, and why).
    Egress,
    /// MCP mediation (what the mediator refuses, and why).
    Mcp,
    /// Staging harness closures.
    Stage,
    /// Retained workspaces: images, stages and their records.
    Retained,
    /// Retained workspaces: manifests and diffs.
    Workspace,
    /// The command-line front end.
    Cli,
    /// Apply authorizations, the trust policy and the signing key.
    Apply,
    /// `glove daemon`: the service unit and the service manager.
    Daemon,
    /// Dynamic path exposures: their policy, journal and use by plans.
    Exposure,
    /// `refinement-eval-v1`: evaluation templates, bindings, fixtures,
    /// outcomes and their receipt.
    Refinement,
}

impl Area {
    /// Lowercase name used in the catalogue.
    pub const fn as_str(self) -> &'static str {
        match self {
            Area::Json => "json",
            Area::Ids => "ids",
            Area::File => "file",
            Area::Policy => "policy",
            Area::Plan => "plan",
            Area::Bundle => "bundle",
            Area::Journal => "journal",
            Area::Lifecycle => "lifecycle",
            Area::Control => "control",
            Area::Sandbox => "sandbox",
            Area::Egress => "egress",
            Area::Mcp => "mcp",
            Area::Stage => "stage",
            Area::Retained => "retained",
            Area::Workspace => "workspace",
            Area::Cli => "cli",
            Area::Apply => "apply",
            Area::Daemon => "daemon",
            Area::Exposure => "exposure",
            Area::Refinement => "refinement",
        }
    }
}

/// A stable, machine-readable error code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode {
    code: &'static str,
    area: Area,
    meaning: &'static str,
}

impl ErrorCode {
    const fn new(code: &'static str, area: Area, meaning: &'static str) -> Self {
        Self {
            code,
            area,
            meaning,
        }
    }

    /// The snake_case code, e.g. `plan_resource_limit_mismatch`.
    pub const fn as_str(&self) -> &'static str {
        self.code
    }

    /// The area that owns this code.
    pub const fn area(&self) -> Area {
        self.area
    }

    /// A one-line, path-free description of what the code means.
    pub const fn meaning(&self) -> &'static str {
        self.meaning
    }

    /// Every code Glove defines, area by area.
    pub fn all() -> impl Iterator<Item = ErrorCode> {
        [
            json::TABLE,
            ids::TABLE,
            file::TABLE,
            policy::TABLE,
            plan::TABLE,
            bundle::TABLE,
            journal::TABLE,
            lifecycle::TABLE,
            control::TABLE,
            sandbox::TABLE,
            egress::TABLE,
            mcp::TABLE,
            stage::TABLE,
            retained::TABLE,
            workspace::TABLE,
            cli::TABLE,
            apply::TABLE,
            daemon::TABLE,
            exposure::TABLE,
            refinement::TABLE,
        ]
        .into_iter()
        .flatten()
        .copied()
    }

    /// Looks a code up by its string form.
    pub fn from_code(code: &str) -> Option<ErrorCode> {
        Self::all().find(|c| c.code == code)
    }

    /// Renders the catalogue as the Markdown table kept in
    /// `docs/error-codes.md`.
    pub fn catalogue_markdown() -> String {
        let mut out = String::from(
            "# Error codes\n\n\
             Generated from `crates/glove-types/src/codes/`; a test keeps this file in step.\n\
             Regenerate with `GLOVE_BLESS=1 cargo test -p glove-types --test it codes`.\n",
        );
        let mut area = None;
        for c in Self::all() {
            if area != Some(c.area) {
                area = Some(c.area);
                out.push_str(&format!(
                    "\n## {}\n\n| code | meaning |\n| --- | --- |\n",
                    c.area.as_str()
                ));
            }
            out.push_str(&format!("| `{}` | {} |\n", c.code, c.meaning));
        }
        out
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ErrorCode({})", self.code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code)
    }
}
