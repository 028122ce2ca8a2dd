// A created session cannot record a running process: `log_run` exists only
// on `Session<Starting>`.
use glove_lifecycle::{Created, ProcessIdentity, Session, TransitionLog};

fn any<T>() -> T {
    unimplemented!()
}

fn skip_ahead<L: TransitionLog>(s: Session<'_, Created>, log: &mut L) {
    let _ = s.log_run(any::<ProcessIdentity>(), log);
}

fn main() {}
