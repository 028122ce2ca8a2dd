//! Codes of the Linux sandbox (owned by `glove-sandbox`).

define_codes! { Sandbox;
    SANDBOX_UNAVAILABLE = "sandbox_unavailable": "a required kernel feature is not available",
}
