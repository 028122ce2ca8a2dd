//! Codes for identifiers and digests.

define_codes! { Ids;
    ID_INVALID = "id_invalid": "an identifier is empty, too long or uses characters outside [a-z0-9._-]",
    DIGEST_INVALID = "digest_invalid": "a digest is not exactly 64 lowercase hexadecimal characters",
}
