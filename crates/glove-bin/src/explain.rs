//! Text rendering of `glove policy explain`.

use glove_types::policy::{Explanation, LaunchTarget};
use std::fmt::Write as _;

fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if n >= size && n % size == 0 {
            return format!("{} {name}", n / size);
        }
    }
    format!("{n} B")
}

fn ms(n: u64) -> String {
    if n >= 1000 && n % 1000 == 0 {
        format!("{} s", n / 1000)
    } else {
        format!("{n} ms")
    }
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        "(none)".to_owned()
    } else {
        items
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Renders an explanation as indented text.
pub fn render(x: &Explanation) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "policy revision {}; plans live at most {}",
        x.revision,
        ms(x.max_plan_ttl_ms)
    );
    for t in &x.runtime_templates {
        let tpl = &t.template;
        let l = tpl.launch();
        let _ = writeln!(o, "\nruntime template {}", tpl.id());
        let _ = writeln!(o, "  runtime          {}", tpl.runtime_id());
        let _ = writeln!(o, "  backend          {}", tpl.sandbox_backend().as_str());
        match l.target() {
            LaunchTarget::Pinned { executable_path } => {
                let _ = writeln!(o, "  executable       {executable_path} (pinned)");
            }
            LaunchTarget::Discovery {
                runtime,
                executable_search_paths,
            } => {
                let _ = writeln!(
                    o,
                    "  executable       discover `{}` for {} in, in order:",
                    runtime.executable_name(),
                    runtime.runtime_id()
                );
                for p in executable_search_paths {
                    let _ = writeln!(o, "                     {p}");
                }
            }
        }
        let _ = writeln!(o, "  arguments        {:?}", l.arguments());
        if l.environment().is_empty() {
            let _ = writeln!(o, "  environment      (empty)");
        }
        for (i, e) in l.environment().iter().enumerate() {
            let head = if i == 0 {
                "  environment      "
            } else {
                "                   "
            };
            let _ = writeln!(o, "{head}{e}");
        }
        let _ = writeln!(o, "  read-only paths  {}", list(l.read_only_paths()));
        if tpl.allowed_path_aliases().is_empty() {
            let _ = writeln!(o, "  path aliases     (none)");
        } else {
            let _ = writeln!(o, "  path aliases");
        }
        for a in tpl.allowed_path_aliases() {
            let Some(alias) = x.path_aliases.iter().find(|p| p.id() == a) else {
                continue;
            };
            let _ = writeln!(
                o,
                "    {}: {} -> {}, grants live at most {} s",
                alias.id(),
                alias.host_path(),
                alias.target_path(),
                alias.max_ttl_secs()
            );
            for t in alias.access() {
                let quota = if t.max_bytes == 0 {
                    String::new()
                } else {
                    format!(", quota {}", bytes(t.max_bytes))
                };
                let _ = writeln!(
                    o,
                    "      {} by {}, create {}, cleanup {}{quota}",
                    t.access.as_str(),
                    t.materialization.as_str(),
                    t.create_policy.as_str(),
                    t.cleanup_policy.as_str()
                );
            }
        }
        if tpl.allowed_projection_destinations().is_empty() {
            let _ = writeln!(o, "  projections      (none)");
        } else {
            let _ = writeln!(o, "  projections");
        }
        for d in tpl.allowed_projection_destinations() {
            if let Some(dest) = x
                .library_projection_destinations
                .iter()
                .find(|p| p.id() == d)
            {
                let _ = writeln!(
                    o,
                    "    {}: read-only bundles under {}",
                    dest.id(),
                    dest.target_path()
                );
            }
        }
        if t.digest_matches {
            let _ = writeln!(
                o,
                "  adapter digest   {} (matches)",
                t.computed_adapter_command_digest
            );
        } else {
            let _ = writeln!(o, "  adapter digest   MISMATCH");
            let _ = writeln!(o, "    claimed        {}", tpl.adapter_command_digest());
            let _ = writeln!(
                o,
                "    computed       {}",
                t.computed_adapter_command_digest
            );
        }
    }
    let _ = writeln!(o, "\nresource profiles");
    for p in &x.resource_profiles {
        let l = p.limits();
        let _ = writeln!(
            o,
            "  {}: cpu {}, memory {}, pids {}, wall {}, disk {}, terminal output {}{}",
            p.id(),
            ms(l.cpu_time_ms),
            bytes(l.memory_bytes),
            l.pids,
            ms(l.wall_time_ms),
            bytes(l.disk_bytes),
            bytes(l.terminal_output_bytes),
            p.cpu_rate_millicpus()
                .map(|r| format!(", cpu rate {}.{:03} CPUs", r / 1000, r % 1000))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(o, "\negress");
    for id in &x.egress_policy_ids {
        match x.egress_policies.iter().find(|e| e.id() == id) {
            Some(e) => {
                let private = if e.allow_private() {
                    ", private addresses allowed"
                } else {
                    ""
                };
                let _ = writeln!(o, "  {id}: {}{private}", list(e.endpoints()));
            }
            None => {
                let _ = writeln!(o, "  {id}: offline (no endpoints)");
            }
        }
    }
    if x.egress_policy_ids.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    let _ = writeln!(o, "tool policies      {}", list(&x.tool_policy_ids));
    let _ = writeln!(o, "secret handles");
    for h in &x.secret_handles {
        match x.credential_sources.iter().find(|c| c.handle() == h) {
            Some(c) => {
                let _ = writeln!(o, "  {h}: from {}", c.source_path());
            }
            None => {
                let _ = writeln!(o, "  {h}: no credential source configured");
            }
        }
    }
    if x.secret_handles.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    match &x.remote_backend {
        Some(r) => {
            let _ = writeln!(
                o,
                "remote backend     {}@{}:{} image {} (construction-only: no lifecycle)",
                r.user(),
                r.host(),
                r.port(),
                r.container_image()
            );
        }
        None => {
            let _ = writeln!(o, "remote backend     none");
        }
    }
    if !x.valid {
        let _ = writeln!(
            o,
            "\nerror[policy_adapter_digest_mismatch]: a template's adapter_command_digest does not match its launch fields"
        );
    }
    o
}
