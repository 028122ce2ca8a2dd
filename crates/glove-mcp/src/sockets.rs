//! A mediator served on listening Unix sockets, one per upstream server,
//! from a runtime thread of its own: what `glove run` and gloved's managed
//! sessions put behind the sockets they bind into a sandbox.
//!
//! [`SocketServer::start`] returns once the mediator is ready (every
//! upstream started, initialised, listed and pinned) or failed; every
//! connection accepted on a server's socket is then served scoped to that
//! server ([`Mediator::serve_scoped`]), several at once. Connections made
//! before then wait in the sockets' backlogs. [`SocketServer::finish`]
//! stops accepting, gives open connections [`FINISH_GRACE`] to end, stops
//! the upstreams and the audit writer, and returns the audit's totals.

use crate::handoff::Accepted;
use crate::{McpError, Mediator, MediatorConfig, Profile, Summary};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

/// Where the relay executable (the `glove` binary, run as `glove
/// mcp-relay SERVER`) is inside the sandbox.
pub const RELAY_EXECUTABLE: &str = "/run/glove/bin/glove";

/// Where each server's socket is inside the sandbox
/// (`<dir>/<server>.sock`).
pub const RELAY_SOCKET_DIR: &str = "/run/glove/mcp";

/// Where the harness configurations go (the agent's private home).
pub const AGENT_HOME: &str = glove_types::harness::AGENT_HOME;

/// The relay command's arguments inside the sandbox for `server`.
fn relay_args(server: &str) -> [&str; 2] {
    ["mcp-relay", server]
}

/// The harness configurations (path, text) naming one relay per server:
/// each registered harness's MCP configuration, written by its file in
/// `glove_types::harness`, in registry order. Their directories are
/// [`harness_config_directories`].
pub fn harness_configs(servers: &[&str]) -> Vec<(String, String)> {
    let args: Vec<[&str; 2]> = servers.iter().map(|s| relay_args(s)).collect();
    let named: Vec<glove_types::harness::McpServer<'_>> = servers
        .iter()
        .zip(&args)
        .map(|(id, args)| glove_types::harness::McpServer {
            id,
            command: RELAY_EXECUTABLE,
            args,
        })
        .collect();
    glove_types::harness::mcp_configurations(&named).1
}

/// The directories [`harness_configs`]' files need in the private home
/// (made first, parents first).
pub fn harness_config_directories() -> Vec<&'static str> {
    glove_types::harness::mcp_configurations(&[]).0
}

/// Makes `dir` (and its parents, mode 0700), or checks that it already
/// is a directory of mode 0700 owned by this user and not a link: where
/// the mediator's sockets, journals and pins live. The message names the
/// directory.
pub fn private_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir()
        || m.permissions().mode() & 0o7777 != 0o700
        || m.uid() != rustix::process::geteuid().as_raw()
    {
        return Err(format!(
            "{} must be a directory of mode 0700 owned by this user",
            dir.display()
        ));
    }
    Ok(())
}

/// Most connections served at once, over all sockets: beyond it nothing
/// more is accepted (connections wait in the backlog) until one ends. With
/// the mediator's per-connection bounds (a 4 MiB line, a few queued
/// answers) and its global in-flight bound this caps the memory agents
/// can make the host process hold.
pub const MAX_CONNECTIONS: usize = 16;

/// The pause after a failed `accept` (descriptors or memory short) before
/// the next: the loop never ends on an error while the session runs.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How long connections still open at the end may finish.
pub const FINISH_GRACE: Duration = Duration::from_secs(2);

/// A mediator serving sockets (see the module docs).
#[derive(Debug)]
pub struct SocketServer {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<Result<Summary, McpError>>,
    counts: Arc<Connections>,
}

/// How the connections served so far came: plain streams on the socket,
/// or relays that handed their standard streams over
/// ([`crate::handoff`]); and how many handoffs were refused (closed
/// unread).
#[derive(Debug, Default)]
pub struct Connections {
    streams: std::sync::atomic::AtomicU64,
    handed_over: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
}

impl Connections {
    /// (plain streams, handed over, handoffs refused).
    pub fn get(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.streams.load(SeqCst),
            self.handed_over.load(SeqCst),
            self.refused.load(SeqCst),
        )
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> McpError {
    move |source| McpError::Io { what, source }
}

impl SocketServer {
    /// Starts the mediator of `profile` on its own thread and serves
    /// `listeners` (server id, socket). Blocks until the mediator is ready
    /// or failed.
    pub fn start(
        profile: Profile,
        config: MediatorConfig,
        listeners: Vec<(String, UnixListener)>,
    ) -> Result<SocketServer, McpError> {
        for (_, l) in &listeners {
            l.set_nonblocking(true).map_err(io("socket"))?;
        }
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), McpError>>();
        let counts = Arc::new(Connections::default());
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("glove-mcp".into())
            .spawn({
                let counts = counts.clone();
                move || serve(profile, config, listeners, ready_tx, stop_rx, counts)
            })
            .map_err(io("mediator thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(SocketServer {
                stop,
                thread,
                counts,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => McpError::AuditFailed,
            }),
        }
    }

    /// The connection counts (read them after [`SocketServer::finish`] for
    /// the final figures).
    pub fn connections(&self) -> Arc<Connections> {
        self.counts.clone()
    }

    /// Stops serving (see the module docs); the audit's totals.
    pub fn finish(self) -> Result<Summary, McpError> {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or(Err(McpError::AuditFailed))
    }
}

