"""Stable dead-letter reason codes, a public contract (dashboards and `dlq inspect` key on them): add, never rename."""

OVERSIZE = "oversize"                # raw message larger than max_message_bytes
NOT_UTF8 = "not_utf8"                # bytes are not valid UTF-8, or a \u escape is half a surrogate pair
MALFORMED_JSON = "malformed_json"    # not parseable as JSON
NOT_OBJECT = "not_object"            # JSON, but not an object
UNKNOWN_VERSION = "unknown_version"  # schema_version missing or not supported
BAD_KIND = "bad_kind"                # kind is not an event kind of this version
MISSING_FIELD = "missing_field"      # a required field is absent or null
UNKNOWN_FIELD = "unknown_field"      # a field the contract does not define (keeps text out)
WRONG_TYPE = "wrong_type"            # e.g. a string where a number belongs, a bool as a count
BAD_VALUE = "bad_value"              # empty/overlong label, unknown status
NOT_FINITE = "not_finite"            # NaN or +/-Infinity
NEGATIVE = "negative"                # a negative count or duration
ABSURD = "absurd"                    # > 10M tokens, a duration over a day, t0 outside 2000..now+1d
IMPOSSIBLE_ORDER = "impossible_order"  # t_first < t0, t_end < t_first, t_scheduled > t_first
INCONSISTENT = "inconsistent"        # output tokens without a first token, cached > input
DUPLICATE = "duplicate"              # request_id already stored: the gateway sent it twice
ORPHAN_PHASE = "orphan_phase"        # first_token/end whose start never came within the grace period
LATE_PHASE = "late_phase"            # a phase that arrived after its generation was declared abandoned
INTERNAL = "internal_error"          # a bug of ours hit this event; kept, not lost, not looping
MALFORMED_OTLP = "malformed_otlp"    # an OTLP topic message that is no ExportTraceServiceRequest
STORE_REFUSED = "store_refused"      # the store refuses this row on every retry (a deterministic error)
OUTSIDE_RETENTION = "outside_retention"  # t0 older than the raw TTL: the store would delete it unseen
CONTROL_CHARACTER = "control_character"  # a label holds a control character (C0, DEL or C1)

ALL = (OVERSIZE, NOT_UTF8, MALFORMED_JSON, NOT_OBJECT, UNKNOWN_VERSION, BAD_KIND, MISSING_FIELD,
       UNKNOWN_FIELD, WRONG_TYPE, BAD_VALUE, NOT_FINITE, NEGATIVE, ABSURD, IMPOSSIBLE_ORDER,
       INCONSISTENT, DUPLICATE, ORPHAN_PHASE, LATE_PHASE, INTERNAL, MALFORMED_OTLP, STORE_REFUSED,
       OUTSIDE_RETENTION, CONTROL_CHARACTER)
