// Twin of `binding_from_digest.rs`: the binding of a canonical launch
// document, digested by the lifecycle.
use glove_lifecycle::LaunchBinding;

fn main() {
    let _ = LaunchBinding::of_launch_spec(br#"{"argv":["/bin/true"]}"#);
}