fn serve(
    profile: Profile,
    config: MediatorConfig,
    listeners: Vec<(String, UnixListener)>,
    ready: std::sync::mpsc::Sender<Result<(), McpError>>,
    stop: tokio::sync::oneshot::Receiver<()>,
    counts: Arc<Connections>,
) -> Result<Summary, McpError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(McpError::Io {
                what: "runtime",
                source: std::io::Error::new(e.kind(), e.to_string()),
            }));
            return Err(McpError::Io {
                what: "runtime",
                source: e,
            });
        }
    };
    rt.block_on(async move {
        let mediator = match Mediator::start(profile, config).await {
            Ok(m) => Arc::new(m),
            Err(e) => {
                // The error goes to the caller; a copy would lose its type.
                let _ = ready.send(Err(e));
                return Err(McpError::AuditFailed);
            }
        };
        let mut accepting = tokio::task::JoinSet::new();
        let (conn_tx, mut conn_rx) = tokio::sync::mpsc::channel::<(
            String,
            tokio::net::UnixStream,
            tokio::sync::OwnedSemaphorePermit,
        )>(MAX_CONNECTIONS);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        for (server, l) in listeners {
            let l = match tokio::net::UnixListener::from_std(l) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready.send(Err(McpError::Io {
                        what: "socket",
                        source: e,
                    }));
                    return Err(McpError::AuditFailed);
                }
            };
            let tx = conn_tx.clone();
            let slots = slots.clone();
            accepting.spawn(async move {
                loop {
                    // A slot first: at the bound nothing is accepted.
                    let Ok(slot) = slots.clone().acquire_owned().await else {
                        break;
                    };
                    match l.accept().await {
                        Ok((s, _)) => {
                            if tx.send((server.clone(), s, slot)).await.is_err() {
                                break;
                            }
                        }
                        Err(_) => {
                            drop(slot);
                            tokio::time::sleep(ACCEPT_RETRY).await;
                        }
                    }
                }
            });
        }
        drop(conn_tx);
        let _ = ready.send(Ok(()));
        let mut tasks = tokio::task::JoinSet::new();
        let mut stop = stop;
        loop {
            tokio::select! {
                _ = &mut stop => break,
                c = conn_rx.recv() => match c {
                    Some((server, s, slot)) => {
                        let m = mediator.clone();
                        let counts = counts.clone();
                        tasks.spawn(async move {
                            use std::sync::atomic::Ordering::SeqCst;
                            match crate::handoff::accept(s).await {
                                Some(Accepted::Stream(s)) => {
                                    counts.streams.fetch_add(1, SeqCst);
                                    let _ = m.serve_scoped(s, &server).await;
                                }
                                Some(Accepted::Handed(h)) => {
                                    counts.handed_over.fetch_add(1, SeqCst);
                                    let _ = m.serve_scoped(h, &server).await;
                                }
                                Some(Accepted::Refused) => {
                                    counts.refused.fetch_add(1, SeqCst);
                                }
                                None => {}
                            }
                            drop(slot);
                        });
                    }
                    None => break,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        accepting.abort_all();
        let _ = tokio::time::timeout(FINISH_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        match Arc::try_unwrap(mediator) {
            Ok(m) => Ok(m.finish().await),
            Err(_) => Err(McpError::AuditFailed),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::harness_configs;

    /// The configurations as they were written before the harness files
    /// (issue 27): the paths, their order and every byte.
    #[test]
    fn the_harness_configurations_are_byte_identical_to_before() {
        let got = harness_configs(&["everything", "fs-1"]);
        // Issue 30: claude-code with its `CLAUDE_CONFIG_DIR` reads the
        // third (the first two alone left a managed claude without tools).
        let want: [(&str, &str); 4] = [
            ("/home/agent/.codex/config.toml", CODEX),
            ("/home/agent/.mcp.json", CLAUDE),
            ("/home/agent/.claude.json", CLAUDE),
            ("/home/agent/.claude/.claude.json", CLAUDE),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        assert_eq!(got, want);
        let none = harness_configs(&[]);
        let none: Vec<(&str, &str)> = none.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        assert_eq!(
            none,
            [
                ("/home/agent/.codex/config.toml", CODEX_HEADER),
                ("/home/agent/.mcp.json", "{\n  \"mcpServers\": {}\n}\n"),
                ("/home/agent/.claude.json", "{\n  \"mcpServers\": {}\n}\n"),
                (
                    "/home/agent/.claude/.claude.json",
                    "{\n  \"mcpServers\": {}\n}\n"
                ),
            ]
        );
    }

    const CODEX_HEADER: &str =
        "# Written by glove run: each MCP server is Glove's mediator, reached through a relay.\n";

    const CODEX: &str = r#"# Written by glove run: each MCP server is Glove's mediator, reached through a relay.

[mcp_servers."everything"]
command = "/run/glove/bin/glove"
args = ["mcp-relay", "everything"]
startup_timeout_sec = 60

[mcp_servers."fs-1"]
command = "/run/glove/bin/glove"
args = ["mcp-relay", "fs-1"]
startup_timeout_sec = 60
"#;

    const CLAUDE: &str = r#"{
  "mcpServers": {
    "everything": {
      "args": [
        "mcp-relay",
        "everything"
      ],
      "command": "/run/glove/bin/glove",
      "env": {},
      "type": "stdio"
    },
    "fs-1": {
      "args": [
        "mcp-relay",
        "fs-1"
      ],
      "command": "/run/glove/bin/glove",
      "env": {},
      "type": "stdio"
    }
  }
}
"#;
}
