//! The evaluation fixture decoder and the evaluator never panic: whatever
//! the decoder accepts is exactly the encoding of the fixture it returns
//! and checks against the example plan without panicking; the evaluator,
//! fed the input under the example fixture's expectation, gives the same
//! evaluation whole and cut in two at the input's first byte.
#![no_main]

use glove_types::plan::DecodedPlan;
use glove_types::refinement::{Evaluator, Fixture, Observed, ObservedEnd};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static EXAMPLE: OnceLock<Option<(Fixture, DecodedPlan)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let example = EXAMPLE.get_or_init(|| {
        let f = Fixture::decode(include_bytes!("../../docs/examples/refinement-fixture.json"));
        let p = DecodedPlan::decode(include_bytes!("../../docs/examples/refinement-plan.json"));
        f.ok().zip(p.ok())
    });
    if let Ok(f) = Fixture::decode(data) {
        assert_eq!(f.encode().expect("an accepted fixture encodes"), data);
        assert_eq!(f.canonical_bytes(), data);
        let _ = f.context_digest();
        if let Some((_, plan)) = example {
            let _ = f.check_against(plan);
        }
    }
    if let Some((fixture, _)) = example {
        let observed = Observed {
            termination: ObservedEnd::Exited(0),
            latency_us: 1,
            stream_complete: true,
            resource_stop: None,
        };
        let mut whole = Evaluator::new(fixture.expect());
        whole.feed(data);
        let whole = whole.finish(&observed);
        let cut = usize::from(data.first().copied().unwrap_or(0)) % (data.len() + 1);
        let mut split = Evaluator::new(fixture.expect());
        split.feed(&data[..cut]);
        split.feed(&data[cut..]);
        assert_eq!(split.finish(&observed), whole);
        assert!(whole.outcome.check().is_ok());
    }
});
