//! Where Glove keeps its files on this machine: one rule for every command.
//!
//! Three directories, each chosen the same way: the XDG variable when it is
//! set to an absolute path, else the FHS location for root, else the XDG
//! default under `$HOME`.
//!
//! | directory | XDG variable | root | other users |
//! |---|---|---|---|
//! | configuration | `$XDG_CONFIG_HOME/glove` | `/etc/glove` | `~/.config/glove` |
//! | state | `$XDG_STATE_HOME/glove` | `/var/lib/glove` | `~/.local/state/glove` |
//! | runtime | `$XDG_RUNTIME_DIR/glove` | `/run/glove` | `/run/user/UID/glove` |
//!
//! The file names inside them are fixed here, so `glove setup` writes what
//! `gloved --config`, `glove daemon` and the clients later read.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The directories and the files `glove setup` makes in them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Configuration: keys, policies, the `gloved` config file.
    pub config: PathBuf,
    /// State: journals, the materialization root, staged harnesses.
    pub state: PathBuf,
    /// Runtime: the sockets and the bootstrap secret.
    pub runtime: PathBuf,
    /// Whether the process runs as root (FHS defaults, a system unit).
    pub root: bool,
    /// The user's home, when known (`~` in printed paths).
    pub home: Option<PathBuf>,
}

fn absolute(v: Option<OsString>) -> Option<PathBuf> {
    v.map(PathBuf::from).filter(|p| p.is_absolute())
}

impl Layout {
    /// The layout for this process's user and environment.
    pub fn current() -> Option<Layout> {
        Layout::from_env(|k| std::env::var_os(k), rustix::process::geteuid().as_raw())
    }

    /// The layout for `uid` with environment lookup `env`; `None` when a
    /// non-root user has neither the XDG variables nor an absolute `HOME`.
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>, uid: u32) -> Option<Layout> {
        let root = uid == 0;
        let home = absolute(env("HOME"));
        let pick = |var: &str, fhs: &str, under_home: &str| -> Option<PathBuf> {
            absolute(env(var))
                .or_else(|| root.then(|| PathBuf::from(fhs)))
                .or_else(|| home.as_ref().map(|h| h.join(under_home)))
        };
        let config = pick("XDG_CONFIG_HOME", "/etc", ".config")?.join("glove");
        let state = pick("XDG_STATE_HOME", "/var/lib", ".local/state")?.join("glove");
        let runtime = absolute(env("XDG_RUNTIME_DIR"))
            .unwrap_or_else(|| {
                if root {
                    PathBuf::from("/run")
                } else {
                    PathBuf::from(format!("/run/user/{uid}"))
                }
            })
            .join("glove");
        Some(Layout {
            config,
            state,
            runtime,
            root,
            home,
        })
    }

    /// `gloved`'s configuration file (`gloved --config`).
    pub fn gloved_config(&self) -> PathBuf {
        self.config.join("gloved.json")
    }
    /// The session policy.
    pub fn session_policy(&self) -> PathBuf {
        self.config.join("session-policy.json")
    }
    /// The path-exposure policy (`glove setup --path-root`).
    pub fn exposure_policy(&self) -> PathBuf {
        self.config.join("exposure-policy.json")
    }
    /// The receipt HMAC key.
    pub fn receipt_key(&self) -> PathBuf {
        self.config.join("receipt.key")
    }
    /// The start-authorization key.
    pub fn start_auth_key(&self) -> PathBuf {
        self.config.join("start-auth.key")
    }
    /// The owner's apply signing key.
    pub fn apply_key(&self) -> PathBuf {
        self.config.join("apply-key")
    }
    /// The session store journal.
    pub fn session_store(&self) -> PathBuf {
        self.state.join("sessions/store.journal")
    }
    /// The receipt journal.
    pub fn receipt_journal(&self) -> PathBuf {
        self.state.join("receipts/receipts.journal")
    }
    /// The path-exposure journal.
    pub fn exposure_journal(&self) -> PathBuf {
        self.state.join("exposures/exposures.journal")
    }
    /// The materialization root.
    pub fn materialization_root(&self) -> PathBuf {
        self.state.join("materialization")
    }
    /// Where `glove setup` stages harnesses.
    pub fn harness_root(&self) -> PathBuf {
        self.state.join("harnesses")
    }

    /// `path` with the home directory shown as `~` (for printing only).
    pub fn show(&self, path: &Path) -> String {
        match self.home.as_ref().and_then(|h| path.strip_prefix(h).ok()) {
            Some(rest) if !self.root => format!("~/{}", rest.display()),
            _ => path.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_user_gets_the_xdg_defaults_under_home() {
        let l = Layout::from_env(env(&[("HOME", "/home/a")]), 1000).unwrap();
        assert_eq!(l.config, Path::new("/home/a/.config/glove"));
        assert_eq!(l.state, Path::new("/home/a/.local/state/glove"));
        assert_eq!(l.runtime, Path::new("/run/user/1000/glove"));
        assert_eq!(l.show(&l.gloved_config()), "~/.config/glove/gloved.json");
    }

    #[test]
    fn root_gets_fhs_unless_an_xdg_variable_is_set() {
        let l = Layout::from_env(env(&[("HOME", "/root")]), 0).unwrap();
        assert_eq!(l.config, Path::new("/etc/glove"));
        assert_eq!(l.state, Path::new("/var/lib/glove"));
        assert_eq!(l.runtime, Path::new("/run/glove"));
        let l = Layout::from_env(
            env(&[("XDG_CONFIG_HOME", "/t/c"), ("XDG_RUNTIME_DIR", "/t/r")]),
            0,
        )
        .unwrap();
        assert_eq!(l.config, Path::new("/t/c/glove"));
        assert_eq!(l.state, Path::new("/var/lib/glove"));
        assert_eq!(l.runtime, Path::new("/t/r/glove"));
    }

    #[test]
    fn relative_variables_are_ignored_and_no_home_means_no_layout() {
        assert_eq!(
            Layout::from_env(env(&[("XDG_CONFIG_HOME", "rel")]), 1000),
            None
        );
        let l = Layout::from_env(env(&[("HOME", "/h"), ("XDG_STATE_HOME", "x")]), 1000).unwrap();
        assert_eq!(l.state, Path::new("/h/.local/state/glove"));
    }
}
