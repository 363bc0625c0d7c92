/*
 * The RC parameter model: one table describing every field of struct twohop_rc_settings (its MCA
 * name, unset value, allowed range, unit and the source of that range), and validation against it.
 * Validation never clamps: the first value outside its range is reported as
 *   "coll_twohop_<field>: value V is out of range LO..HI (<source>)".
 */
#ifndef TWOHOP_RC_PARAMS_H
#define TWOHOP_RC_PARAMS_H

#include "rc_api.h"

#include <optional>
#include <string>
#include <vector>

namespace twohop::rc {

struct KnobInfo {
    const char *field;     // rc_knobs.def field == struct field == MCA name without coll_twohop_
    const char *kind;      // params.def kind: INT, SIZE or BOOL
    long long unset;       // value meaning "not set" (UCX keeps its default)
    long long lo, hi;      // allowed range when set
    const char *unit;      // unit of the value
    const char *range_src; // where the range comes from
    long long (*get)(const twohop_rc_settings &);
};

/* The table, in rc_knobs.def order (generated from it). */
const std::vector<KnobInfo> &knob_table();

/* Default settings (everything unset), equal to TWOHOP_RC_SETTINGS_INIT. */
twohop_rc_settings default_settings();

/* Empty string when valid, else one line naming the parameter, the value and the allowed range. */
std::string validate(const twohop_rc_settings &s);

/* Timeout exponent requested by rc_timeout or rc_timeout_us (rounded up to the IB grid);
 * nullopt when neither is set. Precondition: validate(s) is empty. */
std::optional<int> requested_timeout_exp(const twohop_rc_settings &s);

/* "coll_twohop_" + field */
std::string mca_name(const char *field);

} // namespace twohop::rc

#endif
