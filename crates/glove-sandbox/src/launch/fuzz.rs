//! Hooks for the fuzz targets (`fuzz/fuzz_targets/proc_stat_args.rs` and
//! `release_command.rs`): the launch's decoders, reachable from outside.

use super::status::ExecCmd;
use crate::spec::AgentCommand;
use crate::sys::process;
use std::ffi::CString;

/// For the fuzz target: bytes read as `/proc/self/stat` when the init
/// looks for its argument area; never panics.
#[doc(hidden)]
pub fn fuzz_proc_stat(bytes: &[u8]) {
    let _ = process::arg_area(bytes);
}

/// For the fuzz target: decodes a release command as the agent does and,
/// when it decodes, checks that encoding the result gives the same bytes.
/// Never panics on any input (the round trip holding is asserted).
#[doc(hidden)]
pub fn fuzz_release_command(bytes: &[u8]) {
    let Some(c) = ExecCmd::decode(bytes) else {
        return;
    };
    let s = |c: &CString| c.to_string_lossy().into_owned();
    let cmd = AgentCommand {
        executable: s(&c.exe),
        arguments: c.argv.iter().skip(1).map(s).collect(),
        environment: c.envp.iter().map(s).collect(),
    };
    // Valid UTF-8 strings re-encode to exactly the input.
    let utf8 = std::iter::once(&c.exe)
        .chain(&c.argv)
        .chain(&c.envp)
        .all(|x| x.to_str().is_ok());
    if utf8 {
        assert_eq!(ExecCmd::encode(&cmd), bytes);
    }
}
