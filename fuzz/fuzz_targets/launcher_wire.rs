//! The launcher's frame decoder, in both directions, fed arbitrary bytes in
//! arbitrary chunks: never panics; every decoded frame re-encodes to bytes
//! that decode to the same frame.
#![no_main]

use glove_sandbox::wire::{Decoder, FromLauncher, ToLauncher};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map(|b| usize::from(*b) % 7 + 1).unwrap_or(1);
    let mut to = Decoder::default();
    let mut from = Decoder::default();
    for chunk in data.chunks(split) {
        to.push(chunk);
        from.push(chunk);
        while let Ok(Some(m)) = to.next_to_launcher() {
            let mut again = Decoder::default();
            again.push(&m.encode());
            let back: Option<ToLauncher> = again.next_to_launcher().ok().flatten();
            assert_eq!(back.as_ref(), Some(&m));
        }
        while let Ok(Some(m)) = from.next_from_launcher() {
            let mut again = Decoder::default();
            again.push(&m.encode());
            let back: Option<FromLauncher> = again.next_from_launcher().ok().flatten();
            assert_eq!(back.as_ref(), Some(&m));
        }
    }
});
