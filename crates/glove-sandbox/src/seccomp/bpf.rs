//! The BPF generator: the program [`build_for`] emits (an argument
//! check per conditioned call, then a bitmap lookup), and the small
//! interpreter the tests run it in.

use super::{
    rules_for, Check, Cond, Network, ARCH_X86_64, RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, X32_BIT,
};
use seccompiler::{sock_filter, BpfProgram};

// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20;
const LD_IMM: u16 = 0x00;
const ALU_SUB_K: u16 = 0x14;
const ALU_AND_K: u16 = 0x54;
const ALU_LSH_X: u16 = 0x6c;
const MISC_TAX: u16 = 0x07;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_low(i: u32) -> u32 {
    16 + 8 * i
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Emits one alternative of [`Check::AnyOf`]: allows when every condition
/// holds, otherwise falls through to what follows it.
fn emit_alternative(out: &mut BpfProgram, conds: &[Cond]) -> Result<(), String> {
    let len: usize = conds
        .iter()
        .map(|c| 1 + usize::from(c.mask != u32::MAX) + c.values.len())
        .sum::<usize>()
        + 1;
    let start = out.len();
    let end = start + len;
    let offset = |at: usize, to: usize| {
        let n = to - (at + 1);
        u8::try_from(n).map_err(|_| format!("seccomp program: a jump of {n} does not fit"))
    };
    for c in conds {
        out.push(stmt(LD_W_ABS, off_arg_low(c.arg)));
        if c.mask != u32::MAX {
            out.push(stmt(ALU_AND_K, c.mask));
        }
        let next = out.len() + c.values.len();
        for (i, v) in c.values.iter().enumerate() {
            let at = out.len();
            // A match goes on to the next condition; the last value's
            // mismatch leaves the alternative.
            let miss = if i + 1 == c.values.len() {
                offset(at, end)?
            } else {
                0
            };
            out.push(jump(JMP_JEQ_K, *v, offset(at, next)?, miss));
        }
    }
    out.push(stmt(RET_K, RET_ALLOW));
    debug_assert_eq!(out.len(), end);
    Ok(())
}

/// Emits the code that checks one allowed call's arguments (the number is
/// already known); ends in a return either way.
fn emit_check(out: &mut BpfProgram, check: Check) -> Result<(), String> {
    let deny = RET_ERRNO | libc::EPERM as u32;
    match check {
        Check::Always => out.push(stmt(RET_K, RET_ALLOW)),
        Check::ArgEq { arg, value } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            out.push(jump(JMP_JEQ_K, value, 0, 1));
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgMaskClear { arg, mask } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            out.push(jump(JMP_JSET_K, mask, 1, 0));
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgNotIn { arg, values } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            let n = values.len();
            for (i, v) in values.iter().enumerate() {
                // On a match jump to the deny at the end.
                out.push(jump(JMP_JEQ_K, *v, (n - i) as u8, 0));
            }
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgIn { arg, values } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            let n = values.len();
            for (i, v) in values.iter().enumerate() {
                out.push(jump(JMP_JEQ_K, *v, (n - i) as u8, 0));
            }
            out.push(stmt(RET_K, deny));
            out.push(stmt(RET_K, RET_ALLOW));
        }
        Check::AnyOf { alternatives } => {
            for conds in alternatives {
                emit_alternative(out, conds)?;
            }
            out.push(stmt(RET_K, deny));
        }
        Check::Refuse { errno } => out.push(stmt(RET_K, RET_ERRNO | errno)),
    }
    Ok(())
}

