//! glove-types integration tests: the error catalogue, every policy rule,
//! plan admission, library bundles, the documented digest vectors, the
//! harness files, and `refinement-eval-v1` (templates, bindings, fixtures,
//! digests and the `refinement_v1` receipt).

mod bundle;
mod codes;
mod digests;
mod harness;
mod plan;
mod policy;
mod receipt;
mod refinement;
mod refinement_digests;
mod refinement_receipt;

use std::path::PathBuf;

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn example(name: &str) -> Vec<u8> {
    std::fs::read(repo_root().join("docs/examples").join(name)).expect("example file")
}

pub(crate) fn snapshot_dir() -> String {
    repo_root().join("snapshots").display().to_string()
}

/// Runs insta assertions with the workspace's `snapshots/` directory.
#[macro_export]
macro_rules! snap {
    ($($t:tt)*) => {
        insta::with_settings!({
            snapshot_path => $crate::snapshot_dir(),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, { $($t)* });
    };
}
