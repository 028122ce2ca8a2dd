// Apply transactions are branded the same way: a proof of transaction A
// cannot be spent on transaction B.
use glove_lifecycle::apply::{ParkedTxn, Reserved};
use glove_lifecycle::TransitionLog;
use glove_types::Sha256Digest;

fn mix<L: TransitionLog>(a: ParkedTxn<Reserved>, b: ParkedTxn<Reserved>, log: &mut L) {
    a.enter(|a| {
        b.enter(|b| {
            if let Ok(proof_for_a) = a.log_prepare(Sha256Digest::of(b"candidate"), log) {
                let _ = b.prepare(proof_for_a);
            }
        })
    })
}

fn main() {}
