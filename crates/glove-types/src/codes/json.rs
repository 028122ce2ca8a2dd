//! Codes of the strict and canonical JSON codec.

define_codes! { Json;
    JSON_TOO_LARGE = "json_too_large": "input is larger than the size bound",
    JSON_INVALID_UTF8 = "json_invalid_utf8": "input is not valid UTF-8",
    JSON_SYNTAX = "json_syntax": "input is not well-formed JSON",
    JSON_TRAILING_BYTES = "json_trailing_bytes": "bytes follow the JSON value",
    JSON_DUPLICATE_KEY = "json_duplicate_key": "an object repeats a key",
    JSON_FLOAT = "json_float": "a number has a fraction or exponent, or is too large for an integer",
    JSON_INTEGER_OUT_OF_RANGE = "json_integer_out_of_range": "an integer is outside the interoperable range (|n| <= 2^53-1)",
    JSON_TOO_DEEP = "json_too_deep": "containers are nested deeper than the bound (64)",
    JSON_NONCANONICAL = "json_noncanonical": "input bytes differ from their canonical encoding",
    JSON_UNKNOWN_FIELD = "json_unknown_field": "an object has a field the schema does not define",
    JSON_MISSING_FIELD = "json_missing_field": "an object lacks a required field",
    JSON_NEGATIVE_NUMBER = "json_negative_number": "a negative number where the schema needs an unsigned one",
    JSON_INVALID_TYPE = "json_invalid_type": "a value has the wrong JSON type or an unknown variant",
}
