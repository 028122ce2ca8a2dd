//! Codes of the control protocol (owned by `gloved`).

define_codes! { Control;
    METHOD_NOT_FOUND = "method_not_found": "the method is not advertised by this service",
}
