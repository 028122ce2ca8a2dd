//! The launch specification's rules: what [`LaunchSpec::validate`] and
//! [`AgentCommand::validate`] check.

use super::*;

fn bad(detail: impl Into<String>) -> SandboxError {
    SandboxError::Spec {
        detail: detail.into(),
    }
}

fn path(p: &str, what: &str) -> Result<(), SandboxError> {
    check_canonical(p).map_err(|e| bad(format!("{what}: {}", e.message())))
}

const RESERVED_TARGETS: &[&str] = &["/proc", "/dev", "/oldroot"];

/// The executable, arguments and environment rules shared by a spec and an
/// [`AgentCommand`].
pub(super) fn check_command(
    executable: &str,
    arguments: &[String],
    environment: &[String],
) -> Result<(), SandboxError> {
    path(executable, "executable")?;
    if arguments.len() + environment.len() > MAX_ARGS {
        return Err(bad(format!(
            "at most {MAX_ARGS} arguments and environment entries"
        )));
    }
    for a in arguments.iter().chain(environment.iter()) {
        if a.contains('\0') || a.len() > MAX_ARG_BYTES {
            return Err(bad(
                "arguments and environment entries must be NUL-free and at most 128 KiB",
            ));
        }
    }
    if arguments
        .iter()
        .chain(environment.iter())
        .map(String::len)
        .sum::<usize>()
        > MAX_COMMAND_BYTES
    {
        return Err(bad(format!(
            "arguments and environment together are at most {} MiB",
            MAX_COMMAND_BYTES >> 20
        )));
    }
    for e in environment {
        let name = e.split_once('=').map(|(n, _)| n).unwrap_or("");
        let ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(bad(format!("environment entry {e:?} is not NAME=value")));
        }
    }
    Ok(())
}

impl LaunchSpec {
    /// Seeded directories, files and writable files: canonical, inside a
    /// writable directory (never one itself), each once, bounded.
    fn check_seeds(&self) -> Result<(), SandboxError> {
        if self.seed_dirs.len() + self.seed_files.len() > MAX_SEED_ENTRIES {
            return Err(bad(format!(
                "at most {MAX_SEED_ENTRIES} seeded directories and files"
            )));
        }
        let bytes: usize = self.seed_files.iter().map(|f| f.text.len()).sum();
        if bytes > MAX_SEED_BYTES {
            return Err(bad(format!(
                "seeded files are at most {} MiB together",
                MAX_SEED_BYTES >> 20
            )));
        }
        let inside = |p: &str, what: &str| -> Result<(), SandboxError> {
            path(p, what)?;
            if self.writable_dirs.iter().any(|w| w != p && is_within(p, w)) {
                Ok(())
            } else {
                Err(bad(format!("{what} {p} is not below a writable directory")))
            }
        };
        let mut all: Vec<&str> = Vec::new();
        for d in &self.seed_dirs {
            inside(d, "seeded directory")?;
            all.push(d);
        }
        for f in &self.seed_files {
            inside(&f.path, "seeded file")?;
            all.push(&f.path);
        }
        for w in &self.leases {
            path(&w.source, "lease source")?;
            path(&w.returned, "lease return")?;
            inside(&w.target, "lease target")?;
            all.push(&w.target);
        }
        all.sort_unstable();
        if let Some(d) = all.windows(2).find(|p| p[0] == p[1]) {
            return Err(bad(format!("{} is seeded twice", d[0])));
        }
        Ok(())
    }

