// A brand names one session: it is consumed by what it names and is not
// `Clone` or `Copy`, so one scope cannot give two sessions the same brand.
use glove_lifecycle::{with_brand, Created, ParkedSession};

fn two_under_one(a: ParkedSession<Created>, b: ParkedSession<Created>) {
    with_brand(|brand| {
        let _a = a.brand(brand);
        let _b = b.brand(brand);
    });
}

fn main() {}