/// Emits the decision for the number in the accumulator: calls with a
/// check of their own first, then the bitmap of the unconditional ones.
fn emit_bitmap(out: &mut BpfProgram, rules: &[(u32, Check)]) -> Result<(), String> {
    let deny = RET_ERRNO | libc::EPERM as u32;
    let too_far = |n: usize| format!("seccomp program: a jump of {n} instructions does not fit");
    for (nr, check) in rules.iter().filter(|(_, c)| *c != Check::Always) {
        let mut block = Vec::new();
        emit_check(&mut block, *check)?;
        let skip = u8::try_from(block.len()).map_err(|_| too_far(block.len()))?;
        out.push(jump(JMP_JEQ_K, *nr, 0, skip));
        out.extend(block);
    }
    let words = rules
        .iter()
        .filter(|(_, c)| *c == Check::Always)
        .map(|(nr, _)| *nr / 32 + 1)
        .max()
        .unwrap_or(0);
    let mut masks = vec![0u32; words as usize];
    for (nr, _) in rules.iter().filter(|(_, c)| *c == Check::Always) {
        masks[(*nr / 32) as usize] |= 1 << (nr % 32);
    }
    // Each word: if nr >= its end, go on to the next word; otherwise shift
    // a one by (nr - start) and test it against the word. The two shared
    // returns follow the last word (deny, then allow). Jump offsets are
    // 8 bits: ~15 words of 6 instructions stay far below that (checked).
    const WORD_LEN: usize = 6;
    let base = out.len();
    let deny_at = base + masks.len() * WORD_LEN;
    let offset = |from: usize, to: usize| {
        let n = to - (from + 1);
        u8::try_from(n).map_err(|_| too_far(n))
    };
    for (w, mask) in masks.iter().enumerate() {
        let start = w as u32 * 32;
        out.push(jump(JMP_JGE_K, start + 32, (WORD_LEN - 1) as u8, 0));
        out.push(stmt(ALU_SUB_K, start));
        out.push(stmt(MISC_TAX, 0));
        out.push(stmt(LD_IMM, 1));
        out.push(stmt(ALU_LSH_X, 0));
        let at = out.len();
        out.push(jump(
            JMP_JSET_K,
            *mask,
            offset(at, deny_at + 1)?,
            offset(at, deny_at)?,
        ));
    }
    out.push(stmt(RET_K, deny));
    out.push(stmt(RET_K, RET_ALLOW));
    Ok(())
}

/// Builds the offline filter.
pub fn build() -> Result<BpfProgram, String> {
    build_for(Network::Offline)
}

/// Builds the filter; fails only if a jump would not fit in the 8-bit
/// offsets of classic BPF (the list would have to grow many times over).
pub fn build_for(network: Network) -> Result<BpfProgram, String> {
    let mut allow: BpfProgram = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JMP_JEQ_K, ARCH_X86_64, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
        jump(JMP_JSET_K, X32_BIT, 0, 1),
        stmt(RET_K, RET_ERRNO | libc::EPERM as u32),
    ];
    emit_bitmap(&mut allow, &rules_for(network))?;
    Ok(allow)
}

/// Runs a classic BPF program of the shapes [`build`] emits on one
/// `seccomp_data`; `None` on a malformed program.
pub fn interpret(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Option<u32> {
    interpret_counting(prog, arch, nr, args).map(|(r, _)| r)
}

/// Like [`interpret`], also returning how many instructions ran.
pub fn interpret_counting(
    prog: &[sock_filter],
    arch: u32,
    nr: u32,
    args: [u64; 6],
) -> Option<(u32, usize)> {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&nr.to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let mut acc: u32 = 0;
    let mut x: u32 = 0;
    let mut pc = 0usize;
    for steps in 1..4096 {
        let ins = prog.get(pc)?;
        match ins.code {
            LD_W_ABS => {
                let o = ins.k as usize;
                let b = data.get(o..o + 4)?;
                acc = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                pc += 1;
            }
            LD_IMM => {
                acc = ins.k;
                pc += 1;
            }
            ALU_SUB_K => {
                acc = acc.wrapping_sub(ins.k);
                pc += 1;
            }
            ALU_AND_K => {
                acc &= ins.k;
                pc += 1;
            }
            MISC_TAX => {
                x = acc;
                pc += 1;
            }
            ALU_LSH_X => {
                acc = acc.checked_shl(x).unwrap_or(0);
                pc += 1;
            }
            JMP_JA => pc += 1 + ins.k as usize,
            JMP_JEQ_K | JMP_JGE_K | JMP_JSET_K => {
                let t = match ins.code {
                    JMP_JEQ_K => acc == ins.k,
                    JMP_JGE_K => acc >= ins.k,
                    _ => acc & ins.k != 0,
                };
                pc += 1 + usize::from(if t { ins.jt } else { ins.jf });
            }
            RET_K => return Some((ins.k, steps)),
            _ => return None,
        }
    }
    None
}