    /// Checks every rule; a launch validates its spec first.
    pub fn validate(&self) -> Result<(), SandboxError> {
        check_command(&self.executable, &self.arguments, &self.environment)?;
        path(&self.working_directory, "working directory")?;
        let counts = [
            self.grants.len(),
            self.bundles.len(),
            self.protected_paths.len(),
            self.read_only_binds.len(),
            self.sockets.len(),
            self.symlinks.len(),
            self.files.len(),
            self.host_files.len(),
            self.writable_dirs.len(),
            self.copy_in.len(),
            self.leases.len(),
        ];
        if counts.iter().any(|c| *c > MAX_MOUNT_ENTRIES) {
            return Err(bad(format!(
                "at most {MAX_MOUNT_ENTRIES} entries of each kind"
            )));
        }
        let mut targets: Vec<&str> = Vec::new();
        for b in &self.read_only_binds {
            path(&b.source, "bind source")?;
            path(&b.target, "bind target")?;
            targets.push(&b.target);
        }
        for b in &self.sockets {
            path(&b.source, "socket source")?;
            path(&b.target, "socket target")?;
            targets.push(&b.target);
        }
        for (link, _) in &self.symlinks {
            path(link, "symlink")?;
            targets.push(link);
        }
        for (p, body) in &self.files {
            path(p, "file")?;
            if body.len() > 1 << 20 {
                return Err(bad("generated files are at most 1 MiB"));
            }
            targets.push(p);
        }
        for f in &self.host_files {
            path(&f.source, "host file source")?;
            path(&f.target, "host file target")?;
            if is_within(&f.source, "/proc") {
                return Err(bad(format!("host file {} is under /proc", f.source)));
            }
            targets.push(&f.target);
        }
        for w in &self.writable_dirs {
            path(w, "writable directory")?;
            targets.push(w);
        }
        for g in &self.grants {
            path(&g.host_path, "grant host path")?;
            path(&g.target, "grant target")?;
            if let GrantMode::EphemeralCopy { max_bytes } = g.mode {
                if max_bytes < MIN_DISK_BYTES {
                    return Err(bad(format!(
                        "a copy grant needs at least {MIN_DISK_BYTES} bytes"
                    )));
                }
            }
            targets.push(&g.target);
        }
        if self.retained.len() > super::MAX_RETAINED {
            return Err(bad(format!(
                "more than {} retained workspaces",
                super::MAX_RETAINED
            )));
        }
        for r in &self.retained {
            path(&r.target, "retained workspace target")?;
            targets.push(&r.target);
        }
        if self.exposures.len() > super::MAX_EXPOSURES {
            return Err(bad(format!("more than {} exposures", super::MAX_EXPOSURES)));
        }
        for x in &self.exposures {
            path(&x.target, "exposure target")?;
            if x.max_bytes == 0 {
                return Err(bad(format!("exposure {} has no bytes", x.target)));
            }
            targets.push(&x.target);
        }
        for b in &self.bundles {
            path(&b.root, "bundle root")?;
            path(&b.target, "bundle target")?;
            if glove_types::Sha256Digest::parse(&b.sha256).is_err() {
                return Err(bad("a bundle digest must be 64 lowercase hex characters"));
            }
            targets.push(&b.target);
        }
        for p in &self.protected_paths {
            path(p, "protected path")?;
        }
        self.check_seeds()?;
        if self.leases.len() > 16 {
            return Err(bad("at most 16 credential leases"));
        }
        if let Some(r) = self.cpu_rate_millicpus {
            if !(MIN_CPU_RATE_MILLICPUS..=MAX_CPU_RATE_MILLICPUS).contains(&r) {
                return Err(bad(format!(
                    "a CPU rate is {MIN_CPU_RATE_MILLICPUS}..={MAX_CPU_RATE_MILLICPUS} thousandths of a CPU"
                )));
            }
        }
        if let Some(pin) = &self.executable_pin {
            if pin.is_empty()
                || pin.len() > 128
                || !pin
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b':' || b == b'-')
            {
                return Err(bad("an executable pin is dev:ino:ctime_ns"));
            }
            if let Some(w) = self
                .writable_dirs
                .iter()
                .find(|w| is_within(&self.executable, w))
            {
                return Err(SandboxError::BindShadowed {
                    target: self.executable.clone(),
                    by: w.clone(),
                });
            }
            if RESERVED_TARGETS
                .iter()
                .any(|r| is_within(&self.executable, r))
            {
                return Err(bad("the pinned executable lies under a reserved path"));
            }
            // A grant or bundle mounted at or above the pinned path would
            // lay another file over it.
            if let Some(t) = self
                .grants
                .iter()
                .map(|g| &g.target)
                .chain(self.bundles.iter().map(|b| &b.target))
                .find(|t| is_within(&self.executable, t))
            {
                return Err(bad(format!(
                    "the pinned executable {} lies at or below the mount {t}",
                    self.executable
                )));
            }
        }
        if let Some(d) = &self.network_pool {
            match d.to_str() {
                Some(p) => path(p, "network namespace pool")?,
                None => return Err(bad("the network namespace pool path is not UTF-8")),
            }
        }
        // A read-only bind at or below a writable directory would be laid
        // over by that directory's scratch slice and silently hidden.
        // (Grants and bundles too: they are made before the writable
        // directories are laid over the root.)
        let shadowable = self
            .read_only_binds
            .iter()
            .map(|b| &b.target)
            .chain(self.grants.iter().map(|g| &g.target))
            .chain(self.retained.iter().map(|r| &r.target))
            .chain(self.exposures.iter().map(|x| &x.target))
            .chain(self.bundles.iter().map(|b| &b.target));
        for t in shadowable {
            if let Some(w) = self.writable_dirs.iter().find(|w| is_within(t, w)) {
                return Err(SandboxError::BindShadowed {
                    target: t.clone(),
                    by: w.clone(),
                });
            }
        }
        for t in &targets {
            if let Some(r) = RESERVED_TARGETS
                .iter()
                .find(|r| is_within(t, r) || is_within(r, t))
            {
                return Err(bad(format!("{t} overlaps the reserved {r}")));
            }
        }
        for (i, a) in targets.iter().enumerate() {
            if targets.iter().skip(i + 1).any(|b| a == b) {
                return Err(bad(format!("{a} is mounted twice")));
            }
        }
        // Links and files are made in the root file system, some after the
        // writable directories, copies and grants exist: never below a
        // mount, where a copied link could lead the init elsewhere.
        let mounts: Vec<&str> = self
            .read_only_binds
            .iter()
            .map(|b| b.target.as_str())
            .chain(self.writable_dirs.iter().map(String::as_str))
            .chain(self.grants.iter().map(|g| g.target.as_str()))
            .chain(self.retained.iter().map(|r| r.target.as_str()))
            .chain(self.exposures.iter().map(|x| x.target.as_str()))
            .chain(self.bundles.iter().map(|b| b.target.as_str()))
            .collect();
        let made = self
            .symlinks
            .iter()
            .map(|(l, _)| l.as_str())
            .chain(self.files.iter().map(|(p, _)| p.as_str()))
            .chain(self.host_files.iter().map(|f| f.target.as_str()))
            .chain(self.sockets.iter().map(|b| b.target.as_str()));
        for t in made {
            if let Some(m) = mounts.iter().find(|m| is_within(t, m) && t != **m) {
                return Err(bad(format!(
                    "{t} lies below the mount {m}: links and files belong to the root"
                )));
            }
        }
        for c in &self.copy_in {
            path(&c.source, "copy source")?;
            path(&c.target, "copy target")?;
            // The host's /proc is where the init mounts the scratch file
            // system while it builds the view (and a copy of procfs is
            // meaningless anyway).
            if is_within(&c.source, "/proc") {
                return Err(bad(format!("copy source {} is under /proc", c.source)));
            }
            if !self.writable_dirs.iter().any(|w| is_within(&c.target, w)) {
                return Err(bad(format!(
                    "copy target {} is not inside a writable directory",
                    c.target
                )));
            }
        }
        if !self.writable_dirs.is_empty() && self.limits.disk_bytes < MIN_DISK_BYTES {
            return Err(bad(format!(
                "disk limit must be at least {MIN_DISK_BYTES} bytes"
            )));
        }
        if self.hostname.is_empty()
            || self.hostname.len() > 64
            || !self
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(bad("hostname must be 1-64 characters of [A-Za-z0-9-]"));
        }
        let l = &self.limits;
        if [
            l.cpu_time_ms,
            l.memory_bytes,
            l.pids,
            l.wall_time_ms,
            l.disk_bytes,
            l.terminal_output_bytes,
        ]
        .contains(&0)
        {
            return Err(bad("every limit must be positive"));
        }
        if let Some(e) = &self.egress {
            if e.ports.is_empty() || e.ports.len() > MAX_EGRESS_PORTS {
                return Err(bad(format!(
                    "egress mode listens on 1 to {MAX_EGRESS_PORTS} ports"
                )));
            }
            for (i, p) in e.ports.iter().enumerate() {
                if *p < 1024 || e.ports[..i].contains(p) {
                    return Err(bad("egress ports are 1024 or above, each once"));
                }
            }
        }
        let mut seen = Vec::new();
        for (_, n) in &self.extra_fds {
            if *n < 3 || *n > 255 || seen.contains(n) {
                return Err(bad("extra descriptors are numbered 3..=255, each once"));
            }
            seen.push(*n);
        }
        Ok(())
    }
}
