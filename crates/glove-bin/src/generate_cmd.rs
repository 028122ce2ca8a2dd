//! `glove policy generate`: one strict runtime template from flags.

use crate::cli::*;
use crate::report::EXIT_OK;
use glove_types::Rejection;
use std::path::Path;

/// Runs `glove policy generate`.
pub fn policy_generate(a: &GenerateArgs) -> i32 {
    use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
    use glove_types::policy::{generate_template, GenerateTarget, NativeRuntime, TemplateRequest};
    let canonical = |p: &Path, what: &str| -> Result<String, Rejection> {
        let bad = |m: String| Rejection::new(CLI_INVALID_ARGUMENT, m).at(what);
        if !p.is_absolute() {
            return Err(bad(format!("{} is not absolute", p.display())));
        }
        let c = std::fs::canonicalize(p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
        c.to_str()
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("{} is not UTF-8", c.display())))
    };
    let result = (|| -> Result<Vec<u8>, Rejection> {
        let target = match &a.executable {
            Some(e) => {
                let c = canonical(e, "executable")?;
                if !Path::new(&c).is_file() {
                    return Err(Rejection::new(
                        CLI_INVALID_ARGUMENT,
                        format!("{c} is not a regular file"),
                    )
                    .at("executable"));
                }
                GenerateTarget::Pinned(c)
            }
            None => {
                let dirs = a
                    .search_path
                    .iter()
                    .map(|d| canonical(d, "search_path"))
                    .collect::<Result<Vec<_>, _>>()?;
                // The executable must be installed in one of them: discovery
                // fails closed at launch otherwise.
                let name = NativeRuntime::parse(&a.runtime)
                    .map(NativeRuntime::executable_name)
                    .unwrap_or("");
                if !name.is_empty() && !dirs.iter().any(|d| Path::new(d).join(name).is_file()) {
                    return Err(Rejection::new(
                        CLI_INVALID_ARGUMENT,
                        format!("no {name} in any of the search paths"),
                    )
                    .at("search_path"));
                }
                GenerateTarget::Discovery(dirs)
            }
        };
        let read_only_paths = a
            .read_only_paths
            .iter()
            .map(|p| canonical(p, "ro"))
            .collect::<Result<Vec<_>, _>>()?;
        generate_template(&TemplateRequest {
            template_id: a.template_id.clone(),
            runtime_id: a.runtime.clone(),
            sandbox_backend: a.sandbox_backend.clone(),
            target,
            arguments: a.arguments.clone(),
            environment: a.environment.clone(),
            read_only_paths,
            allowed_path_aliases: a.aliases.clone(),
            allowed_projection_destinations: a.destinations.clone(),
        })
    })();
    match result {
        Ok(entry) => {
            println!("{}", String::from_utf8_lossy(&entry));
            EXIT_OK
        }
        Err(e) => fail(&e, false, None),
    }
}
