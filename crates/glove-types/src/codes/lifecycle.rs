//! Codes of the session and apply lifecycles (owned by `glove-lifecycle`).

define_codes! { Lifecycle;
    LIFECYCLE_ILLEGAL_TRANSITION = "lifecycle_illegal_transition": "a recorded transition is not allowed from the session's stage",
}
