//! Codes of apply authorizations, the apply trust policy and the owner's
//! signing key (schemas in `glove-types`, files and signatures in
//! `glove-control`, the apply journal in `glove-journal`). The single-use
//! refusals (`apply_grant_reused`, …) belong to the lifecycle.

define_codes! { Apply;
    APPLY_SCHEMA_UNKNOWN = "apply_schema_unknown": "an apply document's schema field names another schema than the one expected",
    APPLY_AUTHORIZATION_INVALID = "apply_authorization_invalid": "an apply authorization's validity window is empty, reversed or longer than allowed",
    APPLY_AUTHORIZATION_EXPIRED = "apply_authorization_expired": "an apply authorization has expired",
    APPLY_AUTHORIZATION_NOT_YET_VALID = "apply_authorization_not_yet_valid": "an apply authorization was issued in the future beyond the allowed skew",
    APPLY_SIGNATURE_INVALID = "apply_signature_invalid": "an apply authorization's signature is malformed or does not verify under the named key",
    APPLY_KEY_UNTRUSTED = "apply_key_untrusted": "an apply authorization names a key the trust policy does not list",
    APPLY_TRUST_POLICY_INVALID = "apply_trust_policy_invalid": "the apply trust policy's keys are unsorted, repeated, too many, none, or not valid Ed25519 public keys",
    APPLY_TRUST_POLICY_UNSAFE = "apply_trust_policy_unsafe": "the apply trust policy is not a root-owned regular file of mode 0644 or stricter in a directory only root can write",
    APPLY_TRUST_POLICY_TOO_LARGE = "apply_trust_policy_too_large": "the apply trust policy exceeds its size bound",
    APPLY_KEY_FILE_UNSAFE = "apply_key_file_unsafe": "the apply signing key file is not a regular file of the caller's with mode 0600 and one link",
    APPLY_KEY_FILE_INVALID = "apply_key_file_invalid": "the apply signing key file does not decode as a signing key",
    APPLY_KEY_FILE_EXISTS = "apply_key_file_exists": "a file already exists where a new signing key was to be written",
    APPLY_FILE_IO = "apply_file_io": "an apply signing key or trust policy file is missing or could not be opened, read or written",
    APPLY_JOURNAL_RECORD_INVALID = "apply_journal_record_invalid": "a stored apply-journal record does not decode, or a transaction's records do not replay",
    APPLY_JOURNAL_NO_ROOM = "apply_journal_no_room": "the apply journal has no room for a new reservation beyond what live transactions may still need",
    APPLY_MISMATCH = "apply_mismatch": "the authorization names another session, target, baseline or manifest than the stage being applied",
    APPLY_BASELINE_STALE = "apply_baseline_stale": "the source changed after the stage was filled from it: applying would lose those changes",
    APPLY_BLOCKED = "apply_blocked": "the stage holds entries apply cannot carry (symbolic links, special files, hard links, sparse files, ACLs or extended attributes, setuid/setgid/sticky bits)",
    APPLY_NO_SPACE = "apply_no_space": "the staged tree plus 64 MiB does not fit in the source file system's free space",
    APPLY_SOURCE_INVALID = "apply_source_invalid": "the stage's source cannot be reached without links, or is no longer the directory the stage was filled from",
    APPLY_STAGE_CHANGED = "apply_stage_changed": "a staged file differs from the frozen manifest while it is copied",
    APPLY_COPY_FAILED = "apply_copy_failed": "the candidate could not be copied beside the source or synced",
    APPLY_EXCHANGE_FAILED = "apply_exchange_failed": "the atomic exchange of the source and the candidate failed",
    APPLY_REMOTE_REFUSED = "apply_remote_refused": "applying a stage is for the owner at this machine; a remote controller cannot apply",
    APPLY_NOT_CONFIGURED = "apply_not_configured": "no apply trust policy is configured",
    APPLY_INTERRUPTED = "apply_interrupted": "the applying process stopped before the exchange; recovery removed the candidate and the source is as it was",
    APPLY_CLEANUP_REFUSED = "apply_cleanup_refused": "the tree under an apply's staging name is not the one the apply left there; it is left alone",
    APPLY_LOCATOR_INVALID = "apply_locator_invalid": "a transaction's locator file is missing, malformed or does not match its reservation",
}
