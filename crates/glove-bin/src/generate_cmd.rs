//! `glove policy generate`: one strict runtime template from flags; with
//! `--model`, the template pointed at the endpoint together with the
//! egress policy that brokers the key and its credential entries (the
//! preset of `glove run --agent`, for gloved).

use crate::cli::*;
use crate::report::EXIT_OK;
use glove_types::Rejection;
use std::path::Path;

/// The model endpoint flags of `glove policy generate`.
#[derive(Debug, clap::Args)]
pub struct ModelPreset {
    /// Point the template at this model endpoint (`http://HOST:PORT` or
    /// `https://HOST[:PORT]`, as `glove run --agent --model`), and print
    /// one object: the template, the egress policy brokering the key, the
    /// secret handle and its credential source.
    #[arg(long, value_name = "URL", requires = "credential_file")]
    pub model: Option<String>,
    /// The model to ask for [default: the vendor's, else `default`].
    #[arg(long, value_name = "NAME", requires = "model")]
    pub model_name: Option<String>,
    /// The API key's file (yours, mode 0600): the credential source.
    #[arg(long, value_name = "FILE", requires = "model")]
    pub credential_file: Option<std::path::PathBuf>,
    /// The secret handle [default: TEMPLATE_ID-key].
    #[arg(long, value_name = "ID", requires = "model")]
    pub secret_handle: Option<String>,
    /// The egress policy's id [default: TEMPLATE_ID-model].
    #[arg(long, value_name = "ID", requires = "model")]
    pub egress_policy_id: Option<String>,
}

/// The preset's parts: the template's extra arguments and environment,
/// and the egress policy entry, secret handle and credential source.
fn preset(
    a: &GenerateArgs,
    url: &str,
) -> Result<(Vec<String>, Vec<String>, serde_json::Value), Rejection> {
    use crate::agent::model;
    use glove_types::codes::cli::AGENT_UNKNOWN;
    let reject = |e: crate::agent::AgentError| e.rejection();
    let h = glove_types::harness::by_id(&a.runtime).ok_or_else(|| {
        Rejection::new(
            AGENT_UNKNOWN,
            format!("--model needs a registered runtime, not {:?}", a.runtime),
        )
    })?;
    let m = model::resolve(h, Some(url), a.model.model_name.as_deref()).map_err(reject)?;
    let Some(file) = &a.model.credential_file else {
        return Err(Rejection::new(
            glove_types::codes::cli::AGENT_KEY_MISSING,
            "--credential-file is required with --model",
        ));
    };
    let source = model::key_file(file).map_err(reject)?;
    let policy_id = a
        .model
        .egress_policy_id
        .clone()
        .unwrap_or_else(|| format!("{}-model", a.template_id));
    let handle = a
        .model
        .secret_handle
        .clone()
        .unwrap_or_else(|| format!("{}-key", a.template_id));
    let names = model::PolicyNames {
        policy_id: &policy_id,
        handle: &handle,
    };
    let mut file_form =
        model::egress_file(h, &m, &[], false, &model::Resolved::new(), &source, &names);
    model::validate(&file_form).map_err(reject)?;
    // The session policy's form: no schema version, and the credential
    // named by its handle (its source is the credential_sources entry).
    if let Some(o) = file_form.as_object_mut() {
        o.remove("schema_version");
    }
    if let Some(b) = file_form["brokered"].as_array_mut() {
        for c in b {
            if let Some(o) = c.as_object_mut() {
                o.remove("source_path");
            }
        }
    }
    let settings = (h.model.settings)(&glove_types::harness::Endpoint {
        base_url: &m.base_url,
        model: &m.name,
    });
    let at = (h.model.arguments_at)(&a.arguments).min(a.arguments.len());
    let mut args = a.arguments[..at].to_vec();
    args.extend(settings.arguments);
    args.extend_from_slice(&a.arguments[at..]);
    let mut env = a.environment.clone();
    env.extend(settings.environment);
    let rest = serde_json::json!({
        "egress_policy": file_form,
        "secret_handle": handle,
        "credential_source": {"secret_handle": handle, "source_path": source.display().to_string()},
    });
    Ok((args, env, rest))
}

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
        let (arguments, environment, rest) = match &a.model.model {
            Some(url) => {
                let (x, e, r) = preset(a, url)?;
                (x, e, Some(r))
            }
            None => (a.arguments.clone(), a.environment.clone(), None),
        };
        let template = generate_template(&TemplateRequest {
            template_id: a.template_id.clone(),
            runtime_id: a.runtime.clone(),
            sandbox_backend: a.sandbox_backend.clone(),
            target,
            arguments,
            environment,
            read_only_paths,
            allowed_path_aliases: a.aliases.clone(),
            allowed_projection_destinations: a.destinations.clone(),
        })?;
        let Some(mut rest) = rest else {
            return Ok(template);
        };
        let t: serde_json::Value = serde_json::from_slice(&template)
            .map_err(|e| Rejection::new(CLI_INVALID_ARGUMENT, format!("the template: {e}")))?;
        rest["runtime_template"] = t;
        Ok(rest.to_string().into_bytes())
    })();
    match result {
        Ok(entry) => {
            println!("{}", String::from_utf8_lossy(&entry));
            EXIT_OK
        }
        Err(e) => fail(&e, false, None),
    }
}
