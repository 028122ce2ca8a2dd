//! Codes of the durable journals (owned by `glove-journal`).

define_codes! { Journal;
    JOURNAL_LOCKED = "journal_locked": "another writer holds the journal's exclusive lock",
}
