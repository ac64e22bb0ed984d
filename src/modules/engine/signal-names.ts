/** A signal's name: a letter or digit, then letters, digits, `.`, `_`, `:` or `-` (200 at most). */
export const SIGNAL_NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

/** A correlation key: 1 to 500 characters, none of them a control character. */
export const CORRELATION_KEY = /^[^\u0000-\u001f\u007f]{1,500}$/;

/** A client-chosen signal id (the generated ones are UUIDs): like a name, 128 at most. */
export const SIGNAL_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** The largest payload a signal carries, as canonical JSON (UTF-8 bytes). */
export const MAX_SIGNAL_PAYLOAD_BYTES = 65_536;
