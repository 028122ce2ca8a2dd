//! Agent output as the terminal neutraliser sees it: never panics, and
//! what it lets through holds no control sequence but SGR colours and no
//! control character but tab, newline, return and backspace.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    glove_types::neutralize::fuzz_neutralize(data);
});
